// Reading and writing safetensors files (SPEC 5), the Hugging Face weight format.
//
// File layout:
//   bytes [0, 8)            N, the header length: a little-endian u64
//   bytes [8, 8 + N)        the header: a UTF-8 JSON object
//                             { "__metadata__": {"key": "value", ...},            (optional)
//                               "<tensor name>": {"dtype": "F32",
//                                                 "shape": [rows, cols],           ([] = scalar)
//                                                 "data_offsets": [begin, end]},   (bytes, relative
//                               ... }                                               to the data section)
//   bytes [8 + N, size)     the data section: every tensor's little-endian row-major elements
//
// SafetensorsFile reads a whole file, validates ALL of it (header length, JSON, every entry,
// the byte layout of the data section) in its constructor, and only then hands out tensors,
// converted from F32 / F16 / BF16 / F64 to float or double. write_safetensors writes F32.
// Every problem is a FileError naming the file and, where there is one, the tensor;
// docs/safetensors.md lists what is accepted and what is rejected.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/float_formats.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace diffattn {

/// Element types the reader converts from. The writer writes f32 only.
enum class SafetensorsDtype {
    f32,   ///< "F32": IEEE binary32
    f16,   ///< "F16": IEEE binary16
    bf16,  ///< "BF16": bfloat16, the top 16 bits of a binary32
    f64,   ///< "F64": IEEE binary64
};

/// The dtype as the file header spells it: "F32", "F16", "BF16", "F64".
inline const char* dtype_name(SafetensorsDtype dtype) noexcept {
    switch (dtype) {
        case SafetensorsDtype::f32: return "F32";
        case SafetensorsDtype::f16: return "F16";
        case SafetensorsDtype::bf16: return "BF16";
        case SafetensorsDtype::f64: return "F64";
    }
    return "?";
}

/// Bytes per element: 4 (F32), 2 (F16, BF16), 8 (F64).
inline std::size_t dtype_size(SafetensorsDtype dtype) noexcept {
    switch (dtype) {
        case SafetensorsDtype::f32: return 4;
        case SafetensorsDtype::f16: return 2;
        case SafetensorsDtype::bf16: return 2;
        case SafetensorsDtype::f64: return 8;
    }
    return 0;
}

namespace detail {

/// "[2, 3]" ("[]" for a scalar): a tensor shape for error messages.
inline std::string format_tensor_shape(const std::vector<Index>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i != 0) text += ", ";
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

/// `text` as a JSON string literal ("name", control characters and invalid UTF-8 escaped or
/// replaced), so that a tensor name in a message is unambiguous whatever bytes it holds.
inline std::string quote_json(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// A JSON value for an error message, cut to about 40 characters.
inline std::string brief_json(const nlohmann::json& value) {
    std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
}

/// True for a JSON integer >= 0 (parsed as unsigned, or as signed with a non-negative value: "-0").
inline bool is_non_negative_integer(const nlohmann::json& value) {
    return value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0);
}

/// `value` rounded to the nearest float into `out`; false when a finite `value` is too large in
/// magnitude for float (it would round to infinity). Infinities and NaNs convert as themselves.
inline bool narrow_to_float(double value, float& out) noexcept {
    constexpr double max_float = static_cast<double>(std::numeric_limits<float>::max());
    constexpr double rounds_to_infinity = 0x1.ffffffp127;  // 2^128 - 2^103: FLT_MAX + half an ulp
    const double magnitude = std::fabs(value);
    if (std::isfinite(value) && magnitude > max_float) {
        if (magnitude >= rounds_to_infinity) return false;
        out = value > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
        return true;
    }
    out = static_cast<float>(value);
    return true;
}

}  // namespace detail

/// A safetensors file read into memory and fully validated: every failure of the format is a
/// FileError thrown by the constructor, before any tensor is handed out.
///
///   SafetensorsFile file("model.safetensors");
///   RowMatrix<float> w = file.matrix<float>("lm_head.weight", vocab_size, d_model);
///   file.check_no_unexpected(expected_names);
///
/// The object owns a copy of the file (file size bytes); it is movable but not copyable, so
/// that the buffer is never duplicated by accident.
class SafetensorsFile {
public:
    /// Largest header accepted, in bytes (the reference implementation's limit).
    static constexpr std::uint64_t max_header_bytes = 100'000'000;
    /// Deepest JSON nesting accepted in the header (the format needs 3: root, entry, shape).
    static constexpr int max_header_depth = 8;
    /// Longest JSON array accepted in the header (shapes and data_offsets are its only arrays).
    static constexpr std::size_t max_header_array_size = 1024;

    /// One tensor of the file, as validated from its header entry.
    struct TensorInfo {
        SafetensorsDtype dtype = SafetensorsDtype::f32;
        std::vector<Index> shape;     ///< [] for a scalar; dimensions may be 0
        Index num_elements = 0;       ///< product of shape (1 for a scalar, 0 with a zero dimension)
        std::uint64_t data_begin = 0; ///< [data_begin, data_end): byte range in the data section,
        std::uint64_t data_end = 0;   ///< data_end - data_begin == num_elements * dtype_size(dtype)
    };

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
    std::size_t tensor_count() const noexcept { return tensors_.size(); }

    /// All tensors by name, in name order.
    const std::map<std::string, TensorInfo>& tensors() const noexcept { return tensors_; }

    /// Tensor names in sorted order (allocates the returned vector of tensor_count() names).
    std::vector<std::string> names() const {
        std::vector<std::string> result;
        result.reserve(tensors_.size());
        for (const auto& entry : tensors_) result.push_back(entry.first);
        return result;
    }

    /// The `__metadata__` string map (empty when the file has none).
    const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

    /// True when the file holds a tensor called `name`.
    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

    /// The entry of tensor `name`; FileError "missing tensor" when there is none.
    const TensorInfo& info(const std::string& name) const {
        const auto found = tensors_.find(name);
        if (found == tensors_.end()) {
            fail("missing tensor ", detail::quote_json(name), " (the file holds ", tensors_.size(),
                 " tensors)");
        }
        return found->second;
    }

    /// dtype of tensor `name` (FileError if missing).
    SafetensorsDtype dtype(const std::string& name) const { return info(name).dtype; }

    /// Shape of tensor `name` (FileError if missing).
    const std::vector<Index>& shape(const std::string& name) const { return info(name).shape; }

    /// The entry of tensor `name`, after checking that it exists and has exactly
    /// `expected_shape`; otherwise FileError naming the file, the tensor and both shapes.
    const TensorInfo& require_tensor(const std::string& name, const std::vector<Index>& expected_shape) const {
        const TensorInfo& tensor = info(name);
        if (tensor.shape != expected_shape) {
            fail("tensor ", detail::quote_json(name), " has shape ", detail::format_tensor_shape(tensor.shape),
                 " but shape ", detail::format_tensor_shape(expected_shape), " is expected");
        }
        return tensor;
    }

    /// FileError listing (by name, the first 16) every tensor of the file not in `expected`.
    void check_no_unexpected(const std::set<std::string>& expected) const {
        constexpr std::size_t listed_max = 16;
        std::size_t unexpected = 0;
        std::string listed;
        for (const auto& entry : tensors_) {
            if (expected.count(entry.first) != 0) continue;
            if (unexpected < listed_max) listed += (unexpected == 0 ? "" : ", ") + detail::quote_json(entry.first);
            ++unexpected;
        }
        if (unexpected != 0) {
            fail(unexpected, " unexpected tensor", unexpected == 1 ? "" : "s", ": ", listed,
                 unexpected > listed_max ? ", ..." : "");
        }
    }

    /// Converts tensor `name`, which must have exactly `expected_shape`, into
    /// dst[0 .. product(expected_shape)) in row-major order. T is float or double. Exact for
    /// F32 / F16 / BF16 (and F64 into double); F64 into float rounds to nearest, and a finite
    /// value beyond the float range is a FileError. No allocation.
    template <typename T>
    void read_into(const std::string& name, const std::vector<Index>& expected_shape, T* dst) const {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T must be float or double");
        const TensorInfo& tensor = require_tensor(name, expected_shape);
        require<Error>(dst != nullptr || tensor.num_elements == 0, "SafetensorsFile::read_into: dst is null");
        convert(name, tensor, dst);
    }

    /// Tensor `name`, which must be 2-D [rows, cols], as a new row-major matrix.
    template <typename T>
    RowMatrix<T> matrix(const std::string& name) const {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T must be float or double");
        const TensorInfo& tensor = info(name);
        if (tensor.shape.size() != 2) {
            fail("tensor ", detail::quote_json(name), " has shape ", detail::format_tensor_shape(tensor.shape),
                 ", not the 2 dimensions of a matrix");
        }
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
        const TensorInfo& tensor = info(name);
        if (tensor.shape.size() != 1) {
            fail("tensor ", detail::quote_json(name), " has shape ", detail::format_tensor_shape(tensor.shape),
                 ", not the 1 dimension of a vector");
        }
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
    /// from_bytes: the file content is given, not read.
    SafetensorsFile(std::vector<unsigned char> bytes, std::string name)
        : path_(std::move(name)), bytes_(std::move(bytes)) {
        parse_and_validate();
    }

    /// Throws FileError("safetensors file \"<path>\": <parts...>").
    template <typename... Parts>
    [[noreturn]] void fail(Parts&&... parts) const {
        throw FileError(detail::concat("safetensors file \"", path_, "\": ", std::forward<Parts>(parts)...));
    }

    /// Opens `path` into `in` after checking that it names a regular file; returns its size.
    /// Reads nothing yet (read_up_to does, step by step).
    std::uint64_t open_file(const std::filesystem::path& path, std::ifstream& in) const {
        namespace fs = std::filesystem;
        std::error_code error;
        const fs::file_status status = fs::status(path, error);
        if (status.type() == fs::file_type::not_found) {
            // ENOTDIR ("dir/file.safetensors/x") counts as not found; say which it was.
            if (error && error != std::errc::no_such_file_or_directory) fail("no such file (", error.message(), ")");
            fail("no such file");
        }
        if (error) fail("cannot access the file: ", error.message());
        switch (status.type()) {
            case fs::file_type::regular: break;
            case fs::file_type::directory: fail("is a directory, not a file");
            case fs::file_type::fifo: fail("is not a regular file but a FIFO (named pipe)");
            case fs::file_type::socket: fail("is not a regular file but a socket");
            case fs::file_type::character: fail("is not a regular file but a character device");
            case fs::file_type::block: fail("is not a regular file but a block device");
            default: fail("is not a regular file");
        }
        const std::uintmax_t size = fs::file_size(path, error);
        if (error) fail("cannot get the file size: ", error.message());
        if (size > static_cast<std::uintmax_t>(std::numeric_limits<std::streamsize>::max()) ||
            size > static_cast<std::uintmax_t>(bytes_.max_size())) {
            fail("the file is too large to read (", size, " bytes)");
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
        const auto count = static_cast<std::streamsize>(end - begin);
        in.read(reinterpret_cast<char*>(bytes_.data() + begin), count);
        if (in.gcount() != count) {
            fail("read error: got ", begin + static_cast<std::uint64_t>(in.gcount()), " of ", file_size,
                 " bytes (the file shrank while being read, or the device failed)");
        }
    }

    /// Validates bytes_ (the whole file, already in memory) and fills data_start_, tensors_ and metadata_.
    void parse_and_validate() {
        parse_and_validate(bytes_.size(), [](std::uint64_t) {});
    }

    /// Validates a file of file_size bytes and fills data_start_, tensors_ and metadata_.
    /// load(end) must make bytes_[0, end) hold the file's first `end` bytes; it is called with 8,
    /// then 8 + header length, then file_size, each time only after what it covers is validated.
    template <typename Load>
    void parse_and_validate(std::uint64_t file_size, Load&& load) {
        if (file_size < 8) fail("the file is ", file_size, " bytes, too short for the 8-byte header length");
        load(8);
        const std::uint64_t header_size = detail::load_u64_le(bytes_.data());
        if (header_size > max_header_bytes) {
            fail("header length ", header_size, " exceeds the limit of ", max_header_bytes, " bytes");
        }
        if (header_size > file_size - 8) {
            fail("header length ", header_size, " is larger than the ", file_size - 8,
                 " bytes that follow the 8-byte length field");
        }
        data_start_ = static_cast<std::size_t>(8 + header_size);
        const std::uint64_t data_size = file_size - data_start_;

        load(data_start_);
        const nlohmann::json header = parse_header_json(header_size);
        if (!header.is_object()) fail("the header is a JSON ", header.type_name(), ", not an object");
        for (auto item = header.begin(); item != header.end(); ++item) {
            if (item.key() == "__metadata__") {
                read_metadata(item.value());
            } else {
                tensors_.emplace(item.key(), parse_entry(item.key(), item.value(), data_size));
            }
        }
        check_layout(data_size);
        load(file_size);  // every byte of the data section belongs to a validated tensor
    }

    /// Parses bytes_[8, 8 + header_size) as JSON in two linear passes: a SAX pass that builds
    /// nothing and rejects invalid JSON, nesting deeper than max_header_depth, arrays longer than
    /// max_header_array_size and duplicate keys (which nlohmann's parser would silently resolve);
    /// then the DOM. (nlohmann's callback parser is not used: it rescans the parent object after
    /// every entry, quadratic in the number of tensors.) The DOM takes about ten times the header.
    nlohmann::json parse_header_json(std::uint64_t header_size) const {
        struct Checker {
            const SafetensorsFile& file;
            std::vector<std::set<std::string>> open_objects;  // keys seen so far, innermost object last
            std::vector<std::size_t> open_arrays;             // elements so far, innermost array last
            std::vector<bool> container_is_array;             // every open container, innermost last
            std::string top_level_key;                        // the entry being parsed
            std::string syntax_error;

            bool element() {  // a value (or a container) inside the innermost container
                if (!container_is_array.empty() && container_is_array.back() &&
                    ++open_arrays.back() > max_header_array_size) {
                    file.fail("the header holds an array of more than ", max_header_array_size,
                              " elements (a shape has at most that many dimensions)");
                }
                return true;
            }
            bool open(bool array) {
                element();
                if (container_is_array.size() >= static_cast<std::size_t>(max_header_depth)) {
                    file.fail("the header nests deeper than ", max_header_depth, " levels");
                }
                container_is_array.push_back(array);
                if (array) {
                    open_arrays.push_back(0);
                } else {
                    open_objects.emplace_back();
                }
                return true;
            }
            bool close() {
                if (container_is_array.back()) {
                    open_arrays.pop_back();
                } else {
                    open_objects.pop_back();
                }
                container_is_array.pop_back();
                return true;
            }
            bool null() { return element(); }
            bool boolean(bool) { return element(); }
            bool number_integer(nlohmann::json::number_integer_t) { return element(); }
            bool number_unsigned(nlohmann::json::number_unsigned_t) { return element(); }
            bool number_float(nlohmann::json::number_float_t, const nlohmann::json::string_t&) { return element(); }
            bool string(nlohmann::json::string_t&) { return element(); }
            bool binary(nlohmann::json::binary_t&) { return element(); }
            bool start_object(std::size_t) { return open(false); }
            bool end_object() { return close(); }
            bool start_array(std::size_t) { return open(true); }
            bool end_array() { return close(); }
            bool key(nlohmann::json::string_t& key) {
                const bool top_level = container_is_array.size() == 1;
                if (!open_objects.back().insert(key).second) {
                    if (top_level) file.fail("duplicate key ", detail::quote_json(key), " in the header");
                    file.fail("duplicate key ", detail::quote_json(key), " inside ", detail::quote_json(top_level_key));
                }
                if (top_level) top_level_key = key;
                return true;
            }
            bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& error) {
                syntax_error = error.what();
                return false;
            }
        };
        const char* first = reinterpret_cast<const char*>(bytes_.data()) + 8;
        // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0<anything>" would
        // parse; JSON text never holds a raw NUL (not even inside a string), so reject it first.
        if (const void* nul = std::memchr(first, 0, static_cast<std::size_t>(header_size))) {
            fail("the header is not valid JSON: it holds a NUL byte at header offset ",
                 static_cast<const char*>(nul) - first);
        }
        Checker checker{*this, {}, {}, {}, {}, {}};
        if (!nlohmann::json::sax_parse(first, first + header_size, &checker, nlohmann::json::input_format_t::json,
                                       /*strict=*/true, /*ignore_comments=*/false)) {
            fail("the header is not valid JSON: ", checker.syntax_error);
        }
        try {
            return nlohmann::json::parse(first, first + header_size, nullptr, /*allow_exceptions=*/true,
                                         /*ignore_comments=*/false);
        } catch (const nlohmann::json::exception& error) {
            fail("the header is not valid JSON: ", error.what());
        }
    }

    /// Validates `__metadata__` (an object of strings) into metadata_.
    void read_metadata(const nlohmann::json& value) {
        if (!value.is_object()) {
            fail("__metadata__ is a JSON ", value.type_name(), ", not an object of strings");
        }
        for (auto item = value.begin(); item != value.end(); ++item) {
            if (!item.value().is_string()) {
                fail("__metadata__ value of ", detail::quote_json(item.key()), " is ", detail::brief_json(item.value()),
                     ", not a string");
            }
            metadata_.emplace(item.key(), item.value().get<std::string>());
        }
    }

    /// Validates one tensor entry on its own: keys, dtype, shape (overflow-checked element and
    /// byte counts), data_offsets, and that its bytes lie inside the data_size-byte data section.
    TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, std::uint64_t data_size) const {
        const std::string tensor = "tensor " + detail::quote_json(name);
        if (!entry.is_object()) {
            fail(tensor, ": the entry is a JSON ", entry.type_name(),
                 ", not an object with dtype, shape and data_offsets");
        }
        for (auto item = entry.begin(); item != entry.end(); ++item) {
            if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
                fail(tensor, ": unexpected key ", detail::quote_json(item.key()),
                     " (an entry has exactly dtype, shape and data_offsets)");
            }
        }
        for (const char* key : {"dtype", "shape", "data_offsets"}) {
            if (!entry.contains(key)) fail(tensor, ": missing \"", key, "\"");
        }

        TensorInfo info;
        info.dtype = parse_dtype(tensor, entry.at("dtype"));

        const nlohmann::json& shape = entry.at("shape");
        if (!shape.is_array()) fail(tensor, ": shape is ", detail::brief_json(shape), ", not an array");
        info.shape.reserve(shape.size());
        bool has_zero_dim = false;
        for (std::size_t i = 0; i < shape.size(); ++i) {
            if (!detail::is_non_negative_integer(shape[i])) {
                fail(tensor, ": shape element ", i, " is ", detail::brief_json(shape[i]),
                     ", not a non-negative integer");
            }
            const auto dim = shape[i].get<std::uint64_t>();
            if (dim > static_cast<std::uint64_t>(std::numeric_limits<Index>::max())) {
                fail(tensor, ": shape dimension ", dim, " overflows the signed 64-bit index type");
            }
            has_zero_dim = has_zero_dim || dim == 0;
            info.shape.push_back(static_cast<Index>(dim));
        }
        // Element count: a zero dimension makes it 0 whatever the others; otherwise the product
        // must not pass 2^63 - 1 (checked before each multiplication, so it never wraps).
        std::uint64_t count = has_zero_dim ? 0 : 1;
        const auto max_count = static_cast<std::uint64_t>(std::numeric_limits<Index>::max());
        for (std::size_t i = 0; i < info.shape.size() && count != 0; ++i) {
            const auto dim = static_cast<std::uint64_t>(info.shape[i]);
            if (count > max_count / dim) {
                fail(tensor, ": shape ", detail::format_tensor_shape(info.shape),
                     " has more than 2^63 - 1 elements (overflow)");
            }
            count *= dim;
        }
        info.num_elements = static_cast<Index>(count);
        const std::uint64_t element_bytes = dtype_size(info.dtype);
        if (count > std::numeric_limits<std::uint64_t>::max() / element_bytes) {
            fail(tensor, ": shape ", detail::format_tensor_shape(info.shape), " of ", dtype_name(info.dtype),
                 " takes more than 2^64 - 1 bytes (overflow)");
        }
        const std::uint64_t byte_count = count * element_bytes;

        const nlohmann::json& offsets = entry.at("data_offsets");
        if (!offsets.is_array() || offsets.size() != 2 || !detail::is_non_negative_integer(offsets[0]) ||
            !detail::is_non_negative_integer(offsets[1])) {
            fail(tensor, ": data_offsets is ", detail::brief_json(offsets),
                 ", not [begin, end] with two non-negative integers");
        }
        info.data_begin = offsets[0].get<std::uint64_t>();
        info.data_end = offsets[1].get<std::uint64_t>();
        const std::string span = detail::concat("[", info.data_begin, ", ", info.data_end, "]");
        if (info.data_begin > info.data_end) fail(tensor, ": data_offsets ", span, " have begin after end");
        if (info.data_end - info.data_begin != byte_count) {
            fail(tensor, ": shape ", detail::format_tensor_shape(info.shape), " of ", dtype_name(info.dtype),
                 " needs ", byte_count, " bytes but data_offsets ", span, " span ",
                 info.data_end - info.data_begin, " bytes");
        }
        if (info.data_end > data_size) {
            fail(tensor, ": data_offsets ", span, " run past the end of file (the data section holds ", data_size,
                 " bytes)");
        }
        return info;
    }

    /// The dtype named by `value`: "F32", "F16", "BF16" or "F64"; any other is a FileError
    /// ("unsupported dtype" for the other safetensors dtypes, "unknown dtype" otherwise).
    SafetensorsDtype parse_dtype(const std::string& tensor, const nlohmann::json& value) const {
        if (!value.is_string()) fail(tensor, ": dtype is ", detail::brief_json(value), ", not a string");
        const std::string& text = value.get_ref<const std::string&>();
        for (SafetensorsDtype dtype :
             {SafetensorsDtype::f32, SafetensorsDtype::f16, SafetensorsDtype::bf16, SafetensorsDtype::f64}) {
            if (text == dtype_name(dtype)) return dtype;
        }
        static const char* const other_dtypes[] = {"BOOL", "U8",      "I8",      "I16",     "U16",     "I32",
                                                   "U32",  "I64",     "U64",     "C64",     "F8_E5M2", "F8_E4M3",
                                                   "F8_E8M0", "F4",   "F6_E2M3", "F6_E3M2"};
        const bool known = std::find(std::begin(other_dtypes), std::end(other_dtypes), text) != std::end(other_dtypes);
        fail(tensor, known ? ": unsupported dtype " : ": unknown dtype ", detail::quote_json(text),
             " (diffattn reads F32, F16, BF16 and F64)");
    }

    /// The tensors must tile the data_size-byte data section: sorted by offsets, they start at
    /// 0, each begins where the previous one ends (no gap, no overlap), and the last one ends at
    /// the end of the file. Zero-byte tensors may sit at any boundary.
    void check_layout(std::uint64_t data_size) const {
        struct Span {
            std::uint64_t begin, end;
            const std::string* name;
        };
        std::vector<Span> spans;
        spans.reserve(tensors_.size());
        for (const auto& entry : tensors_) spans.push_back({entry.second.data_begin, entry.second.data_end, &entry.first});
        std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
            return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
        });
        std::uint64_t cursor = 0;         // end of the bytes covered so far
        const Span* previous = nullptr;   // the last non-empty tensor, which ends at cursor
        for (const Span& span : spans) {
            const auto where = [&] {  // only when failing: formatting every tensor costs more than the check
                return detail::concat(detail::quote_json(*span.name), " [", span.begin, ", ", span.end, "]");
            };
            if (span.begin < cursor) {
                fail("data_offsets of tensors ", detail::quote_json(*previous->name), " [", previous->begin, ", ",
                     previous->end, "] and ", where(), " overlap");
            }
            if (span.begin > cursor) {
                if (previous == nullptr) {
                    fail("gap of ", span.begin - cursor, " bytes at the start of the data section: the first tensor ",
                         where(), " does not begin at offset 0");
                }
                fail("gap of ", span.begin - cursor, " bytes between tensor ", detail::quote_json(*previous->name), " [",
                     previous->begin, ", ", previous->end, "] and tensor ", where());
            }
            if (span.end > span.begin) {
                cursor = span.end;
                previous = &span;
            }
        }
        if (cursor != data_size) {
            fail("the tensors end at byte ", cursor, " of the ", data_size, "-byte data section: ", data_size - cursor,
                 " bytes before the end of file belong to no tensor");
        }
    }

    /// Converts the num_elements elements of `tensor` (tensor `name`) into dst[0, num_elements).
    template <typename T>
    void convert(const std::string& name, const TensorInfo& tensor, T* dst) const {
        const unsigned char* src = bytes_.data() + data_start_ + tensor.data_begin;
        const Index count = tensor.num_elements;
        switch (tensor.dtype) {
            case SafetensorsDtype::f32:
                for (Index i = 0; i < count; ++i) {
                    dst[i] = static_cast<T>(detail::float_from_bits(detail::load_u32_le(src + 4 * i)));
                }
                break;
            case SafetensorsDtype::f16:
                for (Index i = 0; i < count; ++i) {
                    dst[i] = static_cast<T>(detail::f16_bits_to_float(detail::load_u16_le(src + 2 * i)));
                }
                break;
            case SafetensorsDtype::bf16:
                for (Index i = 0; i < count; ++i) {
                    dst[i] = static_cast<T>(detail::bf16_bits_to_float(detail::load_u16_le(src + 2 * i)));
                }
                break;
            case SafetensorsDtype::f64:
                for (Index i = 0; i < count; ++i) {
                    const double value = detail::double_from_bits(detail::load_u64_le(src + 8 * i));
                    if constexpr (std::is_same_v<T, double>) {
                        dst[i] = value;
                    } else if (!detail::narrow_to_float(value, dst[i])) {
                        fail("tensor ", detail::quote_json(name), ": F64 element ", i, " is ", value,
                             ", outside the range of float");
                    }
                }
                break;
        }
    }

    std::string path_;                                 // as given, for error messages
    std::vector<unsigned char> bytes_;                 // the whole file: [file size]
    std::size_t data_start_ = 0;                       // 8 + header length
    std::map<std::string, TensorInfo> tensors_;        // by name
    std::map<std::string, std::string> metadata_;      // __metadata__
};

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
/// range (all before the file is touched), and FileError when the file cannot be written.
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
        std::uint64_t count = 1;
        for (const Index dim : view.shape()) {
            require<ShapeError>(dim >= 0, tensor, " has shape ", detail::format_tensor_shape(view.shape()),
                                " with a negative dimension");
        }
        for (const Index dim : view.shape()) {
            if (dim == 0) count = 0;
        }
        for (const Index dim : view.shape()) {
            if (count == 0) break;
            const auto udim = static_cast<std::uint64_t>(dim);
            require<ShapeError>(count <= (std::numeric_limits<std::uint64_t>::max() / 4) / udim, tensor, " of shape ",
                                detail::format_tensor_shape(view.shape()), " is too large (overflow)");
            count *= udim;
        }
        require<ShapeError>(count == 0 || view.float_data() != nullptr || view.double_data() != nullptr, tensor,
                            " has shape ", detail::format_tensor_shape(view.shape()), " but no data");
        if (view.double_data() != nullptr) {
            for (std::uint64_t i = 0; i < count; ++i) {
                float unused = 0;
                require<Error>(detail::narrow_to_float(view.double_data()[i], unused), tensor, ": element ", i, " is ",
                               view.double_data()[i], ", outside the range of F32");
            }
        }
        const std::uint64_t bytes = 4 * count;
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
    require<Error>(header_text.size() <= SafetensorsFile::max_header_bytes, "write_safetensors: the header of \"",
                   file, "\" would be ", header_text.size(), " bytes, over the ", SafetensorsFile::max_header_bytes,
                   "-byte limit");

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw FileError(detail::concat("write_safetensors: cannot open \"", file, "\" for writing"));
    unsigned char length[8];
    detail::store_u64_le(header_text.size(), length);
    out.write(reinterpret_cast<const char*>(length), sizeof length);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));

    constexpr std::size_t chunk = 1024;  // elements per write
    unsigned char buffer[4 * chunk];
    std::size_t index = 0;
    for (const auto& item : tensors) {
        const TensorView& view = item.second;
        const std::uint64_t count = element_counts[index++];
        for (std::uint64_t start = 0; start < count && out; start += chunk) {
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
            out.write(reinterpret_cast<const char*>(buffer), static_cast<std::streamsize>(4 * n));
        }
    }
    out.flush();
    const bool written = static_cast<bool>(out);
    out.close();
    if (!written || out.fail()) {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);  // never leave a truncated file behind
        throw FileError(detail::concat("write_safetensors: error while writing \"", file, "\""));
    }
}

}  // namespace diffattn
