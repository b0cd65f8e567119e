// y = x W^T for a few rows of x (a decode step) against a weight stored as bf16, q8_0 or q4_0
// (core/weight_format.hpp, docs/math.md §10): each weight row's bytes are read once, decoded in
// registers one block of 32 weights at a time, and multiplied in the scalar of x (float or double)
// into every x row of the group. Nothing but the stored bytes comes from memory, so the products
// run at the bandwidth of the stored format.
//
// The weights of a row are read in the order they lie in memory, one row after the next, each
// 64-byte line asked for kOneRowPrefetchBytes ahead (layers/few_rows_linear.hpp's one-row order,
// which suits the short rows of a stored format: a q4_0 row of 2048 weights is 1152 bytes). Two
// independent sums per x row (each block's first and second half) keep the multiply-adds out of
// one dependency chain. Each output is one sum over the row whose order depends on the width only,
// so a row of x gives the same bits alone as in a group.
#pragma once

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/core/prefetch.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_blocks.hpp"
#include "diffattn/core/weight_format.hpp"
#include "diffattn/layers/few_rows_linear.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace diffattn::detail {

/// A stored format as the row dots read it: kBytes bytes for each kWeights-weight block, decoded
/// into T by decode() (the reference codec's arithmetic: the products see what decode_row gives).
template <WeightFormat F>
struct StoredBlocks {
    static constexpr Index kWeights = kWeightBlock;
    static constexpr Index kBytes = F == WeightFormat::bf16 ? 2 * kWeightBlock : block_bytes(F);

    template <typename T>
    static void decode(const unsigned char* block, T* out) {
        if constexpr (F == WeightFormat::q8_0) {
            dequantize_block_q8_0(block, out);
        } else if constexpr (F == WeightFormat::q4_0) {
            dequantize_block_q4_0(block, out);
        } else {
            decode_row(WeightFormat::bf16, block, kWeightBlock, out);
        }
    }

#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(EIGEN_DONT_VECTORIZE)
    /// The block's 32 weights as floats: [0, 16) in lo, [16, 32) in hi (the same values as decode).
    static EIGEN_ALWAYS_INLINE void decode(const unsigned char* block, __m512& lo, __m512& hi) {
        if constexpr (F == WeightFormat::q8_0) {
            const __m512 d = _mm512_set1_ps(block_scale(block));
            const __m128i* q = reinterpret_cast<const __m128i*>(block + 2);
            lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
            hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
        } else if constexpr (F == WeightFormat::q4_0) {
            const __m512 d = _mm512_set1_ps(block_scale(block));
            const __m512i nibbles = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
            const __m512i eight = _mm512_set1_epi32(8);
            const __m512i low = _mm512_sub_epi32(_mm512_and_si512(nibbles, _mm512_set1_epi32(0x0F)), eight);
            const __m512i high = _mm512_sub_epi32(_mm512_srli_epi32(nibbles, 4), eight);
            lo = _mm512_mul_ps(_mm512_cvtepi32_ps(low), d);
            hi = _mm512_mul_ps(_mm512_cvtepi32_ps(high), d);
        } else {
            const __m256i* bits = reinterpret_cast<const __m256i*>(block);
            lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(bits)), 16));
            hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(bits + 1)), 16));
        }
    }

    /// q8_0 / q4_0: the block's 32 integers q (q4_0: its nibbles - 8) as floats, unscaled: the
    /// weights are q * block_scale(block), exactly.
    static EIGEN_ALWAYS_INLINE void decode_unscaled(const unsigned char* block, __m512& lo, __m512& hi) {
        static_assert(F != WeightFormat::bf16, "bf16 has no block scale");
        if constexpr (F == WeightFormat::q8_0) {
            const __m128i* q = reinterpret_cast<const __m128i*>(block + 2);
            lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)));
            hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)));
        } else {
            const __m512i nibbles = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
            const __m512i eight = _mm512_set1_epi32(8);
            lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(nibbles, _mm512_set1_epi32(0x0F)), eight));
            hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(nibbles, 4), eight));
        }
    }
#endif
};

/// panel [rows x count] (outer stride `stride`) = the weights [first_col, first_col + count) of W
/// rows [first_row, first_row + rows) as T, decoded as the row dots decode them. first_col is a
/// multiple of 32; so is count unless it runs to the end of the row.
template <WeightFormat F, typename T>
void decode_stored_panel(const WeightView<T>& w, Index first_row, Index rows, Index first_col, Index count, T* panel,
                         Index stride) {
    using Blocks = StoredBlocks<F>;
    const Index whole = count / Blocks::kWeights;
    for (Index r = 0; r < rows; ++r) {
        const unsigned char* row = w.row(first_row + r) + first_col / Blocks::kWeights * Blocks::kBytes;
        T* out = panel + r * stride;
        for (Index b = 0; b < whole; ++b) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(EIGEN_DONT_VECTORIZE)
            if constexpr (std::is_same_v<T, float>) {
                __m512 lo, hi;
                Blocks::decode(row + b * Blocks::kBytes, lo, hi);
                _mm512_storeu_ps(out + b * Blocks::kWeights, lo);
                _mm512_storeu_ps(out + b * Blocks::kWeights + 16, hi);
                continue;
            }
#endif
            Blocks::decode(row + b * Blocks::kBytes, out + b * Blocks::kWeights);
        }
        if (whole * Blocks::kWeights < count) {
            decode_row(F, row + whole * Blocks::kBytes, count - whole * Blocks::kWeights, out + whole * Blocks::kWeights);
        }
    }
}

/// decode_stored_panel in w's format (not f32).
template <typename T>
void decode_stored_panel(const WeightView<T>& w, Index first_row, Index rows, Index first_col, Index count, T* panel,
                         Index stride) {
    switch (w.format) {
        case WeightFormat::bf16: decode_stored_panel<WeightFormat::bf16>(w, first_row, rows, first_col, count, panel, stride); break;
        case WeightFormat::q8_0: decode_stored_panel<WeightFormat::q8_0>(w, first_row, rows, first_col, count, panel, stride); break;
        case WeightFormat::q4_0: decode_stored_panel<WeightFormat::q4_0>(w, first_row, rows, first_col, count, panel, stride); break;
        case WeightFormat::f32: break;
    }
}

/// out(n, j) = x row n . W row j for j in [j_begin, j_end) and the N (1-8) rows of x, W in format F.
/// bf16 rows of a width that is not a multiple of 32 end in a tail of single weights.
template <WeightFormat F, int N, typename T, typename X, typename Out>
void stored_dot_rows(const X& x, const WeightView<T>& w, Out& out, Index j_begin, Index j_end) {
    using Blocks = StoredBlocks<F>;
    const Index depth = w.cols, blocks = depth / Blocks::kWeights, tail = blocks * Blocks::kWeights;
    const T* x_row[N];
    row_pointers(x, 0, x_row);
#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(EIGEN_DONT_VECTORIZE)
    if constexpr (std::is_same_v<T, float> && F != WeightFormat::bf16) {
        // Each block's scale multiplies its 32-term dot once instead of its 32 weights: two vector
        // operations of a one-row step's 9-13 a block fewer, and one more for each row beyond
        // the first. Every row count sums alike (blocks alternating between two chains), so a
        // row gives the same bits alone as in a batch.
        for (Index j = j_begin; j < j_end; ++j) {
            const unsigned char* row = w.row(j);
            __m512 acc[N][2];
            for (auto& sums : acc) sums[0] = sums[1] = _mm512_setzero_ps();
            const auto step = [&](Index b, int chain) {
                const unsigned char* block = row + b * Blocks::kBytes;
                prefetch_into_l2(block + kOneRowPrefetchBytes);
                __m512 lo, hi;
                Blocks::decode_unscaled(block, lo, hi);
                const __m512 d = _mm512_set1_ps(block_scale(block));
                for (int n = 0; n < N; ++n) {
                    const float* xb = x_row[n] + b * Blocks::kWeights;
                    const __m512 dot = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
                    acc[n][chain] = _mm512_fmadd_ps(dot, d, acc[n][chain]);
                }
            };
            Index b = 0;
            for (; b + 1 < blocks; b += 2) {
                step(b, 0);
                step(b + 1, 1);
            }
            if (b < blocks) step(b, 0);
            for (int n = 0; n < N; ++n) out(n, j) = _mm512_reduce_add_ps(_mm512_add_ps(acc[n][0], acc[n][1]));
        }
        return;
    } else if constexpr (std::is_same_v<T, float>) {
        for (Index j = j_begin; j < j_end; ++j) {
            const unsigned char* row = w.row(j);
            __m512 acc[N][2];  // the weights [0, 16) and [16, 32) of each block: two chains
            for (auto& sums : acc) sums[0] = sums[1] = _mm512_setzero_ps();
            for (Index b = 0; b < blocks; ++b) {
                prefetch_into_l2(row + b * Blocks::kBytes + kOneRowPrefetchBytes);
                __m512 lo, hi;
                Blocks::decode(row + b * Blocks::kBytes, lo, hi);
                for (int n = 0; n < N; ++n) {
                    const float* xb = x_row[n] + b * Blocks::kWeights;
                    acc[n][0] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xb), acc[n][0]);
                    acc[n][1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), acc[n][1]);
                }
            }
            float tail_weights[Blocks::kWeights] = {};  // a bf16 row's last partial block
            if (tail < depth) decode_row(F, row + blocks * Blocks::kBytes, depth - tail, tail_weights);
            for (int n = 0; n < N; ++n) {
                float total = _mm512_reduce_add_ps(_mm512_add_ps(acc[n][0], acc[n][1]));
                for (Index k = tail; k < depth; ++k) total += tail_weights[k - tail] * x_row[n][k];
                out(n, j) = total;
            }
        }
        return;
    }
#endif
    // Portable: each block decoded into a buffer, then multiplied in Eigen's packets.
    using Packet = typename Eigen::internal::packet_traits<T>::type;
    constexpr Index P = Eigen::internal::packet_traits<T>::size;
    static_assert(Blocks::kWeights % P == 0, "a block is whole packets");
    for (Index j = j_begin; j < j_end; ++j) {
        const unsigned char* row = w.row(j);
        Packet acc[N][2];
        for (auto& sums : acc) sums[0] = sums[1] = Eigen::internal::pset1<Packet>(T(0));
        alignas(64) T weights[Blocks::kWeights];
        for (Index b = 0; b < blocks; ++b) {
            prefetch_into_l2(row + b * Blocks::kBytes + kOneRowPrefetchBytes);
            Blocks::decode(row + b * Blocks::kBytes, weights);
            for (Index k = 0; k < Blocks::kWeights; k += P) {
                const Packet wp = Eigen::internal::pload<Packet>(weights + k);
                const int a = (k / P) % 2;
                for (int n = 0; n < N; ++n) {
                    const Packet xp = Eigen::internal::ploadu<Packet>(x_row[n] + b * Blocks::kWeights + k);
                    acc[n][a] = Eigen::internal::pmadd(wp, xp, acc[n][a]);
                }
            }
        }
        if (tail < depth) decode_row(F, row + blocks * Blocks::kBytes, depth - tail, weights);
        for (int n = 0; n < N; ++n) {
            T total = Eigen::internal::predux(Eigen::internal::padd(acc[n][0], acc[n][1]));
            for (Index k = tail; k < depth; ++k) total += weights[k - tail] * x_row[n][k];
            out(n, j) = total;
        }
    }
}

/// out [N x F] = x [N x K] w[F x K]^T for the features [f_begin, f_end), N < kFewRowsLinear, w in
/// format F (not f32). A block of W rows of about 128 KB of stored bytes serves every group of up
/// to 8 x rows before the next is read, so W comes from memory once.
template <WeightFormat F, typename T>
void stored_few_rows_linear(const ConstMatrixRef<T>& x, const WeightView<T>& w, MatrixRef<T>& out, Index f_begin,
                            Index f_end) {
    const Index block = x.rows() <= 8 ? f_end - f_begin
                                      : std::max<Index>(8, (Index(128) << 10) / std::max<Index>(1, w.row_bytes));
    for (Index b = f_begin; b < f_end; b += block) {
        const Index b_end = std::min(f_end, b + block);
        for (Index n = 0; n < x.rows(); n += 8) {
            const auto rows = x.middleRows(n, std::min<Index>(8, x.rows() - n));
            auto into = out.middleRows(n, rows.rows());
            switch (rows.rows()) {
                case 1: stored_dot_rows<F, 1>(rows, w, into, b, b_end); break;
                case 2: stored_dot_rows<F, 2>(rows, w, into, b, b_end); break;
                case 3: stored_dot_rows<F, 3>(rows, w, into, b, b_end); break;
                case 4: stored_dot_rows<F, 4>(rows, w, into, b, b_end); break;
                case 5: stored_dot_rows<F, 5>(rows, w, into, b, b_end); break;
                case 6: stored_dot_rows<F, 6>(rows, w, into, b, b_end); break;
                case 7: stored_dot_rows<F, 7>(rows, w, into, b, b_end); break;
                default: stored_dot_rows<F, 8>(rows, w, into, b, b_end); break;
            }
        }
    }
}

/// stored_few_rows_linear in w's format (bf16, q8_0 or q4_0): the one switch from the runtime
/// format to its compile-time row dots.
template <typename T>
void stored_few_rows_linear(const ConstMatrixRef<T>& x, const WeightView<T>& w, MatrixRef<T>& out, Index f_begin,
                            Index f_end) {
    switch (w.format) {
        case WeightFormat::bf16: stored_few_rows_linear<WeightFormat::bf16, T>(x, w, out, f_begin, f_end); break;
        case WeightFormat::q8_0: stored_few_rows_linear<WeightFormat::q8_0, T>(x, w, out, f_begin, f_end); break;
        case WeightFormat::q4_0: stored_few_rows_linear<WeightFormat::q4_0, T>(x, w, out, f_begin, f_end); break;
        case WeightFormat::f32: break;  // few_rows_linear's
    }
}

}  // namespace diffattn::detail
