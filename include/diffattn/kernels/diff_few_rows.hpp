// DIFF (and DIFF V2's gated pair, the DIFF part of DINT's mean modes, and softmax as a DIFF of one
// map) for a call of few query rows (a decode step: one token or a small chunk), multiplying V once
// instead of once per map.
//
// The grouped path keeps one online-softmax state per map and multiplies V by each map's
// probabilities: two multiply-adds per value column, key and row. Once both maps' final row max
// and sum are known, the two maps fold into one weight per key, A1[r, j] - lambda A2[r, j]
// (docs/math.md §2.2, the operator as written), and V is multiplied once. A call of fewer than
// kMinPackedRows rows gets there in two passes that still read K1, K2 and V once each:
//   1. s Q1 K1^T and s Q2 K2^T over K1 and K2, folded into each map's row max and sum, and the
//      probabilities of each tile as the fold left them kept in the workspace (one scalar per row,
//      key and map, 1/d of a key map's bytes, and one per row and tile: kept_probabilities.hpp);
//   2. one pass over V: each tile's weights from the kept probabilities rescaled to pass 1's final
//      statistics (an exp per row and tile, not per key), times V.
// Both passes split their keys over the threads (key_split.hpp); the second pass's runs simply add
// up, their weights being final. Only the order of the sums and a rounding of each weight change,
// so results agree with the grouped path within docs/math.md §7.
#pragma once

#include "diffattn/kernels/key_split.hpp"

#include <array>
#include <cstddef>
#include <type_traits>

namespace diffattn::detail {

/// One map of pass 1: its logits policy, where its probabilities are kept ([q_rows x S], the
/// call's rows in the same columns as their keys), and its row max and sum.
template <typename T, typename Logits>
struct MapToKeep {
    Logits& logits;
    KeptProbabilities<T>& kept;
    OnlineSoftmaxState<T>& statistics;
};

/// Folds one map's tile of logits [q_rows x k_count] (rows padded, as fold() needs) into its
/// statistics (value width 0: only the row max and sum) and keeps the probabilities the fold left
/// in the tile, with the row maxima they are relative to, in map.kept.
template <typename T, typename Logits, typename Mask, typename Tile>
void keep_tile(const MapToKeep<T, Logits>& map, const Mask& mask, Index q_begin, Index k_begin, Tile& tile) {
    const Index k_count = tile.cols();
    const bool masked = k_begin + k_count > block_unmasked_end(mask, q_begin);
    map.statistics.fold(0, tile, masked,
                        [&](Index r) { return visible_keys_in_tile(mask, q_begin + r, k_begin, k_count); });
    map.kept.keep(k_begin, tile, map.statistics);
}

/// Pass 1 over the keys [keys.begin, keys.end) the rows [q_begin, q_begin + q_rows) see, for each
/// of `maps`: its logits kept, and folded into its statistics. Maps over keys of their own (DIFF's
/// K1 and K2) go one after the other, each reading its keys as one stream, which the prefetchers
/// follow better than tiles of two streams in turn (docs/benchmarks.md, "One stream per map").
template <typename S, typename T, typename Logits, std::size_t M, typename Mask>
void keep_map_logits(const std::array<MapToKeep<T, Logits>, M>& maps, const Mask& mask, Index q_begin, Index q_rows,
                     BlockScratch<T>& scratch, KeyRange keys) {
    for (const MapToKeep<T, Logits>& map : maps) {
        map.statistics.reset(q_rows, 0);
        for_each_few_rows_tile<S>(mask, q_begin, q_rows, keys, [&](Index k_begin, Index k_count) {
            auto tile = scratch.few_rows_logits.topLeftCorner(q_rows, k_count);
            map.logits(q_begin, q_begin, k_begin, tile, nullptr, scratch.key_tile);
            keep_tile(map, mask, q_begin, k_begin, tile);
        });
    }
}

/// keep_map_logits for two maps over the same keys (DIFF V2's two query heads of one kv head):
/// each key tile is read once for both (DotProductLogits::few_rows_tiles_with). Each map folds its
/// tiles in the same order as keep_map_logits would.
template <typename T, typename S, typename Mask>
void keep_paired_map_logits(const MapToKeep<T, const DotProductLogits<T, S>>& map1,
                            const MapToKeep<T, const DotProductLogits<T, S>>& map2, const Mask& mask, Index q_begin,
                            Index q_rows, BlockScratch<T>& scratch, KeyRange keys) {
    map1.statistics.reset(q_rows, 0);
    map2.statistics.reset(q_rows, 0);
    for_each_few_rows_tile<S>(mask, q_begin, q_rows, keys, [&](Index k_begin, Index k_count) {
        auto tile1 = scratch.few_rows_logits.block(0, 0, q_rows, k_count);
        auto tile2 = scratch.few_rows_logits.block(q_rows, 0, q_rows, k_count);  // below it
        map1.logits.few_rows_tiles_with(map2.logits, q_begin, k_begin, tile1, tile2, scratch.key_tile);
        keep_tile(map1, mask, q_begin, k_begin, tile1);
        keep_tile(map2, mask, q_begin, k_begin, tile2);
    });
}

/// A factor per query row, data[r * stride] (DIFF V2's gates), or 1 for every row (data null).
template <typename T>
struct RowFactors {
    const T* data = nullptr;
    Index stride = 1;
    T operator[](Index r) const { return data != nullptr ? data[r * stride] : T(1); }
};

/// One map's share of the combined weights: coefficient[r] exp(logit[r, j] - row max) for the keys
/// a row sees, coefficient[r] = factor row_factors[r] / row sum (docs/math.md §2.2, 3.4), from the
/// kept probabilities. A row whose map saw no key (sum 0) adds nothing.
template <typename T>
struct KeptMap {
    const KeptProbabilities<T>& kept;         ///< [rows / broadcast x S]
    const OnlineSoftmaxState<T>& statistics;  ///< its final row max and sum
    T factor;                                 ///< 1 for map 1; map 2: -lambda (DIFF, GDA), -1 (DIFF V2)
    RowFactors<T> row_factors;                ///< map 2 of DIFF V2: sigmoid(l) of each row
    Index broadcast = 1;                      ///< GDA's noise map: one kept row serves `broadcast` rows
                                              ///< (row r reads kept row r / broadcast, docs/math.md §9)
};

/// Pass 2 over the keys [keys.begin, keys.end) that the rows [0, q_rows) see: acc [q_rows x dv]
/// += (sum over maps of their weights) V; and, unless `first_map` is null, first_map [q_rows x dv]
/// += (maps[0]'s weights alone) V from the same value tile (DINT causal_mean's O1 = A1 V, whose
/// rows its state sums: docs/math.md §2.3, §6).
template <typename T, typename S, typename Mask, std::size_t M, typename Acc, typename FirstMap = std::nullptr_t>
void weigh_values(const std::array<KeptMap<T>, M>& maps, const Mask& mask, Index q_rows, const ConstMatrixRef<S>& v,
                  BlockScratch<T>& scratch, KeyRange keys, Acc&& acc, FirstMap first_map = nullptr) {
    constexpr bool kFirstMap = !std::is_same_v<FirstMap, std::nullptr_t>;
    for_each_few_rows_tile<S>(mask, 0, q_rows, keys, [&](Index k_begin, Index k_count) {
        const auto values = few_rows_operand<T>(v, k_begin, k_count, scratch.value_tile);
        auto weights = scratch.few_rows_logits.topLeftCorner(q_rows, k_count);
        auto first_weights = scratch.few_rows_logits.block(q_rows, 0, kFirstMap ? q_rows : 0, k_count);  // below them
        Index min_visible = k_count;
        for (Index r = 0; r < q_rows; ++r) {
            const Index n = visible_keys_in_tile(mask, r, k_begin, k_count);
            min_visible = std::min(min_visible, n);
            auto row = weights.row(r);
            row.setZero();
            if constexpr (kFirstMap) first_weights.row(r).setZero();
            for (std::size_t m = 0; m < M; ++m) {
                const KeptMap<T>& map = maps[m];
                if (n == 0) continue;
                const Index kept_row = r / map.broadcast;
                const T coefficient =
                    map.factor * map.row_factors[r] * map.kept.normalizer(kept_row, k_begin, map.statistics);
                const auto map_weights = coefficient * map.kept.probabilities.row(kept_row).segment(k_begin, n).array();
                if constexpr (kFirstMap) {
                    if (m == 0) {
                        first_weights.row(r).head(n).array() = map_weights;
                        row.head(n) += first_weights.row(r).head(n);
                        continue;
                    }
                }
                row.head(n).array() += map_weights;
            }
        }
        // Hidden keys weigh exact zeros, which is exact unless a hidden value row holds Inf/NaN.
        if (min_visible == k_count || all_finite(values)) {
            if constexpr (kFirstMap) {
                few_rows_accumulate(acc, weights, values, SecondProduct{first_map, first_weights});  // one sweep
            } else {
                few_rows_accumulate(acc, weights, values);
            }
        } else {
            accumulate_visible_prefixes(mask, 0, k_begin, acc, weights, values);
            if constexpr (kFirstMap) accumulate_visible_prefixes(mask, 0, k_begin, first_map, first_weights, values);
        }
    });
}

/// Pass 2 of a call of q_rows < kMinPackedRows rows, all of them: out = (sum over maps of their
/// weights) V, and first_map = maps[0]'s weights times V unless it is null (weigh_values), the keys
/// split over `threads` threads; each run adds its share into its own accumulator (the workspace's
/// key_split_parts: out's rows, then first_map's), and the runs add up in order.
template <typename T, typename S, typename Mask, std::size_t M, typename FirstMap = std::nullptr_t>
void multiply_values_once(const std::array<KeptMap<T>, M>& maps, const Mask& mask, Index q_rows,
                          const ConstMatrixRef<S>& v, int threads, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch,
                          MatrixRef<T>& out, FirstMap first_map = nullptr) {
    constexpr bool kFirstMap = !std::is_same_v<FirstMap, std::nullptr_t>;
    assert(q_rows < kMinPackedRows && q_rows == out.rows());
    const KeyRuns runs = key_runs<S>(mask, 0, q_rows, threads);
    if (runs.count <= 1) {
        out.setZero();
        if constexpr (kFirstMap) first_map.setZero();
        weigh_values(maps, mask, q_rows, v, scratch, KeyRange{}, out, first_map);
        return;
    }
    OnlineSoftmaxState<T>* parts = ws.key_split_parts().data();  // only their accumulators
    for_each_key_run(runs, threads, ws, [&](Index run, KeyRange keys, BlockScratch<T>& mine) {
        parts[run].reset(kFirstMap ? 2 * q_rows : q_rows, v.cols());
        if constexpr (kFirstMap) {
            weigh_values(maps, mask, q_rows, v, mine, keys, parts[run].accumulator_rows(0, q_rows),
                         parts[run].accumulator_rows(q_rows, q_rows));
        } else {
            weigh_values(maps, mask, q_rows, v, mine, keys, parts[run].accumulator_rows(0, q_rows));
        }
    });
    out = parts[0].accumulator_rows(0, q_rows);
    for (Index run = 1; run < runs.count; ++run) out += parts[run].accumulator_rows(0, q_rows);
    if constexpr (kFirstMap) {
        first_map = parts[0].accumulator_rows(q_rows, q_rows);
        for (Index run = 1; run < runs.count; ++run) first_map += parts[run].accumulator_rows(q_rows, q_rows);
    }
}

/// Pass 1 of a call of q_rows < kMinPackedRows rows, all of them, over the keys of S = seq_len_kv:
/// s Q1 K1^T and s Q2 K2^T folded into their row max and sum, in scratch.states[0] and [1], and
/// their probabilities kept in the workspace (kept_probabilities maps 0 and 1), the keys split over
/// `threads` threads, tile by tile.
template <typename T, typename S, typename Mask>
void keep_two_maps(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2, const Mask& mask,
                   Index q_rows, Index seq_len_kv, int threads, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch) {
    KeptProbabilities<T> kept1 = ws.kept_probabilities(q_rows, seq_len_kv, kFewRowsKeyTileOf<S>, 0);
    KeptProbabilities<T> kept2 = ws.kept_probabilities(q_rows, seq_len_kv, kFewRowsKeyTileOf<S>, 1);
    using Map = MapToKeep<T, const DotProductLogits<T, S>>;
    const bool shared_keys = logits1.shares_key_tiles_with(logits2);
    fold_key_runs<2, S>(mask, 0, q_rows, threads, ws, scratch, {&scratch.states[0], &scratch.states[1]},
                     [&](KeyRange keys, BlockScratch<T>& mine, const auto& states) {
                         const std::array<Map, 2> maps{Map{logits1, kept1, *states[0]}, Map{logits2, kept2, *states[1]}};
                         if (shared_keys) {
                             keep_paired_map_logits(maps[0], maps[1], mask, 0, q_rows, mine, keys);
                         } else {
                             keep_map_logits<S>(maps, mask, 0, q_rows, mine, keys);
                         }
                     });
}

/// Softmax (docs/math.md §2.1), a DIFF of one map: out = A V for a call of q_rows < kMinPackedRows
/// query rows, all of them, in the file comment's two passes (the map's keys, then V), on `threads`
/// threads; scratch.states[0] ends with the map's row max and sum. Reading K and then V, each as
/// one stream, ran the decode step's heads faster in half precision than the tile-by-tile online
/// softmax, which reads a key tile and its value tile in turn (docs/benchmarks.md, "Softmax in two
/// passes").
template <typename T, typename S, typename Mask>
void softmax_few_rows(const DotProductLogits<T, S>& logits, const Mask& mask, const ConstMatrixRef<S>& v,
                      Index q_rows, int threads, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch,
                      MatrixRef<T>& out) {
    assert(q_rows < kMinPackedRows && q_rows == out.rows());
    KeptProbabilities<T> kept = ws.kept_probabilities(q_rows, v.rows(), kFewRowsKeyTileOf<S>, 0);
    using Map = MapToKeep<T, const DotProductLogits<T, S>>;
    fold_key_runs<1, S>(mask, 0, q_rows, threads, ws, scratch, {&scratch.states[0]},
                        [&](KeyRange keys, BlockScratch<T>& mine, const auto& states) {
                            const std::array<Map, 1> map{Map{logits, kept, *states[0]}};
                            keep_map_logits<S>(map, mask, 0, q_rows, mine, keys);
                        });
    const std::array<KeptMap<T>, 1> maps{KeptMap<T>{kept, scratch.states[0], T(1), {}}};
    multiply_values_once(maps, mask, q_rows, v, threads, ws, scratch, out);
}

/// out = (A1 - diag(factor2) A2) V for a call of q_rows < kMinPackedRows query rows, all of them
/// (the file comment's two passes), on `threads` threads: factor2[r] = lambda for DIFF, row r's gate
/// for DIFF V2 (lambda 1, `gates`; docs/math.md §3.4); the workspace reserved for q_rows x S (its
/// kept_probabilities) and for the key split. Unless `first_map` is null it also gets O1 = A1 V
/// [q_rows x dv] (DINT's mean modes, multiply_values_once).
template <typename T, typename S, typename Mask, typename FirstMap = std::nullptr_t>
void diff_few_rows(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2, const Mask& mask,
                   const ConstMatrixRef<S>& v, T lambda, RowFactors<T> gates, Index q_rows, int threads,
                   AttentionWorkspace<T>& ws, BlockScratch<T>& scratch, MatrixRef<T>& out,
                   FirstMap first_map = nullptr) {
    assert(q_rows < kMinPackedRows && q_rows == out.rows());
    keep_two_maps(logits1, logits2, mask, q_rows, v.rows(), threads, ws, scratch);
    const KeptProbabilities<T> kept1 = ws.kept_probabilities(q_rows, v.rows(), kFewRowsKeyTileOf<S>, 0);
    const KeptProbabilities<T> kept2 = ws.kept_probabilities(q_rows, v.rows(), kFewRowsKeyTileOf<S>, 1);
    const std::array<KeptMap<T>, 2> maps{KeptMap<T>{kept1, scratch.states[0], T(1), {}},
                                         KeptMap<T>{kept2, scratch.states[1], -lambda, gates}};
    multiply_values_once(maps, mask, q_rows, v, threads, ws, scratch, out, first_map);
}

}  // namespace diffattn::detail
