// The storage formats of a linear layer's weights (docs/math.md §10): the model's own scalar, the
// checkpoint's bfloat16 bits, and llama.cpp's Q8_0 and Q4_0 blocks. A format says how one row of
// an nn.Linear weight [out x in] is laid out in bytes; the rows of a matrix follow each other.
//
//   f32   the model's scalar T (float, or double in a double model), as before this enum existed
//   bf16  2 bytes a weight: the upper half of a float's bits (Eigen::bfloat16)
//   q8_0  blocks of 32 weights along the row: an f16 scale d, then 32 int8 q; w = d q
//   q4_0  blocks of 32 weights: an f16 scale d, then 16 bytes of nibbles; byte i holds
//         q[i] in its low and q[i + 16] in its high nibble, each stored as q + 8 (0..15); w = d q
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <cstddef>
#include <string_view>

namespace diffattn {

enum class WeightFormat {
    f32,   ///< the model's scalar T
    bf16,  ///< bfloat16
    q8_0,  ///< llama.cpp's block_q8_0
    q4_0,  ///< llama.cpp's block_q4_0
};

inline const char* to_string(WeightFormat format) noexcept {
    switch (format) {
        case WeightFormat::f32: return "f32";
        case WeightFormat::bf16: return "bf16";
        case WeightFormat::q8_0: return "q8_0";
        case WeightFormat::q4_0: return "q4_0";
    }
    return "?";
}

/// The format named `name` ("f32", "bf16", "q8_0", "q4_0"); OptionError naming `what` and listing
/// the names otherwise.
inline WeightFormat parse_weight_format(std::string_view name, const char* what = "weight format") {
    for (WeightFormat format : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0}) {
        if (name == to_string(format)) return format;
    }
    throw OptionError(detail::concat(what, " must be one of f32, bf16, q8_0, q4_0, got \"", name, "\""));
}

/// True for the block formats (q8_0, q4_0), whose rows are whole blocks of kWeightBlock weights.
constexpr bool is_block_format(WeightFormat format) noexcept {
    return format == WeightFormat::q8_0 || format == WeightFormat::q4_0;
}

/// Weights per block of the block formats (llama.cpp's QK8_0 and QK4_0).
inline constexpr Index kWeightBlock = 32;

/// Bytes of one block: the f16 scale and the quantized weights.
constexpr Index block_bytes(WeightFormat format) noexcept {
    return format == WeightFormat::q8_0 ? 2 + kWeightBlock : format == WeightFormat::q4_0 ? 2 + kWeightBlock / 2 : 0;
}

/// Bytes of one row of `cols` weights in `format`, the f32 format holding `scalar_bytes` a weight
/// (sizeof(T)). A block format needs cols to be a multiple of kWeightBlock (can_store()).
constexpr Index row_bytes(WeightFormat format, Index cols, Index scalar_bytes) noexcept {
    switch (format) {
        case WeightFormat::f32: return cols * scalar_bytes;
        case WeightFormat::bf16: return cols * 2;
        default: return cols / kWeightBlock * block_bytes(format);
    }
}

/// Whether rows of `cols` weights can be stored in `format`: every format but the block ones
/// takes any width; those need whole blocks.
constexpr bool can_store(WeightFormat format, Index cols) noexcept {
    return !is_block_format(format) || cols % kWeightBlock == 0;
}

/// The format a weight whose rows hold `cols` weights is stored in when a model asks for
/// `requested` (docs/math.md §10): the requested format, but f32 where a block format's blocks do
/// not tile the rows (llama.cpp falls back likewise), and q8_0 for the output head (lm_head, or the
/// embedding table a tied model multiplies by) under q4_0, as llama.cpp keeps its output head
/// wider: the head's error reaches every logit directly.
constexpr WeightFormat stored_format(WeightFormat requested, Index cols, bool output_head = false) noexcept {
    if (!can_store(requested, cols)) return WeightFormat::f32;
    return output_head && requested == WeightFormat::q4_0 ? WeightFormat::q8_0 : requested;
}

}  // namespace diffattn
