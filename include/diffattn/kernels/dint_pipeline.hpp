// The state of DINT causal_softmax's pipeline of query groups on several threads: the online-softmax
// states it keeps alive, and the plan and progress of its tasks. The workspace owns it
// (attention_workspace.hpp); dint_schedule.hpp plans it and hands out its tasks.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/online_softmax.hpp"
#include "diffattn/kernels/tiling.hpp"

#include <array>
#include <cstddef>
#include <vector>

namespace diffattn {

/// DINT causal_softmax on T > 1 threads splits the key tiles of a query group that needs it
/// (plan_integral_runs) into up to kKeySegmentsPerThread * T runs, handed out one at a time: more
/// runs than threads keep both cores busy when one is slowed, at the cost of one more
/// online-softmax state to merge per run.
inline constexpr Index kKeySegmentsPerThread = 2;

/// DINT causal_softmax on several threads (dint_softmax_integral): the states its pipeline of query
/// groups keeps alive, and the plan and progress of its tasks. Group g's two maps live in map slot
/// g % kDintMapSlots until its rows are written, and its integral map's runs in run slot g % 2; the
/// task queue (DintTaskQueue) hands out a task only once the slot it fills is free.
/// O(kGroupRows * value_dim * (2 * kDintMapSlots + 2 * kKeySegmentsPerThread * threads)
///   + query groups * kKeySegmentsPerThread * threads).
inline constexpr std::size_t kDintMapSlots = 3;
template <typename T>
struct DintPipeline {
    std::array<std::array<OnlineSoftmaxState<T>, 2>, kDintMapSlots> maps;  ///< [group % slots][map 1, map 2]
    std::array<std::vector<OnlineSoftmaxState<T>>, 2> runs;          ///< [group % 2][run] integral map parts
    std::vector<std::vector<Index>> run_end;                         ///< [group][run] end key of each run
    std::vector<std::vector<Index>> run_order;                       ///< [group][i] runs, heaviest first
    std::vector<Index> run_count;                                    ///< [group] runs of its key tiles
    std::vector<Index> maps_done, runs_done, rows_done;              ///< [group] maps (bits), runs, rows blocks finished

    void reserve(Index seq_len_q, Index value_dim, int threads) {
        const auto max_runs = static_cast<std::size_t>(kKeySegmentsPerThread * threads);
        const auto groups = static_cast<std::size_t>(query_group_count(seq_len_q));
        for (auto& group : maps) {
            for (auto& map : group) map.reserve(kGroupRows, value_dim);
        }
        for (auto& slot : runs) {
            if (slot.size() < max_runs) slot.resize(max_runs);
            for (auto& state : slot) state.reserve(kGroupRows, value_dim);
        }
        for (auto* plan : {&run_end, &run_order}) {
            if (plan->size() < groups) plan->resize(groups);
            for (auto& group : *plan) {
                if (group.size() < max_runs) group.resize(max_runs);
            }
        }
        for (auto* counts : {&run_count, &maps_done, &runs_done, &rows_done}) {
            if (counts->size() < groups) counts->resize(groups);
        }
    }
};

}  // namespace diffattn
