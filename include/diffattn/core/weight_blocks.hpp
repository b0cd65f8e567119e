// The reference codecs of the weight formats (core/weight_format.hpp, docs/math.md §10): one row of
// weights into a format's bytes and back, plainly, one weight at a time. They are the definition
// the fast kernels are tested against, and the quantizer the library uses: quantizing happens once,
// at load, so it has no other implementation.
//
// The block formats follow llama.cpp's reference quantizers (ggml-quants.c, quantize_row_q8_0_ref
// and quantize_row_q4_0_ref) operation for operation in float, so that a block written here is the
// block llama.cpp writes for the same 32 floats, and a later GGUF exchange is a copy:
//   q8_0: amax = max |x|, d = amax / 127, q = roundf(x / d) (x * (1/d), as llama.cpp computes it)
//   q4_0: m = the x of largest magnitude (the first such), d = m / -8,
//         q + 8 = min(15, (int)(x * (1/d) + 8.5f)), so that q = -8 at m
// and the stored scale is d rounded to f16 (nearest, ties to even), which is what dequantizing
// multiplies by. bf16 rounds a float to nearest, ties to even (quiet NaNs stay NaN).
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_format.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace diffattn::detail {

/// The f16 bits of `value` rounded to nearest (ties to even): GGML_FP32_TO_FP16.
inline std::uint16_t f16_bits(float value) noexcept { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(value)); }

/// The float value of f16 bits (exact).
inline float f16_value(std::uint16_t bits) noexcept {
    return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}

/// The f16 scale of a block at `block` (its first two bytes, little-endian; any alignment).
inline float block_scale(const unsigned char* block) noexcept {
    return f16_value(static_cast<std::uint16_t>(block[0] | (block[1] << 8)));
}

inline void store_block_scale(std::uint16_t bits, unsigned char* block) noexcept {
    block[0] = static_cast<unsigned char>(bits & 0xFF);
    block[1] = static_cast<unsigned char>(bits >> 8);
}

/// The largest block scale f16 holds: a block whose d would exceed it cannot be stored.
inline constexpr float kMaxBlockScale = 65504.0f;

/// Quantizes the 32 floats at x into the q8_0 block at out (34 bytes). Returns d, the unrounded
/// scale (finite and at most kMaxBlockScale for a storable block; the caller checks).
inline float quantize_block_q8_0(const float* x, unsigned char* out) noexcept {
    float amax = 0.0f;
    for (Index j = 0; j < kWeightBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_block_scale(f16_bits(d), out);
    for (Index j = 0; j < kWeightBlock; ++j) {
        out[2 + j] = static_cast<unsigned char>(static_cast<std::int8_t>(std::round(x[j] * id)));
    }
    return d;
}

/// Quantizes the 32 floats at x into the q4_0 block at out (18 bytes). Returns d (see q8_0).
inline float quantize_block_q4_0(const float* x, unsigned char* out) noexcept {
    float amax = 0.0f, max = 0.0f;
    for (Index j = 0; j < kWeightBlock; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_block_scale(f16_bits(d), out);
    constexpr Index half = kWeightBlock / 2;
    for (Index j = 0; j < half; ++j) {
        // (int8_t) truncates toward zero, as llama.cpp's cast does; x * id + 8.5 lies in [0.5, 16.5].
        const int low = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 8.5f)));
        const int high = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[half + j] * id + 8.5f)));
        out[2 + j] = static_cast<unsigned char>(low | (high << 4));
    }
    return d;
}

/// The 32 weights of the q8_0 block at `block`, times its scale, into out.
template <typename T>
void dequantize_block_q8_0(const unsigned char* block, T* out) noexcept {
    const float d = block_scale(block);
    for (Index j = 0; j < kWeightBlock; ++j) {
        out[j] = static_cast<T>(static_cast<float>(static_cast<std::int8_t>(block[2 + j])) * d);
    }
}

/// The 32 weights of the q4_0 block at `block`, times its scale, into out.
template <typename T>
void dequantize_block_q4_0(const unsigned char* block, T* out) noexcept {
    const float d = block_scale(block);
    constexpr Index half = kWeightBlock / 2;
    for (Index j = 0; j < half; ++j) {
        out[j] = static_cast<T>(static_cast<float>((block[2 + j] & 0x0F) - 8) * d);
        out[half + j] = static_cast<T>(static_cast<float>((block[2 + j] >> 4) - 8) * d);
    }
}

/// The first weight of the `cols` at `x` that `format` cannot store, or -1. f32 stores anything.
/// bf16 keeps NaN and infinities as themselves but refuses a finite weight that would round to
/// infinity. The block formats refuse a weight that is not finite (it would make its whole block
/// NaN) and one so large that its block's scale exceeds kMaxBlockScale, f16's range.
template <typename T>
Index first_unstorable_weight(WeightFormat format, const T* x, Index cols) noexcept {
    if (format == WeightFormat::f32) return -1;
    const float block_limit = kMaxBlockScale * (format == WeightFormat::q8_0 ? 127.0f : 8.0f);
    for (Index j = 0; j < cols; ++j) {
        const float value = static_cast<float>(x[j]);  // a double beyond float's range: infinite
        const bool storable = format == WeightFormat::bf16
                                  ? !std::isfinite(x[j]) || std::isfinite(static_cast<float>(Eigen::bfloat16(value)))
                                  : std::isfinite(value) && std::fabs(value) <= block_limit;
        if (!storable) return j;
    }
    return -1;
}

/// Encodes one row of `cols` weights (T: float or double; double rounds to float first) into
/// `format`'s bytes at out (row_bytes(format, cols, sizeof(T)) of them). The caller has checked the
/// row with first_unstorable_weight and the width with can_store.
template <typename T>
void encode_row(WeightFormat format, const T* x, Index cols, unsigned char* out) {
    switch (format) {
        case WeightFormat::f32:
            std::memcpy(out, x, static_cast<std::size_t>(cols) * sizeof(T));
            return;
        case WeightFormat::bf16:
            for (Index j = 0; j < cols; ++j) {
                const auto bits = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(static_cast<float>(x[j])));
                out[2 * j] = static_cast<unsigned char>(bits & 0xFF);
                out[2 * j + 1] = static_cast<unsigned char>(bits >> 8);
            }
            return;
        case WeightFormat::q8_0:
        case WeightFormat::q4_0: {
            float block[kWeightBlock];
            const Index bytes = block_bytes(format);
            for (Index b = 0; b < cols / kWeightBlock; ++b) {
                for (Index j = 0; j < kWeightBlock; ++j) block[j] = static_cast<float>(x[b * kWeightBlock + j]);
                if (format == WeightFormat::q8_0) {
                    quantize_block_q8_0(block, out + b * bytes);
                } else {
                    quantize_block_q4_0(block, out + b * bytes);
                }
            }
            return;
        }
    }
}

/// Decodes one row of `cols` weights of `format` at `row` into out[0, cols) as T.
template <typename T>
void decode_row(WeightFormat format, const unsigned char* row, Index cols, T* out) {
    switch (format) {
        case WeightFormat::f32:
            std::memcpy(out, row, static_cast<std::size_t>(cols) * sizeof(T));
            return;
        case WeightFormat::bf16:
            for (Index j = 0; j < cols; ++j) {
                const auto bits = static_cast<std::uint16_t>(row[2 * j] | (row[2 * j + 1] << 8));
                out[j] = static_cast<T>(static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits)));
            }
            return;
        case WeightFormat::q8_0:
            for (Index b = 0; b < cols / kWeightBlock; ++b) {
                dequantize_block_q8_0(row + b * block_bytes(format), out + b * kWeightBlock);
            }
            return;
        case WeightFormat::q4_0:
            for (Index b = 0; b < cols / kWeightBlock; ++b) {
                dequantize_block_q4_0(row + b * block_bytes(format), out + b * kWeightBlock);
            }
            return;
    }
}

}  // namespace diffattn::detail
