// The BF16 products of AVX512-BF16 (vdpbf16ps: 16 fp32 sums, each += two BF16 products), for the
// bf16_dot path of the tiled core and the projections (kernels/packed_tiles.hpp,
// layers/panel_products.hpp; docs/math.md §7.1, §10.1).
//
// C [m x n] (+)= A [m x k] B [k x n] with fp32 accumulation, from two packings made once and reused:
//   BF16 rows (A):    row r as k/2 words, word w = (A[r][2w] low, A[r][2w + 1] high): a row-major
//                     BF16 matrix, each word broadcast to the 16 lanes that multiply it;
//   pair panels (B):  word (w, j) at w * ldb + j = (B[2w][j] low, B[2w + 1][j] high), the layout
//                     vdpbf16ps pairs its operands in ("VNNI"); ldb = n rounded up to 16, zero padded.
// An odd k pairs its last entry with a zero. The logits take A = Q (BF16 rows) and B = K^T (K's
// BF16 rows turned into pair panels, 16 x 16 words at a time); P V takes A = P and B = V (pairs of
// V's rows interleaved). A KV cache's BF16 keys and values are repacked without a conversion.
//
// Every function carries the target attribute below, so it compiles in a build for any x86-64 and
// may run only where cpu_has_avx512_bf16() (core/cpu_features.hpp). The conversions round to
// nearest even (vcvtne2ps2bf16); vdpbf16ps treats BF16 denormals as zero and flushes its fp32
// results' denormals (docs/math.md §7.1).
#pragma once

#include "diffattn/core/cpu_features.hpp"
#include "diffattn/core/types.hpp"

#include <algorithm>
#include <cstdint>

#if defined(DIFFATTN_X86_TARGETS)  // <immintrin.h>: core/x86_intrinsics.hpp, through core/types.hpp

#define DIFFATTN_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace diffattn::detail::bf16_dot {

using Word = std::uint32_t;

/// Words of a BF16 row of n entries, and columns of a pair panel of n columns (whole vectors).
inline constexpr Index words_of(Index n) { return (n + 1) / 2; }
inline constexpr Index panel_columns(Index n) { return (n + 15) / 16 * 16; }

/// The lanes [0, n) of 16 (n <= 16).
inline __mmask16 first_lanes(Index n) {
    return static_cast<__mmask16>(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
}
inline __mmask32 first_halves(Index n) { return n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (1u << n) - 1u; }

/// 32 BF16 values [x0 .. x15, y0 .. y15] interleaved into 16 words (x_t low, y_t high).
DIFFATTN_BF16_DOT inline __m512i interleave_halves(__m512i xy) {
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                           6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(order, xy);
}

/// 16 words from the floats p[0, 2 * 16) (the lanes past `floats` zero), rounded to BF16.
DIFFATTN_BF16_DOT inline __m512i words_from_floats(const float* p, Index floats) {
    const __m512 low = _mm512_maskz_loadu_ps(first_lanes(floats), p);
    const __m512 high = _mm512_maskz_loadu_ps(first_lanes(floats - 16), p + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(high, low);
}

/// dst <- the rows [rows x cols] of src (row-major, `stride` floats) as BF16 rows of words_of(cols)
/// words, `dst_stride` words apart.
DIFFATTN_BF16_DOT inline void pack_rows(const float* src, Index rows, Index cols, Index stride, Word* dst,
                                        Index dst_stride) {
    const Index words = words_of(cols);
    for (Index r = 0; r < rows; ++r) {
        for (Index w = 0; w < words; w += 16) {
            const __m512i v = words_from_floats(src + r * stride + 2 * w, cols - 2 * w);
            _mm512_mask_storeu_epi32(dst + r * dst_stride + w, first_lanes(words - w), v);
        }
    }
}

/// p[0, n) rounded to BF16 in place as vcvtne2ps2bf16 rounds (to nearest even; a denormal input is
/// taken as zero), 32 floats an instruction: the widened products' packings on a CPU that has it.
DIFFATTN_BF16_DOT inline void round_in_place(float* p, Index n) {
    for (Index i = 0; i < n; i += 32) {
        const __mmask16 low = first_lanes(n - i), high = first_lanes(n - i - 16);
        const __m512i bf16 = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high, p + i + 16),
                                                          _mm512_maskz_loadu_ps(low, p + i));
        const __m512i wide_low = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(bf16)), 16);
        const __m512i wide_high = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(bf16, 1)), 16);
        _mm512_mask_storeu_ps(p + i, low, _mm512_castsi512_ps(wide_low));
        _mm512_mask_storeu_ps(p + i + 16, high, _mm512_castsi512_ps(wide_high));
    }
}

/// In place: the 16 x 16 words of r transposed (r[i] lane j <- r[j] lane i).
DIFFATTN_BF16_DOT inline void transpose16(__m512i (&r)[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8) {
        for (int i = 0; i < 4; ++i) {
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    }
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

/// dst (pair panels, ldb words a row) <- K^T for the key rows [keys x cols]: word (w, j) = word w of
/// key j's BF16 row. row_words(j, w) gives 16 words w .. w + 15 of key j (zero past the row).
/// Keys [keys, panel_columns(keys)) are zero.
template <typename RowWords>
DIFFATTN_BF16_DOT inline void pack_transposed(Index keys, Index cols, const RowWords& row_words, Word* dst,
                                              Index ldb) {
    const Index words = words_of(cols);
    for (Index j0 = 0; j0 < panel_columns(keys); j0 += 16) {
        for (Index w0 = 0; w0 < words; w0 += 16) {
            __m512i r[16];
            for (Index t = 0; t < 16; ++t) r[t] = j0 + t < keys ? row_words(j0 + t, w0) : _mm512_setzero_si512();
            transpose16(r);
            for (Index w = 0; w < std::min<Index>(16, words - w0); ++w) {
                _mm512_storeu_si512(dst + (w0 + w) * ldb + j0, r[w]);
            }
        }
    }
}

/// Rows of `stride` entries from `data` with `cols` entries each, as pack_transposed's row_words
/// (16 words from entry 2w) and pack_value_pairs' row_halves (16 BF16 entries from c, zero past n):
/// floats rounded to BF16, BF16 entries as they are. (Functors: a lambda would not carry the target.)
template <typename S>
struct RowsOf;
template <>
struct RowsOf<float> {
    const float* data;
    Index cols, stride;
    DIFFATTN_BF16_DOT __m512i operator()(Index j, Index w) const {
        return words_from_floats(data + j * stride + 2 * w, cols - 2 * w);
    }
    DIFFATTN_BF16_DOT __m256i operator()(Index i, Index c, Index n) const {
        return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first_lanes(n), data + i * stride + c));
    }
};
template <>
struct RowsOf<std::uint16_t> {
    const std::uint16_t* data;
    Index cols, stride;
    DIFFATTN_BF16_DOT __m512i operator()(Index j, Index w) const {
        return _mm512_maskz_loadu_epi16(first_halves(cols - 2 * w), data + j * stride + 2 * w);
    }
    DIFFATTN_BF16_DOT __m256i operator()(Index i, Index c, Index n) const {
        return _mm256_maskz_loadu_epi16(first_lanes(n), data + i * stride + c);
    }
};

/// pack_transposed from key rows (`stride` entries apart) of floats (rounded to BF16) or BF16.
template <typename S>
DIFFATTN_BF16_DOT inline void pack_keys(const S* k, Index keys, Index cols, Index stride, Word* dst, Index ldb) {
    pack_transposed(keys, cols, RowsOf<S>{k, cols, stride}, dst, ldb);
}

/// dst (pair panels) <- K^T for `keys` BF16 keys in a KV cache's blocks of 16 from `blocks` (the
/// start of a block; kernels/key_rows.hpp: key r's entry i at (r / 16) 16 cols + 16 i + r % 16).
/// A block's entries 2w and 2w + 1 of its 16 keys lie side by side: one load, one interleave.
DIFFATTN_BF16_DOT inline void pack_blocked_keys(const std::uint16_t* blocks, Index keys, Index cols, Word* dst,
                                                Index ldb) {
    const Index words = words_of(cols);
    for (Index j0 = 0; j0 < panel_columns(keys); j0 += 16) {
        const std::uint16_t* block = blocks + j0 * cols;
        const __mmask32 valid = first_halves(std::min<Index>(16, std::max<Index>(0, keys - j0)));
        for (Index w = 0; w < words; ++w) {
            const __mmask32 rows = 2 * w + 1 < cols ? valid | (valid << 16) : valid;
            const __m512i v = _mm512_maskz_loadu_epi16(rows, block + 2 * w * 16);
            _mm512_storeu_si512(dst + w * ldb + j0, interleave_halves(v));
        }
    }
}

/// dst (pair panels, ldb = panel_columns(cols)) <- the value rows [rows x cols]: word (w, c) =
/// (V[2w][c], V[2w + 1][c]), V[rows] taken as zeros when rows is odd. row_halves(i, c, n) gives 16
/// entries c .. c + 15 of row i as BF16 in the low 256 bits (zero past n of them).
template <typename RowHalves>
DIFFATTN_BF16_DOT inline void pack_value_pairs(Index rows, Index cols, const RowHalves& row_halves, Word* dst,
                                               Index ldb) {
    for (Index w = 0; w < words_of(rows); ++w) {
        const bool second = 2 * w + 1 < rows;
        for (Index c = 0; c < panel_columns(cols); c += 16) {
            const __m256i x = row_halves(2 * w, c, cols - c);
            const __m256i y = second ? row_halves(2 * w + 1, c, cols - c) : _mm256_setzero_si256();
            _mm512_storeu_si512(dst + w * ldb + c, interleave_halves(_mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1)));
        }
    }
}

/// pack_value_pairs from value rows (`stride` entries apart) of floats (rounded to BF16) or BF16.
template <typename S>
DIFFATTN_BF16_DOT inline void pack_values(const S* v, Index rows, Index cols, Index stride, Word* dst, Index ldb) {
    pack_value_pairs(rows, cols, RowsOf<S>{v, cols, stride}, dst, ldb);
}

/// C rows [0, MR) x columns [0, 16 NR) (the last vector's lanes `last` only) = alpha * A B, or
/// += A B (Accumulate), over k_pairs words: MR x NR accumulators, each word of A broadcast once.
template <int MR, int NR, bool Accumulate>
DIFFATTN_BF16_DOT inline void micro_tile(const Word* a, Index lda, const Word* b, Index ldb, Index k_pairs, float* c,
                                         Index ldc, float alpha, __mmask16 last) {
    __m512 acc[MR][NR];
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    }
    for (Index p = 0; p < k_pairs; ++p) {
        __m512bh panel[NR];
        for (int n = 0; n < NR; ++n) panel[n] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * n);
        for (int m = 0; m < MR; ++m) {
            const __m512bh word = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[m * lda + p]));
            for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], word, panel[n]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < NR; ++n) {
            float* out = c + m * ldc + 16 * n;
            const __mmask16 lanes = n == NR - 1 ? last : static_cast<__mmask16>(0xffffu);
            const __m512 result = Accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out), acc[m][n])
                                             : _mm512_mul_ps(acc[m][n], _mm512_set1_ps(alpha));
            _mm512_mask_storeu_ps(out, lanes, result);
        }
    }
}

/// Rows per micro-tile and vectors of columns: 6 x 4 = 24 accumulators, 4 panel loads and 6
/// broadcasts a word pair.
inline constexpr int kTileRows = 6;
inline constexpr int kTileVectors = 4;

/// micro_tile<mr, nr> for a run-time mr <= kTileRows and nr <= kTileVectors.
template <int NR, bool Accumulate>
DIFFATTN_BF16_DOT inline void micro_tile_rows(Index mr, const Word* a, Index lda, const Word* b, Index ldb,
                                              Index k_pairs, float* c, Index ldc, float alpha, __mmask16 last) {
    switch (mr) {
        case 1: return micro_tile<1, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
        case 2: return micro_tile<2, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
        case 3: return micro_tile<3, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
        case 4: return micro_tile<4, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
        case 5: return micro_tile<5, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
        default: return micro_tile<kTileRows, NR, Accumulate>(a, lda, b, ldb, k_pairs, c, ldc, alpha, last);
    }
}

template <bool Accumulate>
DIFFATTN_BF16_DOT inline void multiply_panels(const Word* a, Index lda, Index m, const Word* b, Index ldb, Index n,
                                              Index k_pairs, float* c, Index ldc, float alpha) {
    for (Index n0 = 0; n0 < n; n0 += 16 * kTileVectors) {
        const Index cols = std::min<Index>(16 * kTileVectors, n - n0), vectors = (cols + 15) / 16;
        const __mmask16 last = first_lanes(cols - 16 * (vectors - 1));
        for (Index m0 = 0; m0 < m; m0 += kTileRows) {
            const Index mr = std::min<Index>(kTileRows, m - m0);
            const Word* a_rows = a + m0 * lda;
            float* c_tile = c + m0 * ldc + n0;
            switch (vectors) {
                case 1: micro_tile_rows<1, Accumulate>(mr, a_rows, lda, b + n0, ldb, k_pairs, c_tile, ldc, alpha, last); break;
                case 2: micro_tile_rows<2, Accumulate>(mr, a_rows, lda, b + n0, ldb, k_pairs, c_tile, ldc, alpha, last); break;
                case 3: micro_tile_rows<3, Accumulate>(mr, a_rows, lda, b + n0, ldb, k_pairs, c_tile, ldc, alpha, last); break;
                default: micro_tile_rows<4, Accumulate>(mr, a_rows, lda, b + n0, ldb, k_pairs, c_tile, ldc, alpha, last); break;
            }
        }
    }
}

/// C [m x n] (row-major, ldc floats a row) = alpha * A B, or += A B when `accumulate` (alpha
/// unused), for A as BF16 rows (lda words apart, k_pairs words used) and B as pair panels (ldb
/// words a row, k_pairs rows used). Only C's [m x n] entries are read or written.
DIFFATTN_BF16_DOT inline void multiply(const Word* a, Index lda, Index m, const Word* b, Index ldb, Index n,
                                       Index k_pairs, float* c, Index ldc, float alpha, bool accumulate) {
    if (m <= 0 || n <= 0) return;
    if (accumulate) {
        multiply_panels<true>(a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha);
    } else {
        multiply_panels<false>(a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha);
    }
}

}  // namespace diffattn::detail::bf16_dot

#endif  // DIFFATTN_X86_TARGETS
