// A safetensors tensor's elements decoded into float or double (docs/safetensors.md): the loop of
// the reader's conversions over the per-value formats of float_formats.hpp.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/io/detail/float_formats.hpp"
#include "diffattn/io/safetensors_format.hpp"

#include <cstddef>
#include <type_traits>

namespace diffattn::detail {

/// Decodes the `count` little-endian elements of `dtype` at `src` (any alignment) into dst[0,
/// count) as T, exactly where T holds them (F16, BF16 and F32 always; F64 into double); F64 into
/// float rounds to the nearest float. Returns the index of the first F64 element too large in
/// magnitude for float (dst holds the elements before it), or -1 once every element is converted.
/// U8 tensors hold weight blocks, which decode_weight_rows decodes.
template <typename T>
Index decode_tensor_elements(const unsigned char* src, SafetensorsDtype dtype, Index count, T* dst) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "tensors decode to float or double");
    const auto decode_each = [&](std::size_t element_bytes, auto decode) {  // decode: bytes -> float
        for (Index i = 0; i < count; ++i) {
            dst[i] = static_cast<T>(decode(src + element_bytes * static_cast<std::size_t>(i)));
        }
    };
    switch (dtype) {
        case SafetensorsDtype::f32:
            decode_each(4, [](const unsigned char* p) { return float_from_bits(load_u32_le(p)); });
            break;
        case SafetensorsDtype::f16:
            decode_each(2, [](const unsigned char* p) { return f16_bits_to_float(load_u16_le(p)); });
            break;
        case SafetensorsDtype::bf16:
            decode_each(2, [](const unsigned char* p) { return bf16_bits_to_float(load_u16_le(p)); });
            break;
        case SafetensorsDtype::f64:
            for (Index i = 0; i < count; ++i) {
                const double value = double_from_bits(load_u64_le(src + 8 * i));
                if constexpr (std::is_same_v<T, double>) {
                    dst[i] = value;
                } else if (!narrow_to_float(value, dst[i])) {
                    return i;
                }
            }
            break;
        case SafetensorsDtype::u8: break;  // blocks: decode_weight_rows
    }
    return -1;
}

/// Decodes `rows` rows of `cols` weights stored as `format`'s blocks at `src` (row after row,
/// row_bytes(format, cols) each) into dst [rows x cols] as T: the weights the blocks stand for.
template <typename T>
void decode_weight_rows(const unsigned char* src, WeightFormat format, Index rows, Index cols, T* dst) {
    const Index bytes = row_bytes(format, cols, Index(sizeof(T)));
    for (Index r = 0; r < rows; ++r) decode_row(format, src + r * bytes, cols, dst + r * cols);
}

}  // namespace diffattn::detail
