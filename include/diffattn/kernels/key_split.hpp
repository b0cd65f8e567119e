// The key split of a call of few query rows (a decode step: one token or a small chunk).
//
// Larger calls spread their query groups over the threads (for_each_query_group). A call of fewer
// than kMinPackedRows rows is one small group, so it spreads its keys instead, as FlashDecoding
// does: the key tiles it sees are cut into runs, each run is folded into its own online-softmax
// state on whichever thread takes it, and the runs' states merge (OnlineSoftmaxState::merge,
// docs/math.md §7: softmax subtracts the row max, here the max over the runs). The runs change
// only the order of the softmax sums, so results agree with one thread within docs/math.md §7.
#pragma once

#include "diffattn/core/parallel.hpp"
#include "diffattn/kernels/attention_core.hpp"

#include <algorithm>
#include <cstddef>
#include <tuple>

namespace diffattn::detail {

/// Threads a call of `seq_len_q` query rows on `threads` threads spreads over the keys of each of
/// its query groups: all of them for a call of fewer than kMinPackedRows rows (its one group would
/// leave the others idle), else 1 (its groups go to the threads).
inline int key_split_threads(Index seq_len_q, int threads) { return seq_len_q < kMinPackedRows ? threads : 1; }

/// Calls f(map, m) for each map m of `maps` (a std::tie of Logits policies), in order.
template <typename... Logits, typename F>
void for_each_map(const std::tuple<Logits&...>& maps, F&& f) {
    std::apply(
        [&](auto&... map) {
            std::size_t m = 0;
            (f(map, m++), ...);
        },
        maps);
}

/// Calls visit(k_begin, k_count) for each key tile of a call of few rows, in order: tiles of
/// kFewRowsKeyTileOf<S> keys from keys.begin (the start of a run of key_runs<S>, or 0) to the end
/// of the run or of the keys the rows [q_begin, q_begin + q_rows) see, whichever comes first. Every
/// pass of a call walks its tiles here, so that the passes and the runs agree on them.
template <typename S, typename Mask, typename Visit>
void for_each_few_rows_tile(const Mask& mask, Index q_begin, Index q_rows, KeyRange keys, Visit&& visit) {
    constexpr Index kTile = kFewRowsKeyTileOf<S>;
    assert(keys.begin % kTile == 0);
    const Index visit_end = std::min(keys.end, block_visit_end(mask, q_begin, q_begin + q_rows));
    for (Index k_begin = keys.begin; k_begin < visit_end; k_begin += kTile) {
        visit(k_begin, std::min(kTile, visit_end - k_begin));
    }
}

/// The online softmax of the maps of the same few query rows [q_begin, q_begin + q_rows)
/// (q_rows < kMinPackedRows) over every key they see, into states[m]: the maps
/// (Logits policies, `maps` a std::tie of them, which may differ in type) take each key tile in
/// turn while its values are in cache, so the values are read once for all the maps (DIFF's two
/// maps share V).
template <typename T, typename S, typename Mask, typename... Logits>
void attend_few_rows(const std::tuple<Logits&...>& maps, const Mask& mask, Index q_begin, Index q_rows,
                     const ConstMatrixRef<S>& v, BlockScratch<T>& scratch,
                     OnlineSoftmaxState<T>* const (&states)[sizeof...(Logits)]) {
    assert(q_rows < kMinPackedRows);
    for (OnlineSoftmaxState<T>* state : states) state->reset(q_rows, v.cols());
    for_each_few_rows_tile<S>(mask, q_begin, q_rows, KeyRange{}, [&](Index k_begin, Index k_count) {
        const auto values = few_rows_operand<T>(v, k_begin, k_count, scratch.value_tile);  // read once for all the maps
        const LazyFinite<decltype(values)> values_finite(values);
        for_each_map(maps, [&](auto& map, std::size_t m) {
            fold_tile(map, mask, q_begin, 0, q_rows, k_begin, k_count, values, values_finite, scratch, *states[m],
                      static_cast<PackedTiles<T>*>(nullptr));
        });
    });
}

/// The runs a call of few rows cuts the key tiles it sees (of `tile` keys) into: up to
/// kKeySegmentsPerThread * threads runs of whole tiles, about equal in count (the rows see about
/// the same keys), or one (no split) with one thread or a single tile.
struct KeyRuns {
    Index tiles = 0;
    Index count = 1;
    Index tile = kKeyTile;
    /// The keys of run r.
    KeyRange operator[](Index r) const {
        return KeyRange{r * tiles / count * tile, (r + 1) * tiles / count * tile};
    }
};

/// The runs of the few query rows [q_begin, q_begin + q_rows) on `threads` threads, over keys
/// stored in S (tiles of kFewRowsKeyTileOf<S>).
template <typename S, typename Mask>
KeyRuns key_runs(const Mask& mask, Index q_begin, Index q_rows, int threads) {
    constexpr Index kTile = kFewRowsKeyTileOf<S>;
    const Index tiles = (block_visit_end(mask, q_begin, q_begin + q_rows) + kTile - 1) / kTile;
    return KeyRuns{tiles, threads > 1 ? std::min<Index>(tiles, kKeySegmentsPerThread * threads) : 1, kTile};
}

/// Calls run(r, keys, scratch) for each run r of `runs`, as one task each on up to `threads`
/// threads, handed out one at a time, with the scratch of the thread running it.
template <typename T, typename Run>
void for_each_key_run(const KeyRuns& runs, int threads, AttentionWorkspace<T>& ws, Run&& run) {
    parallel_for(runs.count, threads, Schedule::equal_tasks,
                 [&](Index r, int thread) { run(r, runs[r], ws.block(thread)); });
}

/// Folds every key the few query rows [q_begin, q_begin + q_rows) see into the M states `into`,
/// with the keys split over `threads` threads. fold(keys, scratch, states) must fold the keys
/// [keys.begin, keys.end) (whole key tiles, or all of them for KeyRange{}) into states[0, M) from
/// a reset, using `scratch`. With several threads the visible key tiles are cut into up to
/// kKeySegmentsPerThread * threads runs of about equal length (the rows see about the same keys);
/// each run is a task, handed out one at a time, that folds into its own states (the workspace's
/// key_split_parts), and then each state merges its runs into into[m]. With one thread or a
/// single tile: fold over all the keys into `into`, on `scratch`. The runs' folds run at once, so
/// a Logits policy they share must only read, or write what its own keys own (IntegralLogits: the
/// column sums of its keys).
template <std::size_t M, typename S, typename T, typename Mask, typename Fold>
void fold_key_runs(const Mask& mask, Index q_begin, Index q_rows, int threads, AttentionWorkspace<T>& ws,
                   BlockScratch<T>& scratch, OnlineSoftmaxState<T>* const (&into)[M], Fold&& fold) {
    const KeyRuns key_runs_of_rows = key_runs<S>(mask, q_begin, q_rows, threads);
    const Index runs = key_runs_of_rows.count;
    if (runs <= 1) {
        fold(KeyRange{}, scratch, into);
        return;
    }
    assert(ws.key_split_parts().size() >= M * static_cast<std::size_t>(runs));
    OnlineSoftmaxState<T>* parts = ws.key_split_parts().data();  // state m's run r at m * runs + r
    for_each_key_run(key_runs_of_rows, threads, ws, [&](Index run, KeyRange keys, BlockScratch<T>& mine) {
        OnlineSoftmaxState<T>* states[M];
        for (std::size_t m = 0; m < M; ++m) states[m] = parts + static_cast<Index>(m) * runs + run;
        fold(keys, mine, states);
    });
    for (std::size_t m = 0; m < M; ++m) into[m]->merge(parts + static_cast<Index>(m) * runs, runs);
}

/// Runs the maps of one query group, the rows [q_begin, q_begin + q_rows), over every key the mask
/// lets them see, on the thread calling it: on return into[m] holds map m's {acc, m, l}.
///   q_rows >= kMinPackedRows: attend_block for each map on `scratch`.
///   fewer rows (the last group of a larger call): attend_few_rows over all the keys. A call of so
///   few rows in all takes the passes of diff_few_rows.hpp instead, which split its keys over the
///   threads.
template <typename T, typename S, typename Mask, typename... Logits>
void attend_maps(const std::tuple<Logits&...>& maps, const Mask& mask, Index q_begin, Index q_rows,
                 const ConstMatrixRef<S>& v, BlockScratch<T>& scratch,
                 OnlineSoftmaxState<T>* const (&into)[sizeof...(Logits)]) {
    if (q_rows >= kMinPackedRows) {
        for_each_map(maps, [&](auto& map, std::size_t m) { attend_block(map, mask, q_begin, q_rows, v, scratch, *into[m]); });
        return;
    }
    attend_few_rows(maps, mask, q_begin, q_rows, v, scratch, into);
}

/// The frame of a call of two maps s Q1 K1^T and s Q2 K2^T over one V (DIFF, DIFF V2's pair of
/// query heads): prepares the workspace, makes both logits policies, dispatches the mask, and calls
/// f(logits1, logits2, mask, q_begin, q_rows, ws, scratch, key_threads) for each query group on the
/// thread running it.
template <typename T, typename S, typename F>
void for_each_two_map_group(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                            const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, const ResolvedOptions& resolved,
                            AttentionWorkspace<T>* workspace, F&& f) {
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, q1.rows(), k1.rows(), q1.cols(), v.cols(), resolved);
    const DotProductLogits<T, S> logits1(q1, k1, T(resolved.scale)), logits2(q2, k2, T(resolved.scale));
    const int key_threads = key_split_threads(q1.rows(), resolved.threads);
    dispatch_mask(resolved.mask, q1.rows(), k1.rows(), resolved.valid_len, [&](const auto& mask) {
        for_each_query_group(q1.rows(), resolved.threads, mask, ws,
                             [&](Index q_begin, Index q_rows, BlockScratch<T>& scratch) {
                                 f(logits1, logits2, mask, q_begin, q_rows, ws, scratch, key_threads);
                             });
    });
}

}  // namespace diffattn::detail
