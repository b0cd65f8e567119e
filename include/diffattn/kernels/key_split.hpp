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

namespace diffattn::detail {

/// Threads a call of `seq_len_q` query rows on `threads` threads spreads over the keys of each of
/// its query groups: all of them for a call of fewer than kMinPackedRows rows (its one group would
/// leave the others idle), else 1 (its groups go to the threads).
inline int key_split_threads(Index seq_len_q, int threads) { return seq_len_q < kMinPackedRows ? threads : 1; }

/// Runs M maps of the query rows [q_begin, q_begin + q_rows) over every key the mask lets them
/// see: on return into[m] holds map m's {acc, m, l}, as attend_block leaves it.
///   threads 1 (or a single key tile): attend_block for each map on `scratch`, in order.
///   threads > 1: the visible key tiles are cut into up to kKeySegmentsPerThread * threads runs
///     of about equal length (q_rows < kMinPackedRows: the rows see about the same keys); each
///     (map, run) is a task that folds its keys into its own state (the workspace's
///     key_split_parts), handed out one at a time, then each map merges its runs into into[m].
/// A Logits policy called from several threads must only read, or write what its own keys own
/// (IntegralLogits: the column sums of its keys).
template <typename T, typename Logits, typename Mask, std::size_t M>
void attend_maps(Logits* const (&maps)[M], const Mask& mask, Index q_begin, Index q_rows, const ConstMatrixRef<T>& v,
                 AttentionWorkspace<T>& ws, BlockScratch<T>& scratch, int threads,
                 OnlineSoftmaxState<T>* const (&into)[M]) {
    const Index tiles = (block_visit_end(mask, q_begin, q_begin + q_rows) + kKeyTile - 1) / kKeyTile;
    const Index runs = threads > 1 ? std::min<Index>(tiles, kKeySegmentsPerThread * threads) : 1;
    if (runs <= 1) {
        for (std::size_t m = 0; m < M; ++m) attend_block(*maps[m], mask, q_begin, q_rows, v, scratch, *into[m]);
        return;
    }
    assert(q_rows < kMinPackedRows && ws.key_split_parts().size() >= M * static_cast<std::size_t>(runs));
    OnlineSoftmaxState<T>* parts = ws.key_split_parts().data();
    const auto run_keys = [&](Index run) {  // runs of whole tiles, about equal in count
        return KeyRange{run * tiles / runs * kKeyTile, (run + 1) * tiles / runs * kKeyTile};
    };
    parallel_for(static_cast<Index>(M) * runs, threads, Schedule::equal_tasks, [&](Index task, int thread) {
        const auto m = static_cast<std::size_t>(task / runs);
        attend_block(*maps[m], mask, q_begin, q_rows, v, ws.block(thread), parts[task], run_keys(task % runs));
    });
    for (std::size_t m = 0; m < M; ++m) into[m]->merge(parts + static_cast<Index>(m) * runs, runs);
}

}  // namespace diffattn::detail
