// Reading safetensors files (docs/math.md §5), the Hugging Face weight format.
//
// SafetensorsFile reads a whole file (or maps it, SafetensorsFile::mapped), has
// check_safetensors_header validate ALL of it (header length, JSON, every entry, the byte layout
// of the data section) in its constructor, and only then hands out tensors, converted from F32 /
// F16 / BF16 / F64 to float or double. Every problem is a FileError naming the file and, where
// there is one, the tensor; docs/safetensors.md lists what is accepted and what is rejected.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/float_formats.hpp"
#include "diffattn/io/detail/tensor_elements.hpp"
#include "diffattn/io/file_kind.hpp"
#include "diffattn/io/mapped_file.hpp"
#include "diffattn/io/safetensors_format.hpp"
#include "diffattn/io/safetensors_header.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ios>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace diffattn {

/// A safetensors file read into memory and fully validated: every failure of the format is a
/// FileError thrown by the constructor, before any tensor is handed out.
///
///   SafetensorsFile file("model.safetensors");
///   RowMatrix<float> w = file.matrix<float>("lm_head.weight", vocab_size, d_model);
///   file.check_no_unexpected(expected_names);
///
/// The object owns a copy of the file (file size bytes), or a read-only mapping of it (mapped());
/// it is movable but not copyable, so that the buffer is never duplicated by accident.
class SafetensorsFile {
public:
    /// The limits of SafetensorsLimits, under their earlier names.
    static constexpr std::uint64_t max_header_bytes = SafetensorsLimits::max_header_bytes;
    static constexpr int max_header_depth = SafetensorsLimits::max_header_depth;
    static constexpr std::size_t max_header_array_size = SafetensorsLimits::max_header_array_size;

    /// One tensor of the file, as validated from its header entry.
    using TensorInfo = SafetensorsTensorInfo;

    /// Reads and validates the file at `path` (holds its size in bytes afterwards).
    /// Throws FileError when the file is missing, not a regular file, unreadable or malformed.
    /// Memory stays bounded by what has been validated: the file is read in three steps (the
    /// 8-byte length; the header, once its length is checked against the limit and the file size;
    /// the data, once every header entry and the layout are valid), so a bad header never costs
    /// more than its own bytes (at most max_header_bytes) plus their parsed JSON.
    explicit SafetensorsFile(const std::filesystem::path& path) : path_(path.string()) {
        std::ifstream in;
        const std::uint64_t file_size = open_file(path, in);
        parse_and_validate(file_size, [&](std::uint64_t end) { read_up_to(in, end, file_size); });
    }

    /// Maps the file at `path` read-only (io/mapped_file.hpp) instead of reading it: the same
    /// checks and FileErrors, but only the header's pages are touched until tensors are read, and
    /// release() hands a converted tensor's pages back. For checkpoints larger than memory allows
    /// twice (DecoderModel::load).
    static SafetensorsFile mapped(const std::filesystem::path& path) {
        SafetensorsFile file;
        file.path_ = path.string();
        file.mapping_ = detail::MappedFile(path, detail::concat("safetensors file \"", file.path_, "\""));
        file.data_ = file.mapping_.data();
        file.parse_and_validate(file.mapping_.size(), [](std::uint64_t) {});
        return file;
    }

    /// Validates `bytes`, the whole content of a safetensors file already in memory (weights
    /// embedded in a program, tests, the fuzzer: no temporary file needed). `name` stands in
    /// for the path in error messages. Same checks and FileErrors as the path constructor.
    static SafetensorsFile from_bytes(std::vector<unsigned char> bytes, std::string name = "<memory>") {
        return SafetensorsFile(std::move(bytes), std::move(name));
    }

    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    SafetensorsFile(SafetensorsFile&&) = default;
    SafetensorsFile& operator=(SafetensorsFile&&) = default;
    ~SafetensorsFile() = default;

    /// The path the file was opened with, as named in error messages.
    const std::string& path() const noexcept { return path_; }

    /// Number of tensors in the file (`__metadata__` is not a tensor).
    std::size_t tensor_count() const noexcept { return header_.tensors.size(); }

    /// All tensors by name, in name order.
    const std::map<std::string, TensorInfo>& tensors() const noexcept { return header_.tensors; }

    /// Tensor names in sorted order (allocates the returned vector of tensor_count() names).
    std::vector<std::string> names() const {
        std::vector<std::string> result;
        result.reserve(header_.tensors.size());
        for (const auto& entry : header_.tensors) result.push_back(entry.first);
        return result;
    }

    /// The `__metadata__` string map (empty when the file has none).
    const std::map<std::string, std::string>& metadata() const noexcept { return header_.metadata; }

    /// True when the file holds a tensor called `name`.
    bool contains(const std::string& name) const { return header_.tensors.count(name) != 0; }

    /// The entry of tensor `name`; FileError "missing tensor" when there is none.
    const TensorInfo& info(const std::string& name) const {
        const auto found = header_.tensors.find(name);
        if (found == header_.tensors.end()) {
            fail("missing tensor ", detail::quote_json(name), " (the file holds ",
                 detail::Counted{header_.tensors.size(), "tensor"}, ")");
        }
        return found->second;
    }

    /// dtype of tensor `name` (FileError if missing).
    SafetensorsDtype dtype(const std::string& name) const { return info(name).dtype; }

    /// Shape of tensor `name` (FileError if missing).
    const std::vector<Index>& shape(const std::string& name) const { return info(name).shape; }

    /// The entry of tensor `name`, after checking that it exists and has exactly
    /// `expected_shape` (a tensor of weight blocks: holds weights of that shape); otherwise
    /// FileError naming the file, the tensor and both shapes.
    const TensorInfo& require_tensor(const std::string& name, const std::vector<Index>& expected_shape) const {
        const TensorInfo& tensor = info(name);
        if (tensor.weight_shape() != expected_shape) {
            fail("tensor ", detail::quote_json(name), " has shape ", detail::format_tensor_shape(tensor.shape),
                 tensor.blocks == WeightFormat::f32
                     ? std::string()
                     : detail::concat(" (", to_string(tensor.blocks), " blocks of weights ",
                                      detail::format_tensor_shape(tensor.weight_shape()), ")"),
                 " but shape ", detail::format_tensor_shape(expected_shape), " is expected");
        }
        return tensor;
    }

    /// FileError listing (by name, the first 16) every tensor of the file not in `expected`;
    /// names ending in `ignored_suffix` (if not null) are skipped.
    void check_no_unexpected(const std::set<std::string>& expected, const char* ignored_suffix = nullptr) const {
        constexpr std::size_t listed_max = 16;
        std::size_t unexpected = 0;
        std::string listed;
        for (const auto& entry : header_.tensors) {
            if (expected.count(entry.first) != 0 || detail::ends_with(entry.first, ignored_suffix)) continue;
            if (unexpected < listed_max) listed += (unexpected == 0 ? "" : ", ") + detail::quote_json(entry.first);
            ++unexpected;
        }
        if (unexpected != 0) {
            fail(detail::Counted{unexpected, "unexpected tensor"}, ": ", listed,
                 unexpected > listed_max ? ", ..." : "");
        }
    }

    /// Converts tensor `name`, which must have exactly `expected_shape`, into
    /// dst[0 .. product(expected_shape)) in row-major order. T is float or double. Exact for
    /// F32 / F16 / BF16 (and F64 into double); F64 into float rounds to nearest, and a finite
    /// value beyond the float range is a FileError. Weight blocks decode to the weights they stand
    /// for. No allocation.
    template <typename T>
    void read_into(const std::string& name, const std::vector<Index>& expected_shape, T* dst) const {
        read_rows_into(name, expected_shape, 0, expected_shape.empty() ? 1 : expected_shape[0], dst);
    }

    /// As read_into, for rows [first_row, first_row + rows) of the tensor's first dimension only:
    /// into dst [rows x the product of the other dimensions].
    template <typename T>
    void read_rows_into(const std::string& name, const std::vector<Index>& expected_shape, Index first_row, Index rows,
                        T* dst) const {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T must be float or double");
        const TensorInfo& tensor = require_tensor(name, expected_shape);
        require<Error>(dst != nullptr || tensor.weight_count() == 0, "SafetensorsFile::read_into: dst is null");
        const RowSpan span = row_span(tensor, first_row, rows);
        const unsigned char* src = data_ + data_start_ + tensor.data_begin + span.first_byte;
        if (tensor.blocks != WeightFormat::f32) {
            detail::decode_weight_rows(src, tensor.blocks, rows, span.width, dst);
            return;
        }
        const Index too_large = detail::decode_tensor_elements(src, tensor.dtype, rows * span.width, dst);
        if (too_large >= 0) {
            fail("tensor ", detail::quote_json(name), ": F64 element ", first_row * span.width + too_large, " is ",
                 detail::double_from_bits(detail::load_u64_le(src + 8 * too_large)), ", outside the range of float");
        }
    }

    /// The bytes of rows [first_row, first_row + rows) of tensor `name` as the file stores them
    /// (weight blocks: row after row of blocks), which hold `bytes` bytes.
    const unsigned char* stored_rows(const std::string& name, Index first_row, Index rows, std::size_t& bytes) const {
        const TensorInfo& tensor = info(name);
        const RowSpan span = row_span(tensor, first_row, rows);
        bytes = span.bytes;
        return data_ + data_start_ + tensor.data_begin + span.first_byte;
    }

    /// Hands back the resident pages of rows [first_row, first_row + rows) of tensor `name`, as
    /// release() does for the whole tensor.
    void release_rows(const std::string& name, Index first_row, Index rows) const {
        const TensorInfo& tensor = info(name);
        const RowSpan span = row_span(tensor, first_row, rows);
        const std::size_t begin = data_start_ + tensor.data_begin + span.first_byte;
        mapping_.release(begin, begin + span.bytes);
    }

    /// Hands back the resident pages of tensor `name`'s bytes in a mapped file (they are read
    /// from the file again if the tensor is read again); nothing for a file read into memory.
    void release(const std::string& name) const {
        const TensorInfo& tensor = info(name);
        mapping_.release(data_start_ + tensor.data_begin, data_start_ + tensor.data_end);
    }

    /// Tensor `name`, which must be 2-D [rows, cols], as a new row-major matrix.
    template <typename T>
    RowMatrix<T> matrix(const std::string& name) const {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T must be float or double");
        const TensorInfo& tensor = require_rank(name, 2, "the 2 dimensions of a matrix");
        RowMatrix<T> result(tensor.shape[0], tensor.shape[1]);
        convert(name, tensor, result.data());
        return result;
    }

    /// Tensor `name`, which must have shape [rows, cols], as a new [rows x cols] row-major matrix.
    template <typename T>
    RowMatrix<T> matrix(const std::string& name, Index rows, Index cols) const {
        require_tensor(name, {rows, cols});
        return matrix<T>(name);
    }

    /// Tensor `name`, which must be 1-D [size], as a new vector.
    template <typename T>
    Vector<T> vector(const std::string& name) const {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T must be float or double");
        const TensorInfo& tensor = require_rank(name, 1, "the 1 dimension of a vector");
        Vector<T> result(tensor.shape[0]);
        convert(name, tensor, result.data());
        return result;
    }

    /// Tensor `name`, which must have shape [size], as a new vector of `size` entries.
    template <typename T>
    Vector<T> vector(const std::string& name, Index size) const {
        require_tensor(name, {size});
        return vector<T>(name);
    }

    /// Tensor `name`, which must be a scalar (shape []), as a value.
    template <typename T>
    T scalar(const std::string& name) const {
        T value{};
        read_into<T>(name, {}, &value);
        return value;
    }

private:
    SafetensorsFile() = default;

    /// from_bytes: the file content is given, not read.
    SafetensorsFile(std::vector<unsigned char> bytes, std::string name)
        : path_(std::move(name)), bytes_(std::move(bytes)) {
        data_ = bytes_.data();
        parse_and_validate(bytes_.size(), [](std::uint64_t) {});
    }


    /// Throws FileError("safetensors file \"<path>\": <parts...>").
    template <typename... Parts>
    [[noreturn]] void fail(Parts&&... parts) const {
        throw detail::safetensors_file_error(path_, std::forward<Parts>(parts)...);
    }

    /// The entry of tensor `name`, which must have `rank` dimensions (`what` names them).
    const TensorInfo& require_rank(const std::string& name, std::size_t rank, const char* what) const {
        const TensorInfo& tensor = info(name);
        if (tensor.shape.size() != rank) {
            fail("tensor ", detail::quote_json(name), " has shape ", detail::format_tensor_shape(tensor.shape),
                 ", not ", what);
        }
        return tensor;
    }

    /// Rows [first_row, first_row + rows) of a tensor's first dimension: the weights of a row
    /// (the product of the other dimensions, or blocks * 32), and where their bytes lie.
    struct RowSpan {
        Index width = 0;              // weights of one row
        std::size_t first_byte = 0;   // from the tensor's first byte
        std::size_t bytes = 0;
    };
    RowSpan row_span(const TensorInfo& tensor, Index first_row, Index rows) const {
        const std::vector<Index> shape = tensor.weight_shape();
        const Index all_rows = shape.empty() ? 1 : shape[0];
        require<Error>(first_row >= 0 && rows >= 0 && first_row + rows <= all_rows, "SafetensorsFile: rows [",
                       first_row, ", ", first_row + rows, ") of a tensor of ", all_rows, " rows");
        RowSpan span;
        span.width = all_rows == 0 ? 0 : tensor.weight_count() / all_rows;
        const std::size_t row_bytes = all_rows == 0 ? 0 : static_cast<std::size_t>((tensor.data_end - tensor.data_begin) / static_cast<std::uint64_t>(all_rows));
        span.first_byte = static_cast<std::size_t>(first_row) * row_bytes;
        span.bytes = static_cast<std::size_t>(rows) * row_bytes;
        return span;
    }

    /// Opens `path` into `in` after checking that it names a regular file; returns its size.
    /// Reads nothing yet (read_up_to does, step by step).
    std::uint64_t open_file(const std::filesystem::path& path, std::ifstream& in) const {
        namespace fs = std::filesystem;
        detail::require_regular_file(path, [this](const auto&... parts) { fail(parts...); });
        std::error_code error;
        const std::uintmax_t size = fs::file_size(path, error);
        if (error) fail("cannot get the file size: ", error.message());
        if (size > static_cast<std::uintmax_t>(std::numeric_limits<std::streamsize>::max()) ||
            size > static_cast<std::uintmax_t>(bytes_.max_size())) {
            fail("the file is too large to read (", detail::bytes_count(size), ")");
        }
        errno = 0;
        in.open(path, std::ios::binary);
        if (!in) {
            const int reason = errno;  // libstdc++'s filebuf reports open(2)'s errno
            if (reason != 0) fail("cannot open the file for reading: ", std::generic_category().message(reason));
            fail("cannot open the file for reading");
        }
        return static_cast<std::uint64_t>(size);
    }

    /// Appends bytes [bytes_.size(), end) of the file (file_size bytes long) to bytes_.
    void read_up_to(std::ifstream& in, std::uint64_t end, std::uint64_t file_size) {
        const std::size_t begin = bytes_.size();
        if (end <= begin) return;
        bytes_.resize(static_cast<std::size_t>(end));
        data_ = bytes_.data();
        const auto count = static_cast<std::streamsize>(end - begin);
        in.read(reinterpret_cast<char*>(bytes_.data() + begin), count);
        if (in.gcount() != count) {
            fail("read error: got ", begin + static_cast<std::uint64_t>(in.gcount()), " of ",
                 detail::bytes_count(file_size), " (the file shrank while being read, or the device failed)");
        }
    }

    /// Validates a file of file_size bytes and fills data_start_ and header_.
    /// load(end) must make bytes_[0, end) hold the file's first `end` bytes; it is called with 8,
    /// then 8 + header length, then file_size, each time only after what it covers is validated.
    template <typename Load>
    void parse_and_validate(std::uint64_t file_size, Load&& load) {
        if (file_size < 8) {
            fail("the file is ", detail::bytes_count(file_size), ", too short for the 8-byte header length");
        }
        load(8);
        const std::uint64_t header_size = detail::load_u64_le(data_);
        if (header_size > max_header_bytes) {
            fail("header length ", header_size, " exceeds the limit of ", detail::bytes_count(max_header_bytes));
        }
        if (header_size > file_size - 8) {
            fail("header length ", header_size, " is larger than the ", detail::bytes_count(file_size - 8),
                 " that follow the 8-byte length field");
        }
        data_start_ = static_cast<std::size_t>(8 + header_size);
        load(data_start_);
        header_ = check_safetensors_header(reinterpret_cast<const char*>(data_) + 8,
                                           static_cast<std::size_t>(header_size), file_size - data_start_, path_);
        load(file_size);  // every byte of the data section belongs to a validated tensor
    }

    /// Converts every weight of tensor `name` into dst[0, weight_count()).
    template <typename T>
    void convert(const std::string& name, const TensorInfo& tensor, T* dst) const {
        read_rows_into(name, tensor.weight_shape(), 0, tensor.weight_shape().empty() ? 1 : tensor.weight_shape()[0], dst);
    }

    std::string path_;                 // as given, for error messages
    std::vector<unsigned char> bytes_; // the whole file: [file size] (empty when mapped)
    detail::MappedFile mapping_;       // mapped(): the whole file, read-only
    const unsigned char* data_ = nullptr;  // bytes_.data() or mapping_.data()
    std::size_t data_start_ = 0;       // 8 + header length
    SafetensorsHeader header_;         // the validated tensors and __metadata__
};

}  // namespace diffattn
