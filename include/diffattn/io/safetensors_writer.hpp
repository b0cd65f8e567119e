// Writing safetensors files (SPEC 5): write_safetensors writes F32 tensors from float or double
// data, deterministically, in the layout SafetensorsFile reads; docs/safetensors.md.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/float_formats.hpp"
#include "diffattn/io/replace_file.hpp"
#include "diffattn/io/safetensors_format.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace diffattn {

/// A tensor to write: a shape and a non-owning pointer to its product(shape) elements, float
/// or double, contiguous and row-major. Built implicitly from RowMatrix and Vector (shape
/// [rows, cols] / [size]); the viewed data must outlive the write_safetensors call, so views of
/// temporaries are rejected at compile time.
class TensorView {
public:
    /// `shape` (any rank; [] is a scalar) over data[0, product(shape)); data may be null when
    /// that product is 0.
    TensorView(std::vector<Index> shape, const float* data) : shape_(std::move(shape)), float_data_(data) {}
    TensorView(std::vector<Index> shape, const double* data) : shape_(std::move(shape)), double_data_(data) {}
    /// A [rows x cols] row-major matrix as shape [rows, cols].
    TensorView(const RowMatrix<float>& matrix) : TensorView({matrix.rows(), matrix.cols()}, matrix.data()) {}
    TensorView(const RowMatrix<double>& matrix) : TensorView({matrix.rows(), matrix.cols()}, matrix.data()) {}
    /// A [size] vector as shape [size].
    TensorView(const Vector<float>& vector) : TensorView({vector.size()}, vector.data()) {}
    TensorView(const Vector<double>& vector) : TensorView({vector.size()}, vector.data()) {}
    TensorView(RowMatrix<float>&&) = delete;
    TensorView(RowMatrix<double>&&) = delete;
    TensorView(Vector<float>&&) = delete;
    TensorView(Vector<double>&&) = delete;

    /// The shape: [] for a scalar, [rows, cols] for a matrix, [size] for a vector.
    const std::vector<Index>& shape() const noexcept { return shape_; }
    /// The float elements, or null when the view holds doubles.
    const float* float_data() const noexcept { return float_data_; }
    /// The double elements, or null when the view holds floats.
    const double* double_data() const noexcept { return double_data_; }

private:
    std::vector<Index> shape_;
    const float* float_data_ = nullptr;
    const double* double_data_ = nullptr;
};

/// Writes `tensors` as F32 (doubles rounded to nearest float) to a safetensors file at `path`,
/// with `metadata` as `__metadata__` when it is not empty. Deterministic: tensors in name
/// order, data_offsets in that same order, the JSON header compact and padded with spaces to a
/// multiple of 8 bytes (as the reference implementation writes it), data little-endian.
/// Throws ShapeError for a negative dimension or missing data, Error for the reserved name
/// "__metadata__", names or metadata that are not UTF-8, or a finite double beyond the float
/// range (all before any file is touched). The file is written beside `path` and renamed over it
/// once complete (detail::ReplacingFile): FileError, with the reason, when `path` is not a regular
/// file (a symbolic link included) or cannot be written, and then `path` is left as it was.
/// Streams the data through a 4 KiB buffer: no allocation proportional to the tensors.
inline void write_safetensors(const std::filesystem::path& path, const std::map<std::string, TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
    const std::string file = path.string();
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json& entries = header["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& item : metadata) entries[item.first] = item.second;
    }
    std::vector<std::uint64_t> element_counts;  // [tensors.size()]
    element_counts.reserve(tensors.size());
    std::uint64_t offset = 0;
    for (const auto& [name, view] : tensors) {
        const std::string tensor = "write_safetensors: tensor " + detail::quote_json(name);
        require<Error>(name != "__metadata__", "write_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
        const detail::TensorSize size =
            detail::checked_tensor_size(view.shape(), SafetensorsDtype::f32, [&](const std::string& problem) {
                throw ShapeError(detail::concat(tensor, ": ", problem));
            });
        const auto count = static_cast<std::uint64_t>(size.elements);
        require<ShapeError>(count == 0 || view.float_data() != nullptr || view.double_data() != nullptr, tensor,
                            " has shape ", detail::format_tensor_shape(view.shape()), " but no data");
        if (view.double_data() != nullptr) {
            for (std::uint64_t i = 0; i < count; ++i) {
                float unused = 0;
                require<Error>(detail::narrow_to_float(view.double_data()[i], unused), tensor, ": element ", i, " is ",
                               view.double_data()[i], ", outside the range of F32");
            }
        }
        const std::uint64_t bytes = size.bytes;
        require<ShapeError>(offset <= std::numeric_limits<std::uint64_t>::max() - bytes,
                            "write_safetensors: the tensors take more than 2^64 - 1 bytes (overflow)");
        nlohmann::ordered_json entry = nlohmann::ordered_json::object();
        entry["dtype"] = "F32";
        entry["shape"] = nlohmann::ordered_json::array();
        for (const Index dim : view.shape()) entry["shape"].push_back(dim);
        entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + bytes});
        header[name] = std::move(entry);
        element_counts.push_back(count);
        offset += bytes;
    }
    std::string header_text;
    try {
        header_text = header.dump();
    } catch (const nlohmann::json::exception& error) {
        throw Error(detail::concat("write_safetensors: tensor names and metadata must be valid UTF-8 (", error.what(),
                                   ")"));
    }
    header_text.append((8 - header_text.size() % 8) % 8, ' ');
    require<Error>(header_text.size() <= SafetensorsLimits::max_header_bytes, "write_safetensors: the header of \"",
                   file, "\" would be ", detail::bytes_count(header_text.size()), ", over the ",
                   SafetensorsLimits::max_header_bytes, "-byte limit");

    detail::ReplacingFile out(path, "write_safetensors");
    unsigned char length[8];
    detail::store_u64_le(header_text.size(), length);
    out.write(length, sizeof length);
    out.write(header_text.data(), header_text.size());

    constexpr std::size_t chunk = 1024;  // elements per write
    unsigned char buffer[4 * chunk];
    std::size_t index = 0;
    for (const auto& item : tensors) {
        const TensorView& view = item.second;
        const std::uint64_t count = element_counts[index++];
        for (std::uint64_t start = 0; start < count; start += chunk) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, count - start));
            for (std::size_t j = 0; j < n; ++j) {
                float value = 0;
                if (view.float_data() != nullptr) {
                    value = view.float_data()[start + j];
                } else {
                    detail::narrow_to_float(view.double_data()[start + j], value);  // range checked above
                }
                detail::store_u32_le(detail::bits_from_float(value), buffer + 4 * j);
            }
            out.write(buffer, 4 * n);
        }
    }
    out.commit();
}

}  // namespace diffattn
