// The safetensors header checker (docs/math.md §5): parses the JSON header of a safetensors
// file and validates all of it, every entry and the layout of the data section, before any tensor
// data is read. Every problem is a FileError "safetensors file \"<path>\": ..." naming the tensor
// where there is one; docs/safetensors.md lists what is accepted and what is rejected.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/strict_json.hpp"
#include "diffattn/io/safetensors_format.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace diffattn {

/// One tensor of a safetensors file, as validated from its header entry.
struct SafetensorsTensorInfo {
    SafetensorsDtype dtype = SafetensorsDtype::f32;
    std::vector<Index> shape;     ///< [] for a scalar; dimensions may be 0
    Index num_elements = 0;       ///< product of shape (1 for a scalar, 0 with a zero dimension)
    std::uint64_t data_begin = 0; ///< [data_begin, data_end): byte range in the data section,
    std::uint64_t data_end = 0;   ///< data_end - data_begin == num_elements * dtype_size(dtype)
    /// q8_0 or q4_0 for a tensor of weight blocks (a U8 tensor [rows, blocks, block bytes] in a file
    /// whose __metadata__ names kQuantizedWeightsKey, docs/safetensors.md); f32 for any other.
    WeightFormat blocks = WeightFormat::f32;

    /// The shape of the weights the tensor holds: [rows, blocks * 32] for a tensor of weight
    /// blocks, the shape otherwise.
    std::vector<Index> weight_shape() const {
        if (blocks == WeightFormat::f32) return shape;
        return {shape[0], shape[1] * kWeightBlock};
    }
    /// Number of weights it holds (num_elements, but for blocks the weights they stand for).
    Index weight_count() const { return blocks == WeightFormat::f32 ? num_elements : shape[0] * shape[1] * kWeightBlock; }
};

/// The __metadata__ key of a quantized checkpoint's files (docs/safetensors.md, "Quantized
/// weights"): its value is the weight format the checkpoint was quantized to.
inline constexpr const char* kQuantizedWeightsKey = "diffattn.weights";

/// A validated header: the tensors and the `__metadata__` strings.
struct SafetensorsHeader {
    std::map<std::string, SafetensorsTensorInfo> tensors;  ///< by name
    std::map<std::string, std::string> metadata;           ///< __metadata__ (empty when absent)
};

namespace detail {

/// FileError("safetensors file \"<file>\": <parts...>"), the form of every reader message.
template <typename... Parts>
FileError safetensors_file_error(const std::string& file, Parts&&... parts) {
    return FileError(concat("safetensors file \"", file, "\": ", std::forward<Parts>(parts)...));
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

/// Checks the header of one file; check_safetensors_header is its entry point.
class SafetensorsHeaderChecker {
public:
    SafetensorsHeaderChecker(const std::string& file, std::uint64_t data_size) : file_(file), data_size_(data_size) {}

    /// Parses and validates text[0, size) into the header.
    SafetensorsHeader check(const char* text, std::size_t size) {
        SafetensorsHeader result;
        const nlohmann::json header = parse_json(text, size);
        if (!header.is_object()) fail("the header is a JSON ", header.type_name(), ", not an object");
        for (auto item = header.begin(); item != header.end(); ++item) {
            if (item.key() == "__metadata__") {
                read_metadata(item.value(), result.metadata);
            } else {
                result.tensors.emplace(item.key(), parse_entry(item.key(), item.value()));
            }
        }
        check_layout(result.tensors);
        check_weight_blocks(result);
        return result;
    }

private:
    template <typename... Parts>
    [[noreturn]] void fail(Parts&&... parts) const {
        throw safetensors_file_error(file_, std::forward<Parts>(parts)...);
    }

    /// Parses text[0, size) as JSON in two linear passes: a SAX pass (detail::check_json_text) that keeps nothing but the
    /// keys of the open objects and rejects invalid JSON, nesting deeper than max_header_depth,
    /// arrays and entry objects larger than max_header_array_size, duplicate keys (which
    /// nlohmann's parser would silently resolve), and more than max_tensors tensor entries or
    /// max_metadata_entries __metadata__ entries; then the DOM. Past a count limit the pass keeps
    /// no more keys and only counts, so that the message gives the count: a header of millions of
    /// tiny entries costs little more than its own bytes until it is refused, and the DOM (about ten
    /// times the bytes of the entries) is built only for a header within every limit.
    /// (nlohmann's callback parser is not used: it rescans the parent object after every entry,
    /// quadratic in the number of tensors.)
    nlohmann::json parse_json(const char* first, std::size_t size) const {
        JsonLimits limits;
        limits.max_depth = SafetensorsLimits::max_header_depth;
        limits.max_array_size = SafetensorsLimits::max_header_array_size;
        limits.max_object_members = SafetensorsLimits::max_header_array_size;
        limits.max_top_level_keys = SafetensorsLimits::max_tensors;
        limits.counted_object = "__metadata__";
        limits.max_counted_members = SafetensorsLimits::max_metadata_entries;
        const JsonProblem problem = check_json_text(first, first + size, limits);
        switch (problem.kind) {
            case JsonProblem::Kind::none: break;
            case JsonProblem::Kind::nul_byte:
                fail("the header is not valid JSON: it holds a NUL byte at header offset ", problem.offset);
            case JsonProblem::Kind::syntax: fail("the header is not valid JSON: ", problem.message);
            case JsonProblem::Kind::too_deep:
                fail("the header nests deeper than ", SafetensorsLimits::max_header_depth, " levels");
            case JsonProblem::Kind::array_too_long:
                fail("the header holds an array of more than ", SafetensorsLimits::max_header_array_size,
                     " elements (a shape has at most that many dimensions)");
            case JsonProblem::Kind::object_too_large:
                fail("the header holds an object of more than ", SafetensorsLimits::max_header_array_size,
                     " members inside ", quote_json(problem.top_level_key), " (an entry has 3)");
            case JsonProblem::Kind::duplicate_key:
                if (problem.top_level_key.empty()) fail("duplicate key ", problem.key, " in the header");
                fail("duplicate key ", problem.key, " inside ", quote_json(problem.top_level_key));
            case JsonProblem::Kind::too_many_top_level_keys:
                fail("the header holds ", problem.count, " tensor entries, over the limit of ",
                     SafetensorsLimits::max_tensors);
            case JsonProblem::Kind::too_many_counted_members:
                fail("__metadata__ holds ", problem.count, " entries, over the limit of ",
                     SafetensorsLimits::max_metadata_entries);
            case JsonProblem::Kind::too_many_values: break;  // max_values is not set: the counts above bound it
        }
        try {
            return nlohmann::json::parse(first, first + size, nullptr, /*allow_exceptions=*/true,
                                         /*ignore_comments=*/false);
        } catch (const nlohmann::json::exception& error) {
            fail("the header is not valid JSON: ", error.what());
        }
    }

    /// Validates `__metadata__` (an object of strings) into `metadata`.
    void read_metadata(const nlohmann::json& value, std::map<std::string, std::string>& metadata) const {
        if (!value.is_object()) {
            fail("__metadata__ is a JSON ", value.type_name(), ", not an object of strings");
        }
        for (auto item = value.begin(); item != value.end(); ++item) {
            if (!item.value().is_string()) {
                fail("__metadata__ value of ", quote_json(item.key()), " is ", brief_json(item.value()),
                     ", not a string");
            }
            metadata.emplace(item.key(), item.value().get<std::string>());
        }
    }

    /// Validates one tensor entry on its own: keys, dtype, shape (checked element and byte
    /// counts), data_offsets, and that its bytes lie inside the data section.
    SafetensorsTensorInfo parse_entry(const std::string& name, const nlohmann::json& entry) const {
        const std::string tensor = "tensor " + quote_json(name);
        if (!entry.is_object()) {
            fail(tensor, ": the entry is a JSON ", entry.type_name(),
                 ", not an object with dtype, shape and data_offsets");
        }
        for (auto item = entry.begin(); item != entry.end(); ++item) {
            if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
                fail(tensor, ": unexpected key ", quote_json(item.key()),
                     " (an entry has exactly dtype, shape and data_offsets)");
            }
        }
        for (const char* key : {"dtype", "shape", "data_offsets"}) {
            if (!entry.contains(key)) fail(tensor, ": missing \"", key, "\"");
        }

        SafetensorsTensorInfo info;
        info.dtype = parse_dtype(tensor, entry.at("dtype"));

        const nlohmann::json& shape = entry.at("shape");
        if (!shape.is_array()) fail(tensor, ": shape is ", brief_json(shape), ", not an array");
        info.shape.reserve(shape.size());
        for (std::size_t i = 0; i < shape.size(); ++i) {
            if (!is_non_negative_integer(shape[i])) {
                fail(tensor, ": shape element ", i, " is ", brief_json(shape[i]), ", not a non-negative integer");
            }
            const auto dim = shape[i].get<std::uint64_t>();
            if (dim > static_cast<std::uint64_t>(std::numeric_limits<Index>::max())) {
                fail(tensor, ": shape dimension ", dim, " overflows the signed 64-bit index type");
            }
            info.shape.push_back(static_cast<Index>(dim));
        }
        const auto size_problem = [&](const std::string& problem) { fail(tensor, ": ", problem); };
        const TensorSize size = checked_tensor_size(info.shape, info.dtype, size_problem);
        info.num_elements = size.elements;

        const nlohmann::json& offsets = entry.at("data_offsets");
        if (!offsets.is_array() || offsets.size() != 2 || !is_non_negative_integer(offsets[0]) ||
            !is_non_negative_integer(offsets[1])) {
            fail(tensor, ": data_offsets is ", brief_json(offsets), ", not [begin, end] with two non-negative integers");
        }
        info.data_begin = offsets[0].get<std::uint64_t>();
        info.data_end = offsets[1].get<std::uint64_t>();
        const std::string span = concat("[", info.data_begin, ", ", info.data_end, "]");
        if (info.data_begin > info.data_end) fail(tensor, ": data_offsets ", span, " have begin after end");
        if (info.data_end - info.data_begin != size.bytes) {
            fail(tensor, ": shape ", format_tensor_shape(info.shape), " of ", dtype_name(info.dtype), " needs ",
                 bytes_count(size.bytes), " but data_offsets ", span, " span ",
                 bytes_count(info.data_end - info.data_begin));
        }
        if (info.data_end > data_size_) {
            fail(tensor, ": data_offsets ", span, " run past the end of file (the data section holds ",
                 bytes_count(data_size_), ")");
        }
        return info;
    }

    /// The dtype named by `value`: "F32", "F16", "BF16" or "F64"; any other is a FileError
    /// ("unsupported dtype" for the other safetensors dtypes, "unknown dtype" otherwise).
    SafetensorsDtype parse_dtype(const std::string& tensor, const nlohmann::json& value) const {
        if (!value.is_string()) fail(tensor, ": dtype is ", brief_json(value), ", not a string");
        const std::string& text = value.get_ref<const std::string&>();
        for (SafetensorsDtype dtype : {SafetensorsDtype::f32, SafetensorsDtype::f16, SafetensorsDtype::bf16,
                                       SafetensorsDtype::f64, SafetensorsDtype::u8}) {
            if (text == dtype_name(dtype)) return dtype;
        }
        static const char* const other_dtypes[] = {"BOOL", "I8",      "I16",     "U16",     "I32",
                                                   "U32",  "I64",     "U64",     "C64",     "F8_E5M2", "F8_E4M3",
                                                   "F8_E8M0", "F4",   "F6_E2M3", "F6_E3M2"};
        const bool known = std::find(std::begin(other_dtypes), std::end(other_dtypes), text) != std::end(other_dtypes);
        fail(tensor, known ? ": unsupported dtype " : ": unknown dtype ", quote_json(text),
             " (diffattn reads F32, F16, BF16 and F64, and U8 weight blocks)");
    }

    /// U8 tensors are weight blocks, and only in a quantized checkpoint's file: its __metadata__
    /// names kQuantizedWeightsKey (a block format), and each is [rows, blocks, 34] (q8_0) or
    /// [rows, blocks, 18] (q4_0). Marks each with its format.
    void check_weight_blocks(SafetensorsHeader& header) const {
        const auto key = header.metadata.find(kQuantizedWeightsKey);
        for (auto& [name, info] : header.tensors) {
            if (info.dtype != SafetensorsDtype::u8) continue;
            const std::string tensor = "tensor " + quote_json(name);
            if (key == header.metadata.end()) {
                fail(tensor, ": dtype \"U8\" is read only as the weight blocks of a quantized checkpoint, whose "
                     "__metadata__ names \"", kQuantizedWeightsKey, "\" (docs/safetensors.md)");
            }
            const Index last = info.shape.empty() ? -1 : info.shape.back();
            info.blocks = last == block_bytes(WeightFormat::q8_0)   ? WeightFormat::q8_0
                          : last == block_bytes(WeightFormat::q4_0) ? WeightFormat::q4_0
                                                                    : WeightFormat::f32;
            if (info.shape.size() != 3 || info.blocks == WeightFormat::f32) {
                fail(tensor, ": U8 shape ", format_tensor_shape(info.shape),
                     " is not [rows, blocks, 34] (q8_0 blocks) or [rows, blocks, 18] (q4_0 blocks)");
            }
        }
    }

    /// The tensors must tile the data section: sorted by offsets, they start at 0, each begins
    /// where the previous one ends (no gap, no overlap), and the last one ends at the end of the
    /// file. Zero-byte tensors may sit at any boundary.
    void check_layout(const std::map<std::string, SafetensorsTensorInfo>& tensors) const {
        struct Span {
            std::uint64_t begin, end;
            const std::string* name;
        };
        std::vector<Span> spans;
        spans.reserve(tensors.size());
        for (const auto& entry : tensors) spans.push_back({entry.second.data_begin, entry.second.data_end, &entry.first});
        std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
            return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
        });
        std::uint64_t cursor = 0;         // end of the bytes covered so far
        const Span* previous = nullptr;   // the last non-empty tensor, which ends at cursor
        for (const Span& span : spans) {
            const auto where = [&] {  // only when failing: formatting every tensor costs more than the check
                return concat(quote_json(*span.name), " [", span.begin, ", ", span.end, "]");
            };
            if (span.begin < cursor) {
                fail("data_offsets of tensors ", quote_json(*previous->name), " [", previous->begin, ", ",
                     previous->end, "] and ", where(), " overlap");
            }
            if (span.begin > cursor) {
                if (previous == nullptr) {
                    fail("gap of ", bytes_count(span.begin - cursor), " at the start of the data section: ",
                         "the first tensor ", where(), " does not begin at offset 0");
                }
                fail("gap of ", bytes_count(span.begin - cursor), " between tensor ", quote_json(*previous->name), " [",
                     previous->begin, ", ", previous->end, "] and tensor ", where());
            }
            if (span.end > span.begin) {
                cursor = span.end;
                previous = &span;
            }
        }
        if (cursor != data_size_) {
            const std::uint64_t unclaimed = data_size_ - cursor;
            fail("the tensors end at byte ", cursor, " of the ", data_size_, "-byte data section: ",
                 bytes_count(unclaimed), " before the end of file ", unclaimed == 1 ? "belongs" : "belong",
                 " to no tensor");
        }
    }

    const std::string& file_;   // the path (or name) for messages
    std::uint64_t data_size_;   // bytes of the data section: file size - 8 - header length
};

}  // namespace detail

/// Parses and validates text[0, size), the JSON header of safetensors file `file` (a path or a
/// name, for messages) whose data section holds data_size bytes: the JSON itself (within
/// SafetensorsLimits), `__metadata__`, every tensor entry (dtype, shape, checked sizes,
/// data_offsets inside the data section) and that the tensors tile the data section exactly.
/// Throws FileError "safetensors file \"<file>\": ..." on the first problem.
inline SafetensorsHeader check_safetensors_header(const char* text, std::size_t size, std::uint64_t data_size,
                                                  const std::string& file) {
    return detail::SafetensorsHeaderChecker(file, data_size).check(text, size);
}

}  // namespace diffattn
