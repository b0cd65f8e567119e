// Key and value operands stored in a narrower scalar than the kernels compute in: a half-precision
// KV cache (Eigen::half or Eigen::bfloat16, docs/math.md §6). The kernels widen one tile of rows at
// a time into the thread's scratch, so a decode step reads half the bytes and never converts the
// whole cache. Eigen 3.4's cast expressions convert one scalar at a time (its cast functor has no
// packet path), which would cost more than the bytes saved; with AVX-512, F16C or AVX2 the rows are
// widened 16 or 8 entries per instruction, elsewhere by Eigen's scalar conversion.
#pragma once

#include "diffattn/core/prefetch.hpp"
#include "diffattn/core/types.hpp"

#include <Eigen/Core>

#include <cassert>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace diffattn::detail {

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
/// How far ahead of the rows a kernel streams it asks for them: 1 KB ahead helped less than 4 KB
/// (docs/benchmarks.md, "4 KB ahead").
inline constexpr Index kPrefetchAheadBytes = 4096;

/// Asks for the cache lines of [p, p + bytes) `distance` bytes ahead (kPrefetchAheadBytes unless a
/// loop says otherwise), into L2 (prefetch_into_l2): the rows a loop will read next (a prefetch
/// past the end of the rows is a hint the CPU drops, never a read). Always inlined: GCC 12 finds a function that does nothing but
/// prefetch free of side effects and deletes the calls to it where it is not inlined early, which
/// had left the few-row value sums with no prefetch at all (docs/benchmarks.md, "Prefetches GCC
/// deleted").
EIGEN_ALWAYS_INLINE void prefetch_ahead(const void* p, Index bytes, Index distance = kPrefetchAheadBytes) {
    const char* ahead = static_cast<const char*>(p) + distance;
    for (Index b = 0; b < bytes; b += 64) prefetch_into_l2(ahead + b);
}
#endif

#if defined(__AVX512F__)
/// 16 entries from p widened to floats (exact).
inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 widen16(const Eigen::half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 bfloat16_bits_to_float(__m256i bits) {  // a bfloat16 is the upper half of a float's bits
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
inline __m512 widen16(const Eigen::bfloat16* p) {
    return bfloat16_bits_to_float(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define DIFFATTN_WIDEN16_MASKED 1
/// The same for the lanes of `mask` only; the others are 0 and their memory is not read.
inline __m512 widen16(__mmask16 mask, const float* p) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 widen16(__mmask16 mask, const Eigen::half* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p)); }
inline __m512 widen16(__mmask16 mask, const Eigen::bfloat16* p) {
    return bfloat16_bits_to_float(_mm256_maskz_loadu_epi16(mask, p));
}
#endif

/// dst[0, n) = src[0, n) widened to T (exact: every half and bfloat16 value is a float). src is
/// streamed from memory: the SIMD loops prefetch it (prefetch_ahead).
template <typename T, typename S>
void widen(const S* src, T* dst, Index n) {
    Index i = 0;
    if constexpr (std::is_same_v<T, float> && std::is_same_v<S, Eigen::half>) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16) {
            prefetch_ahead(src + i, 1);
            _mm512_storeu_ps(dst + i, widen16(src + i));
        }
#endif
#if defined(__F16C__)
        for (; i + 8 <= n; i += 8) {
            prefetch_ahead(src + i, 1);
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        }
#endif
    } else if constexpr (std::is_same_v<T, float> && std::is_same_v<S, Eigen::bfloat16>) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16) {
            prefetch_ahead(src + i, 1);
            _mm512_storeu_ps(dst + i, widen16(src + i));
        }
#endif
#if defined(__AVX2__)
        // A bfloat16 is the upper half of a float's bits.
        for (; i + 8 <= n; i += 8) {
            prefetch_ahead(src + i, 1);
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
        }
#endif
    }
    for (; i < n; ++i) dst[i] = static_cast<T>(static_cast<float>(src[i]));
}

/// Rows [begin, begin + count) of a key or value operand stored in the scalar S, as T: the rows
/// themselves when S is T (no copy), else widened into `buffer` [>= count x cols], a tile of the
/// thread's scratch (BlockScratch::key_tile / value_tile).
template <typename T, typename S>
auto rows_as(const ConstMatrixRef<S>& m, Index begin, Index count, RowMatrix<T>& buffer) {
    if constexpr (std::is_same_v<S, T>) {
        return m.middleRows(begin, count);
    } else {
        // The buffer's first count * cols entries as a [count x cols] tile: contiguous rows (a KV
        // cache's head-major rows, layers/head_blocks.hpp) widen in one pass.
        using Tile = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
        const Index cols = m.cols();
        assert(buffer.rows() * buffer.cols() >= count * cols);
        Tile tile(buffer.data(), count, cols, Eigen::OuterStride<>(cols));
        if (m.outerStride() == cols) {
            if (count > 0) widen(m.row(begin).data(), tile.data(), count * cols);
        } else {
            for (Index r = 0; r < count; ++r) widen(m.row(begin + r).data(), tile.row(r).data(), cols);
        }
        return tile;
    }
}

}  // namespace diffattn::detail
