// The AVX-512 loops of the few-row products (few_rows_products.hpp): a decode step's logits of one
// query row against a tile of keys, and its probabilities times the value rows.
//
// Eigen's matrix-vector product over row-major keys sums each key's products with a horizontal
// sum: at head dim 32 that is two multiply-adds and about eight shuffles and adds per key, so the
// logits of a decode step cost more time than reading the keys (docs/benchmarks.md, "16-key
// logits"). The key dots below instead keep one vector of partial sums per key for 16 keys, then
// reduce the 16 vectors together in a transpose-and-add tree: 15 vector adds and 30 shuffles for
// 16 keys, about three operations per key. Each step reads its keys one after the other, in the
// order they lie in memory, and a head's keys stored contiguously (a KV cache's head-major block)
// are read at fixed offsets from one pointer. Keys of a half-precision KV cache are widened in the
// registers that multiply them (stored_rows.hpp's widen16), with no tile buffer. The values take
// the same path: their rows are streamed once, up to 128 columns at a time (64 for three or four
// outputs) held in registers over all the keys of the tile, for up to four outputs at once, widened
// in registers too (docs/benchmarks.md, "Reading the cache in memory order").
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/stored_rows.hpp"

#include <algorithm>
#include <type_traits>

// The loops below need AVX-512 F, BW and VL (the masked widening of stored_rows.hpp).
#if defined(DIFFATTN_WIDEN16_MASKED) && !defined(EIGEN_DONT_VECTORIZE)
#define DIFFATTN_FEW_ROWS_AVX512 1
#endif

#if defined(DIFFATTN_FEW_ROWS_AVX512)
namespace diffattn::detail {

/// The 16 sums of the lanes of v[0..16), in order: lane t of the result is the sum of v[t]'s lanes.
/// Each level halves the vectors, adding lanes of two vectors that the shuffles line up.
inline __m512 sum_lanes_of_16(__m512 (&v)[16]) {
    // Level 1: within each 128-bit lane, [a0+a2, b0+b2, a1+a3, b1+b3] of the pair (a, b).
    __m512 pairs[8];
    for (int t = 0; t < 8; ++t) {
        pairs[t] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * t], v[2 * t + 1]), _mm512_unpackhi_ps(v[2 * t], v[2 * t + 1]));
    }
    // Level 2: within each 128-bit lane, one partial sum of each of four vectors.
    __m512 quads[4];
    for (int t = 0; t < 4; ++t) {
        const __m512d x = _mm512_castps_pd(pairs[2 * t]), y = _mm512_castps_pd(pairs[2 * t + 1]);
        quads[t] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // Level 3: 128-bit lanes [X0+X1, X2+X3, Y0+Y1, Y2+Y3] of the quads X, Y.
    __m512 octs[2];
    for (int t = 0; t < 2; ++t) {
        octs[t] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * t], quads[2 * t + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_f32x4(quads[2 * t], quads[2 * t + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    // Level 4: 128-bit lane i holds vectors 4i .. 4i + 3, in order.
    return _mm512_add_ps(_mm512_shuffle_f32x4(octs[0], octs[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(octs[0], octs[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/// Keeps the loads before this point before the loads after it. GCC otherwise schedules a step's
/// 16 keys packet by packet (key 0's first packet, key 1's first, ...), which reads each key's
/// lines out of memory order, more slowly (docs/benchmarks.md, "One stream per map"). A compiler
/// barrier only: it emits no instruction.
__attribute__((always_inline)) inline void keep_load_order() { __asm__ volatile("" ::: "memory"); }

/// The scaled dots of `query` with the n <= 16 key rows from `keys` (row-major with `stride`, head
/// dim d = full + the lanes of `tail`) into out[0, n). Each key's packets are read one after the
/// other, key by key, in the order the rows lie in memory, which the hardware prefetcher follows.
/// Packets > 0: full = 16 Packets, the query held in registers; Dense: also no tail and stride =
/// d (a head-major cache block), so that every load is at a fixed offset from `keys`. Inlined with
/// n = 16 for whole steps, so that the `t < n` tests fold away.
template <int Packets, bool Dense, typename S>
__attribute__((always_inline)) inline void scaled_key_dots_step(const float* query, const S* keys, Index stride,
                                                                Index n, Index full, __mmask16 tail, __m512 scales,
                                                                float* out) {
    if constexpr (Dense) stride = 16 * Packets;
    __m512 acc[16];
    __m512 q[Packets > 0 ? Packets : 1];
    for (int i = 0; i < Packets; ++i) q[i] = _mm512_loadu_ps(query + 16 * i);
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
        acc[t] = _mm512_setzero_ps();  // keys past n add nothing
        if (t < n) {
            const S* key = keys + t * stride;
            if constexpr (Packets > 0) {
#pragma GCC unroll 8
                for (int i = 0; i < Packets; ++i) acc[t] = _mm512_fmadd_ps(widen16(key + 16 * i), q[i], acc[t]);
                keep_load_order();
            } else {
                for (Index i = 0; i < full; i += 16) {
                    acc[t] = _mm512_fmadd_ps(widen16(key + i), _mm512_loadu_ps(query + i), acc[t]);
                }
            }
        }
    }
    if (!Dense && tail != 0) {
        const __m512 q_tail = _mm512_maskz_loadu_ps(tail, query + full);
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
            if (t < n) acc[t] = _mm512_fmadd_ps(widen16(tail, keys + t * stride + full), q_tail, acc[t]);
        }
    }
    _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << n) - 1u), _mm512_mul_ps(sum_lanes_of_16(acc), scales));
}

/// scaled_key_dots for a head dim of 16 Packets + the tail's lanes (scaled_key_dots_step).
template <int Packets, bool Dense, typename S>
void scaled_key_dots_of(const float* query, const S* keys, Index stride, Index count, Index full, __mmask16 tail,
                        float scale, float* out, bool prefetch) {
    const __m512 scales = _mm512_set1_ps(scale);
    const Index step_bytes = 16 * stride * static_cast<Index>(sizeof(S));
    Index j = 0;
    for (; j + 16 <= count; j += 16) {
        if (prefetch) prefetch_ahead(keys + j * stride, step_bytes);
        scaled_key_dots_step<Packets, Dense>(query, keys + j * stride, stride, 16, full, tail, scales, out + j);
    }
    if (j < count) {
        scaled_key_dots_step<Packets, Dense>(query, keys + j * stride, stride, count - j, full, tail, scales, out + j);
    }
}

/// out[j] = scale * (query . keys row j) for j < count: keys row-major with `stride`, head dim d,
/// streamed from memory: unless `prefetch` is false (the keys already read, for an earlier query
/// row), each step asks for the keys ahead of its own.
template <typename S>
void scaled_key_dots(const float* query, const S* keys, Index stride, Index count, Index d, float scale, float* out,
                     bool prefetch) {
    const Index full = d / 16 * 16;
    const auto tail = static_cast<__mmask16>((1u << (d - full)) - 1u);
    const bool dense = stride == d && tail == 0;
    const auto run = [&](auto packets) {
        constexpr int kPackets = decltype(packets)::value;
        const auto with = [&](auto is_dense) {
            scaled_key_dots_of<kPackets, decltype(is_dense)::value>(query, keys, stride, count, full, tail, scale, out,
                                                                   prefetch);
        };
        if constexpr (kPackets >= 2) {
            if (dense) return with(std::true_type{});
        }
        with(std::false_type{});
    };
    switch (full / 16) {  // the family's head dims (32, 64, 128) take code of their own
        case 1: return run(std::integral_constant<int, 1>{});
        case 2: return run(std::integral_constant<int, 2>{});
        case 4: return run(std::integral_constant<int, 4>{});
        case 8: return run(std::integral_constant<int, 8>{});
        default: return run(std::integral_constant<int, 0>{});
    }
}

/// How far ahead the blocked key dots and the value sums ask for their lines, in bytes, where a line
/// costs more work than one float row against one query or weight row: a group of rows (M >= 2: M
/// broadcasts and M multiply-adds a line) or half precision (two rows of keys, or 32 values,
/// widened, a line). The core's window then holds fewer lines in flight than the one-row float
/// loops', which need no prefetch. 8 KB ahead read a group's keys 1.1-1.2x faster than no prefetch,
/// and a little faster than 4 KB (docs/benchmarks.md, "Keys asked for ahead where a line costs
/// more", "Prefetches GCC deleted").
inline constexpr Index kCostlyLinePrefetchBytes = 8192;

/// The scaled dots of M (1-4) query rows with n <= 16 keys of one block (kernels/key_rows.hpp's
/// blocked layout: entry i of the block's keys at block + 16 i), `lanes` the mask of those keys: d
/// multiply-adds of the block's rows by each query's entries, and no sum across lanes. Each row of
/// the block is loaded once for the M queries (a GQA group's query heads); the products go in 4 / M
/// chains per query, into out[m][j, j + 16). The keys outside `lanes` are not read. A whole block of
/// M >= 2 rows or of half-precision keys asks for each line kCostlyLinePrefetchBytes ahead.
template <int M, bool Whole, typename S>
__attribute__((always_inline)) inline void scaled_block_dots(const float* const (&queries)[M], const S* block, Index d,
                                                             __mmask16 lanes, __m512 scales, float* const (&out)[M],
                                                             Index j) {
    constexpr int kChains = M == 1 ? 4 : M == 2 ? 2 : 1;
    constexpr Index kRowsPerLine = 64 / (16 * static_cast<Index>(sizeof(S)));  // 1 (float), 2 (half)
    constexpr bool kAskAhead = Whole && (M >= 2 || kRowsPerLine > 1);         // kCostlyLinePrefetchBytes
    const auto row = [&](Index i) {
        if constexpr (Whole) {
            return widen16(block + 16 * i);
        } else {
            return widen16(lanes, block + 16 * i);
        }
    };
    __m512 acc[M][kChains];
    for (int m = 0; m < M; ++m) {
        for (int c = 0; c < kChains; ++c) acc[m][c] = _mm512_setzero_ps();
    }
    Index i = 0;
    for (; i + kChains <= d; i += kChains) {
#pragma GCC unroll 4
        for (int c = 0; c < kChains; ++c) {
            if (kAskAhead && (i + c) % kRowsPerLine == 0) {  // once a line
                prefetch_into_l2(reinterpret_cast<const char*>(block + 16 * (i + c)) + kCostlyLinePrefetchBytes);
            }
            const __m512 entries = row(i + c);
            for (int m = 0; m < M; ++m) {
                acc[m][c] = _mm512_fmadd_ps(entries, _mm512_set1_ps(queries[m][i + c]), acc[m][c]);
            }
        }
    }
    for (; i < d; ++i) {
        const __m512 entries = row(i);
        for (int m = 0; m < M; ++m) acc[m][0] = _mm512_fmadd_ps(entries, _mm512_set1_ps(queries[m][i]), acc[m][0]);
    }
    for (int m = 0; m < M; ++m) {
        __m512 sums = acc[m][0];
        if constexpr (kChains == 2) sums = _mm512_add_ps(sums, acc[m][1]);
        if constexpr (kChains == 4) {
            sums = _mm512_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]), _mm512_add_ps(acc[m][2], acc[m][3]));
        }
        _mm512_mask_storeu_ps(out[m] + j, lanes, _mm512_mul_ps(sums, scales));
    }
}

/// out[m][j] = scale * (queries[m] . key j) for j < count and each of the M (1-4) query rows, the
/// keys in blocks of 16 from `blocks` (the block of key 0; kernels/key_rows.hpp), d entries each,
/// each block read once for the M rows. One row of float keys asks for no lines ahead: the blocks
/// are one run of memory read in order, which the hardware prefetcher follows, and asking for each
/// line ahead made decode steps slower (docs/benchmarks.md, "Keys in blocks of 16"). A group of
/// rows, or half-precision keys, do ask (kCostlyLinePrefetchBytes).
template <int M, typename S>
void scaled_blocked_key_dots(const float* const (&queries)[M], const S* blocks, Index count, Index d, float scale,
                             float* const (&out)[M]) {
    static_assert(M >= 1 && M <= 4, "one to four query rows");
    const __m512 scales = _mm512_set1_ps(scale);
    Index j = 0;
    for (; j + 16 <= count; j += 16) scaled_block_dots<M, true>(queries, blocks + j * d, d, 0xffff, scales, out, j);
    if (j < count) {
        const auto lanes = static_cast<__mmask16>((1u << (count - j)) - 1u);
        scaled_block_dots<M, false>(queries, blocks + j * d, d, lanes, scales, out, j);
    }
}

/// acc[m][c, c + 16 V) += sum_j p[m][j] * (values row j)[c, c + 16 V) for j < count: the columns
/// held in registers over all the keys. Every vector but the last is whole; `last` the lanes of the
/// last inside dv (LastWhole: all 16). With `prefetch`, M >= 2 weight rows or half-precision values
/// ask for each row kCostlyLinePrefetchBytes ahead; one weight row of float values asks for none.
template <int M, int V, bool LastWhole, typename S>
__attribute__((always_inline)) inline void accumulate_value_columns(const float* const (&p)[M], const S* values,
                                                                    Index stride, Index count, Index row_bytes,
                                                                    Index c, __mmask16 last,
                                                                    float* const (&acc)[M], bool prefetch) {
    constexpr bool kAskAhead = M >= 2 || sizeof(S) < sizeof(float);  // kCostlyLinePrefetchBytes
    const bool ask_ahead = kAskAhead && prefetch;
    const auto lanes = [last](int i) { return i + 1 < V ? static_cast<__mmask16>(0xffff) : last; };
    __m512 sums[M][V];
    for (int m = 0; m < M; ++m) {
        for (int i = 0; i < V; ++i) sums[m][i] = _mm512_maskz_loadu_ps(lanes(i), acc[m] + c + 16 * i);
    }
    for (Index j = 0; j < count; ++j) {
        const S* row = values + j * stride;
        if (ask_ahead) prefetch_ahead(row, row_bytes, kCostlyLinePrefetchBytes);
        __m512 weight[M];
        for (int m = 0; m < M; ++m) weight[m] = _mm512_set1_ps(p[m][j]);
#pragma GCC unroll 8
        for (int i = 0; i < V; ++i) {
            const __m512 packet =
                LastWhole || i + 1 < V ? widen16(row + c + 16 * i) : widen16(last, row + c + 16 * i);
            for (int m = 0; m < M; ++m) sums[m][i] = _mm512_fmadd_ps(packet, weight[m], sums[m][i]);
        }
    }
    for (int m = 0; m < M; ++m) {
        for (int i = 0; i < V; ++i) _mm512_mask_storeu_ps(acc[m] + c + 16 * i, lanes(i), sums[m][i]);
    }
}

/// acc[m][0, dv) += sum_j p[m][j] * (values row j) for j < count and each of the M (1-4) weight
/// rows: values row-major with `stride`. The columns go in sweeps of up to 128 (M <= 2) or 64 (M > 2)
/// columns, eight or four vectors per output held in registers over all the keys, so that a row of
/// up to 128 columns is read whole, in the order it lies in memory. Each sweep takes as few vectors
/// as hold its columns, so that only the last vector of a sweep can be partly masked: a vector masked
/// off whole had sent every key through a masked loop (docs/benchmarks.md, "Rows of 32 values"). The
/// first sweep asks for whole rows ahead (accumulate_value_columns), unless `prefetch` is false (the
/// rows already read). The M outputs take each value packet from one load: DINT causal_mean's O and
/// O1 = A1 V (diff_few_rows.hpp), or the query rows of a GQA group, whose sweeps of a tile after the
/// first had cost most of the time of the first. Each output's sums are those of the M = 1 call, in
/// the same order.
template <int M, typename S>
void accumulate_value_rows(const float* const (&p)[M], const S* values, Index stride, Index count, Index dv,
                           float* const (&acc)[M], bool prefetch) {
    static_assert(M >= 1 && M <= 4, "one to four weight rows");
    constexpr Index kMaxVectors = M <= 2 ? 8 : 4;  // 16 sums at most: 8 vectors of each output
    const Index row_bytes = dv * static_cast<Index>(sizeof(S));
    for (Index c = 0; c < dv; c += 16 * kMaxVectors) {
        const Index columns = std::min(dv - c, 16 * kMaxVectors);
        const auto last = static_cast<__mmask16>((1u << (columns - 16 * ((columns - 1) / 16))) - 1u);
        const auto sweep = [&](auto vectors) {
            constexpr int V = decltype(vectors)::value;
            if constexpr (V <= kMaxVectors) {
                if (last == 0xffff) {
                    accumulate_value_columns<M, V, true>(p, values, stride, count, row_bytes, c, last, acc,
                                                         prefetch && c == 0);
                } else {
                    accumulate_value_columns<M, V, false>(p, values, stride, count, row_bytes, c, last, acc,
                                                          prefetch && c == 0);
                }
            }
        };
        switch ((columns + 15) / 16) {
            case 1: sweep(std::integral_constant<int, 1>{}); break;
            case 2: sweep(std::integral_constant<int, 2>{}); break;
            case 3: sweep(std::integral_constant<int, 3>{}); break;
            case 4: sweep(std::integral_constant<int, 4>{}); break;
            case 5: sweep(std::integral_constant<int, 5>{}); break;
            case 6: sweep(std::integral_constant<int, 6>{}); break;
            case 7: sweep(std::integral_constant<int, 7>{}); break;
            default: sweep(std::integral_constant<int, 8>{}); break;
        }
    }
}

}  // namespace diffattn::detail
#endif
