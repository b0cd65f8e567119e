// Writing a safetensors file whose tensors are produced while it is written (docs/safetensors.md,
// "Writing"): each tensor gives its dtype, its shape and a function that writes its bytes, so that
// a file larger than memory (a quantized checkpoint's shard, model/quantized_checkpoint.hpp) is
// written with one tensor's chunk in memory at a time. The header is computed first from the
// shapes; the bytes then follow in the order given, into a file that replaces the target only once
// complete (detail::ReplacingFile).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/float_formats.hpp"
#include "diffattn/io/replace_file.hpp"
#include "diffattn/io/safetensors_format.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace diffattn {

/// Where a streamed tensor writes its bytes: it must write exactly the tensor's size.
class TensorByteSink {
public:
    virtual ~TensorByteSink() = default;
    virtual void write(const void* data, std::size_t size) = 0;
};

/// One tensor of a streamed file: its dtype and shape (as the header states them) and the function
/// that writes its bytes, little-endian, row-major.
struct StreamedTensor {
    std::string name;
    SafetensorsDtype dtype = SafetensorsDtype::f32;
    std::vector<Index> shape;
    std::function<void(TensorByteSink&)> write;
};

/// Writes `tensors` (data in this order, header entries in name order) with `metadata` to a
/// safetensors file at `path`, replacing it once complete. Error for a reserved or repeated name,
/// more tensors, metadata or header bytes than SafetensorsLimits allows (before any file is
/// touched), or a tensor that writes another number of bytes than its shape holds; FileError when
/// the file cannot be written (the target is then left as it was).
inline void write_safetensors_streamed(const std::filesystem::path& path, const std::vector<StreamedTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {}) {
    const char* who = "write_safetensors";
    require<Error>(tensors.size() <= SafetensorsLimits::max_tensors, who, ": ", tensors.size(),
                   " tensors, over the limit of ", SafetensorsLimits::max_tensors, " that SafetensorsFile reads");
    require<Error>(metadata.size() <= SafetensorsLimits::max_metadata_entries, who, ": ", metadata.size(),
                   " metadata entries, over the limit of ", SafetensorsLimits::max_metadata_entries);
    std::map<std::string, nlohmann::ordered_json> entries;  // name order in the header
    std::vector<std::uint64_t> sizes;
    std::uint64_t offset = 0;
    for (const StreamedTensor& tensor : tensors) {
        const std::string what = detail::concat(who, ": tensor ", detail::quote_json(tensor.name));
        require<Error>(tensor.name != "__metadata__", who, ": \"__metadata__\" is reserved and cannot name a tensor");
        const detail::TensorSize size = detail::checked_tensor_size(
            tensor.shape, tensor.dtype, [&](const std::string& problem) { throw ShapeError(detail::concat(what, ": ", problem)); });
        require<ShapeError>(offset <= std::numeric_limits<std::uint64_t>::max() - size.bytes, who,
                            ": the tensors take more than 2^64 - 1 bytes (overflow)");
        nlohmann::ordered_json entry = nlohmann::ordered_json::object();
        entry["dtype"] = dtype_name(tensor.dtype);
        entry["shape"] = nlohmann::ordered_json::array();
        for (const Index dim : tensor.shape) entry["shape"].push_back(dim);
        entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + size.bytes});
        require<Error>(entries.emplace(tensor.name, std::move(entry)).second, what, " is given twice");
        sizes.push_back(size.bytes);
        offset += size.bytes;
    }
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json& items = header["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& item : metadata) items[item.first] = item.second;
    }
    for (auto& [name, entry] : entries) header[name] = std::move(entry);
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& error) {
        throw Error(detail::concat(who, ": tensor names and metadata must be valid UTF-8 (", error.what(), ")"));
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    require<Error>(text.size() <= SafetensorsLimits::max_header_bytes, who, ": the header of \"", path.string(),
                   "\" would be ", detail::bytes_count(text.size()), ", over the ", SafetensorsLimits::max_header_bytes,
                   "-byte limit");

    detail::ReplacingFile out(path, who);
    unsigned char length[8];
    detail::store_u64_le(text.size(), length);
    out.write(length, sizeof length);
    out.write(text.data(), text.size());
    struct CountingSink : TensorByteSink {
        detail::ReplacingFile& file;
        std::uint64_t written = 0;
        explicit CountingSink(detail::ReplacingFile& f) : file(f) {}
        void write(const void* data, std::size_t size) override {
            file.write(data, size);
            written += size;
        }
    };
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        CountingSink sink(out);
        tensors[i].write(sink);
        require<Error>(sink.written == sizes[i], who, ": tensor ", detail::quote_json(tensors[i].name), " wrote ",
                       sink.written, " bytes but its shape holds ", sizes[i]);
    }
    out.commit();
}

}  // namespace diffattn
