// The safetensors format (docs/math.md §5) as the reader and the writer share it: the dtypes,
// the checked size of a tensor, and the limits of what diffattn reads (and therefore writes).
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
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/strict_json.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace diffattn {

/// Element types the reader converts from. The writer writes f32 only.
enum class SafetensorsDtype {
    f32,   ///< "F32": IEEE binary32
    f16,   ///< "F16": IEEE binary16
    bf16,  ///< "BF16": bfloat16, the top 16 bits of a binary32
    f64,   ///< "F64": IEEE binary64
    u8,    ///< "U8": bytes; read only as the weight blocks of a quantized checkpoint (docs/safetensors.md)
};

/// The dtype as the file header spells it: "F32", "F16", "BF16", "F64".
inline const char* dtype_name(SafetensorsDtype dtype) noexcept {
    switch (dtype) {
        case SafetensorsDtype::f32: return "F32";
        case SafetensorsDtype::f16: return "F16";
        case SafetensorsDtype::bf16: return "BF16";
        case SafetensorsDtype::f64: return "F64";
        case SafetensorsDtype::u8: return "U8";
    }
    return "?";
}

/// Bytes per element: 4 (F32), 2 (F16, BF16), 8 (F64), 1 (U8).
inline std::size_t dtype_size(SafetensorsDtype dtype) noexcept {
    switch (dtype) {
        case SafetensorsDtype::f32: return 4;
        case SafetensorsDtype::f16: return 2;
        case SafetensorsDtype::bf16: return 2;
        case SafetensorsDtype::f64: return 8;
        case SafetensorsDtype::u8: return 1;
    }
    return 0;
}

/// The most a header may hold: SafetensorsFile rejects a file beyond any of these (FileError),
/// write_safetensors refuses to write one (Error). They bound what a header costs in memory
/// before its entries are built; docs/safetensors.md ("Limits") says why each is generous.
struct SafetensorsLimits {
    /// Largest header, in bytes (the reference implementation's limit).
    static constexpr std::uint64_t max_header_bytes = 100'000'000;
    /// Deepest JSON nesting (the format needs 3: root, entry, shape).
    static constexpr int max_header_depth = 8;
    /// Most elements of a JSON array (shapes and data_offsets are the format's only arrays), and
    /// most members of a JSON object other than the header itself and __metadata__.
    static constexpr std::size_t max_header_array_size = 1024;
    /// Most tensor entries in one file (a 70B model has about 700 tensors in all; the largest
    /// mixture-of-experts checkpoints about 90,000 in all their shards together).
    static constexpr std::size_t max_tensors = 131'072;
    /// Most __metadata__ entries (checkpoints hold a handful; training tools about a hundred).
    static constexpr std::size_t max_metadata_entries = 16'384;
};

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

/// True when `name` ends in `suffix`; false for a null suffix (tensor names: skipped buffers, kinds of parameters).
inline bool ends_with(const std::string& name, const char* suffix) {
    if (suffix == nullptr) return false;
    const std::size_t n = std::char_traits<char>::length(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
}

/// Element count and byte size of a tensor.
struct TensorSize {
    Index elements = 0;       ///< product of the shape: 1 for a scalar, 0 with a zero dimension
    std::uint64_t bytes = 0;  ///< elements * dtype_size(dtype)
};

/// The size of a tensor of `shape` and `dtype`, checked: every dimension >= 0, at most 2^63 - 1
/// elements (a zero dimension makes the count 0 whatever the others are) and at most 2^64 - 1
/// bytes, each product checked before it is taken so that it never wraps. Otherwise calls
/// fail("shape [..] of F32 <reason>"), which must throw. The one size check of the reader
/// (header entries) and the writer (its views).
template <typename Fail>
TensorSize checked_tensor_size(const std::vector<Index>& shape, SafetensorsDtype dtype, Fail&& fail) {
    const auto problem = [&](const char* reason) {
        return concat("shape ", format_tensor_shape(shape), " of ", dtype_name(dtype), " ", reason);
    };
    bool has_zero_dim = false;
    for (const Index dim : shape) {
        if (dim < 0) fail(problem("has a negative dimension"));
        has_zero_dim = has_zero_dim || dim == 0;
    }
    std::uint64_t count = has_zero_dim ? 0 : 1;
    constexpr auto max_count = static_cast<std::uint64_t>(std::numeric_limits<Index>::max());
    for (std::size_t i = 0; i < shape.size() && count != 0; ++i) {
        const auto dim = static_cast<std::uint64_t>(shape[i]);
        if (count > max_count / dim) fail(problem("has more than 2^63 - 1 elements (overflow)"));
        count *= dim;
    }
    const std::uint64_t element_bytes = dtype_size(dtype);
    if (count > std::numeric_limits<std::uint64_t>::max() / element_bytes) {
        fail(problem("takes more than 2^64 - 1 bytes (overflow)"));
    }
    return {static_cast<Index>(count), count * element_bytes};
}

}  // namespace detail
}  // namespace diffattn
