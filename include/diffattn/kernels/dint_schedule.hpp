// The thread schedule of DINT causal_softmax (dint_softmax_integral in dint_attention.hpp), kept
// apart from what it schedules: each query group's integral map is cut into runs of key tiles of
// about equal work (plan_integral_runs), and DintTaskQueue hands out the maps, runs and rows of
// the groups as their inputs become ready. The state both work on is DintPipeline
// (dint_pipeline.hpp). Nothing here depends on the threads that later run the tasks, so the
// results are the same on every run with the same thread count.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/dint_pipeline.hpp"
#include "diffattn/kernels/mask.hpp"
#include "diffattn/kernels/tiling.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

namespace diffattn::detail {

/// Work of the keys [k_begin, k_end) for query group [q_begin, q_begin + q_rows): the keys of the
/// range that the group's blocks compute (the core's b_keys), times the blocks' rows. Under a causal
/// mask a group's last tiles are seen by fewer of its blocks.
template <typename Mask>
Index key_range_work(const Mask& mask, Index q_begin, Index q_rows, Index k_begin, Index k_end) {
    Index work = 0;
    for (Index b = q_begin; b < q_begin + q_rows; b += kQueryTile) {
        const Index b_end = std::min(b + kQueryTile, q_begin + q_rows);
        work += std::clamp<Index>(std::min(k_end, block_visit_end(mask, b, b_end)) - k_begin, 0, k_end - k_begin) *
                (b_end - b);
    }
    return work;
}

/// Cuts the key tiles a query group [q_begin, q_begin + q_rows) visits into at most `max_segments`
/// runs of about equal work (key_range_work) and writes the end key of each run to segment_end.
/// Returns the number of runs (0 when the group sees no key). Depends only on the mask, the group
/// and max_segments, never on the threads that later run the segments.
template <typename Mask>
Index split_key_tiles(const Mask& mask, Index q_begin, Index q_rows, Index max_segments,
                      std::vector<Index>& segment_end) {
    const Index visit_end = block_visit_end(mask, q_begin, q_begin + q_rows);
    const Index tiles = (visit_end + kKeyTile - 1) / kKeyTile;
    const Index segments = std::min(tiles, max_segments);
    const auto tile_work = [&](Index tile) {
        return key_range_work(mask, q_begin, q_rows, tile * kKeyTile, (tile + 1) * kKeyTile);
    };
    Index total = 0;
    for (Index t = 0; t < tiles; ++t) total += tile_work(t);
    Index done = 0, tile = 0;
    for (Index s = 0; s < segments; ++s) {
        // Run s takes tiles until its work reaches its share, leaving a tile for each later run.
        do {
            done += tile_work(tile);
            ++tile;
        } while (tile < tiles - (segments - 1 - s) && done * segments < (s + 1) * total);
        segment_end[static_cast<std::size_t>(s)] = std::min(visit_end, tile * kKeyTile);
    }
    return segments;
}

/// The order in which to hand out the `segments` runs of split_key_tiles: heaviest first (ties by
/// index). Whole tiles seldom split a group's work evenly (a causal group's diagonal tiles are light,
/// so one run may carry twice another's work); a run started last then keeps one thread busy while
/// the other waits at the end of the phase. Handing out the heaviest first (LPT) leaves the light
/// ones to fill in.
template <typename Mask>
void order_key_runs(const Mask& mask, Index q_begin, Index q_rows, Index segments,
                    const std::vector<Index>& segment_end, std::vector<Index>& order) {
    const auto work = [&](Index s) {
        const auto i = static_cast<std::size_t>(s);
        return key_range_work(mask, q_begin, q_rows, s == 0 ? 0 : segment_end[i - 1], segment_end[i]);
    };
    for (Index s = 0; s < segments; ++s) order[static_cast<std::size_t>(s)] = s;
    // Insertion sort: at most kKeySegmentsPerThread * threads entries, and no allocation.
    for (Index i = 1; i < segments; ++i) {
        const Index run = order[static_cast<std::size_t>(i)], run_work = work(run);
        Index j = i;
        for (; j > 0 && work(order[static_cast<std::size_t>(j - 1)]) < run_work; --j) {
            order[static_cast<std::size_t>(j)] = order[static_cast<std::size_t>(j - 1)];
        }
        order[static_cast<std::size_t>(j)] = run;
    }
}

/// Cuts the integral map of each query group of `seq_len_q` rows into runs of key tiles for
/// `threads` threads (split_key_tiles, handed out by order_key_runs) and writes them to `pipeline`.
/// A run costs a state to reset and merge, so a group is cut (into kKeySegmentsPerThread * threads
/// runs) only where its integral would hold up the other threads: where the maps of the later
/// groups, which need nothing from it and so can run beside it, are less work than the other threads
/// could do while one thread runs it whole (work as key_range_work counts it). The last group is
/// always cut.
/// Depends only on the mask, seq_len_q and threads, so the results stay the same on every run.
template <typename T, typename Mask>
void plan_integral_runs(const Mask& mask, Index seq_len_q, int threads, DintPipeline<T>& pipeline) {
    const Index max_runs = kKeySegmentsPerThread * threads;
    Index later_map_work = 0;  // both maps of every group after g
    for (Index g = query_group_count(seq_len_q) - 1; g >= 0; --g) {
        const auto i = static_cast<std::size_t>(g);
        const Index q_begin = g * kGroupRows, q_rows = query_group_rows(seq_len_q, g);
        const Index work = key_range_work(mask, q_begin, q_rows, 0, block_visit_end(mask, q_begin, q_begin + q_rows));
        const Index runs = later_map_work < (threads - 1) * work ? max_runs : 1;
        later_map_work += 2 * work;
        pipeline.run_count[i] = split_key_tiles(mask, q_begin, q_rows, runs, pipeline.run_end[i]);
        order_key_runs(mask, q_begin, q_rows, pipeline.run_count[i], pipeline.run_end[i], pipeline.run_order[i]);
    }
}

/// A task of dint_softmax_integral's pipeline on several threads.
struct DintTask {
    enum class Kind { map, run, rows };
    Kind kind;
    Index group;
    Index index;  ///< map: 0 (map 1) or 1 (map 2); run: position in the group's run_order; rows: block of the group
};

/// Hands out the tasks of dint_softmax_integral's pipeline as their inputs become ready, to
/// whichever thread asks, with no barrier between groups: a thread that finishes early takes the
/// next group's map instead of waiting for the other thread's last run. A task is ready when
///   - map m of group g:  the rows of group g - kDintMapSlots are written (its map slot is free);
///   - run of group g:    map 1 of g is done, every run of g - 1 is done (the column sums take the
///                        rows in order) and the rows of g - 2 are written (its run slot is free);
///   - rows block of g:   both maps and every run of g are done.
/// Each kind goes out in group order. A ready run goes first (the runs are the chain every later
/// group waits on), then rows (they free slots), then maps. Each task waits only on earlier groups
/// or on tasks of its own group that go out before it (map 1 before the runs, both maps and the
/// runs before the rows), so while tasks are left and none is running, one is ready: the queue
/// cannot stall, and one thread alone runs every task (tests/kernels: the queue test). Which
/// thread runs a task never changes what it computes, so the result does not depend on the order.
template <typename T>
class DintTaskQueue {
public:
    /// The tasks of `seq_len_q` query rows, with the runs that plan_integral_runs put in `pipeline`.
    DintTaskQueue(DintPipeline<T>& pipeline, Index seq_len_q)
        : pipeline_(pipeline), groups_(query_group_count(seq_len_q)), seq_len_q_(seq_len_q) {
        for (Index g = 0; g < groups_; ++g) {
            const auto i = static_cast<std::size_t>(g);
            pipeline.maps_done[i] = pipeline.runs_done[i] = pipeline.rows_done[i] = 0;
        }
        skip_groups_without_runs();
    }

    /// The next ready task, waiting while none is; nullopt once every task is handed out or one failed.
    std::optional<DintTask> next() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (failed_ || all_handed_out()) return {};
            if (const std::optional<DintTask> task = take_ready()) return task;
            ready_.wait(lock);
        }
    }

    /// A ready task if there is one now, without waiting (nullopt: none is ready, or none is left).
    std::optional<DintTask> try_next() {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (failed_) return {};
        return take_ready();
    }

    /// Whether every task has been handed out.
    bool exhausted() {
        const std::lock_guard<std::mutex> lock(mutex_);
        return all_handed_out();
    }

    /// Records that `task` is done and wakes the threads waiting for a ready task.
    void finish(const DintTask& task) {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            const auto g = static_cast<std::size_t>(task.group);
            switch (task.kind) {
                case DintTask::Kind::map: pipeline_.maps_done[g] |= Index(1) << task.index; break;
                case DintTask::Kind::run: ++pipeline_.runs_done[g]; break;
                case DintTask::Kind::rows: ++pipeline_.rows_done[g]; break;
            }
        }
        ready_.notify_all();
    }

    /// A task threw: hand out no more, and wake the waiting threads so they return.
    void abandon() {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            failed_ = true;
        }
        ready_.notify_all();
    }

private:
    static constexpr Index kMap1 = 1, kBothMaps = 3;  // maps_done bits: map 1, map 2

    bool all_handed_out() const { return map_group_ == groups_ && run_group_ == groups_ && rows_group_ == groups_; }

    Index count(const std::vector<Index>& counts, Index group) const { return counts[static_cast<std::size_t>(group)]; }
    Index blocks(Index group) const { return query_block_count(query_group_rows(seq_len_q_, group)); }
    bool rows_written(Index group) const { return group < 0 || count(pipeline_.rows_done, group) == blocks(group); }
    bool runs_finished(Index group) const {
        return group < 0 || count(pipeline_.runs_done, group) == count(pipeline_.run_count, group);
    }

    /// A group whose mask shows it no key has no runs: nothing to hand out, and nothing to wait for.
    void skip_groups_without_runs() {
        while (run_group_ < groups_ && count(pipeline_.run_count, run_group_) == 0) ++run_group_;
    }

    /// Takes the first ready task by the order above and advances its kind's cursor; caller holds the lock.
    std::optional<DintTask> take_ready() {
        const auto take = [](DintTask::Kind kind, Index& group, Index& index, Index tasks) {
            const DintTask task{kind, group, index};
            if (++index == tasks) {
                ++group;
                index = 0;
            }
            return task;
        };
        if (run_group_ < groups_ && (count(pipeline_.maps_done, run_group_) & kMap1) != 0 &&
            runs_finished(run_group_ - 1) && rows_written(run_group_ - 2)) {
            const DintTask task = take(DintTask::Kind::run, run_group_, run_, count(pipeline_.run_count, run_group_));
            skip_groups_without_runs();
            return task;
        }
        if (rows_group_ < groups_ && count(pipeline_.maps_done, rows_group_) == kBothMaps &&
            runs_finished(rows_group_)) {
            return take(DintTask::Kind::rows, rows_group_, rows_block_, blocks(rows_group_));
        }
        if (map_group_ < groups_ && rows_written(map_group_ - static_cast<Index>(kDintMapSlots))) {
            return take(DintTask::Kind::map, map_group_, map_, 2);
        }
        return {};
    }

    DintPipeline<T>& pipeline_;
    Index groups_, seq_len_q_;
    Index map_group_ = 0, map_ = 0;         // the next map to hand out
    Index run_group_ = 0, run_ = 0;         // the next run (position in run_order)
    Index rows_group_ = 0, rows_block_ = 0; // the next rows block
    bool failed_ = false;
    std::mutex mutex_;
    std::condition_variable ready_;
};

}  // namespace diffattn::detail
