// DINT attention (SPEC 2.3): DIFF plus lambda times an integral term built from A1,
// out = (A1 - lambda A2 + lambda I) V, so every row of the final matrix sums to 1.
//
// The integral is an epilogue on top of the DIFF block step, using the SPEC 2.3 identities:
//   causal_mean:    I V = running mean of the rows of O1 = A1 V          (O(N dv) extra work)
//   global_mean:    I V = mean of all rows of O1                          (O(N dv) extra work)
//   causal_softmax: I = softmax_M(G), G = running column mean of A1; I V is one more pass of
//                   the tiled core whose logits policy rebuilds A1 tiles from map 1's final
//                   {m, l} and turns them into G rows with O(S) running column sums.
// The DIFF part runs in query groups of kGroupRows rows through differential_block, the same
// grouped, packed path as diff_attention. Each query row needs sums over all rows before it;
// dint_mean_integral and dint_softmax_integral say how the groups still run on several threads.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"

#include <condition_variable>
#include <mutex>
#include <optional>

namespace diffattn {
namespace detail {

/// A1 tiles of the query rows [first_row, first_row + rows), rebuilt from map 1's final statistics
/// of those rows: A1[n, j] = exp(s q1_n . k1_j - m_n) / l_n, and 0 where the mask hides key j from
/// row n. The logits come from map 1's own policy (same packing, same products), so a rebuilt
/// tile matches the probabilities map 1 normalised.
template <typename T, typename Mask>
class A1Tiles {
public:
    /// row_max, row_sum: map 1's final m and l of the rows [first_row, first_row + row_max.size()).
    A1Tiles(const DotProductLogits<T>& logits1, const Mask& mask, Index first_row, ConstVectorRef<T> row_max,
            ConstVectorRef<T> row_sum)
        : logits1_(logits1), mask_(mask), first_row_(first_row), row_max_(row_max), row_sum_(row_sum) {}

    /// Packing as DotProductLogits (the core's three-step logits protocol).
    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        logits1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed) const {
        logits1_.pack_keys(k_begin, keys, packed);
    }

    /// tile [rows x keys] = A1[q_begin + r, k_begin + j]; group_begin and packed as DotProductLogits.
    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed) const {
        const Index keys = tile.cols();
        logits1_(q_begin, group_begin, k_begin, tile, packed);
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            const Index i = q_begin - first_row_ + r;
            const Index visible = visible_keys_in_tile(mask_, q_begin + r, k_begin, keys);
            const T inverse_sum = row_sum_[i] > T(0) ? T(1) / row_sum_[i] : T(0);
            row.tail(keys - visible).setZero();
            if (visible > 0) {
                row.head(visible) = ((row.head(visible).array() - row_max_[i]).exp() * inverse_sum).matrix();
            }
        }
    }

private:
    const DotProductLogits<T>& logits1_;  // s Q1 K1^T
    const Mask& mask_;
    Index first_row_;
    ConstVectorRef<T> row_max_;
    ConstVectorRef<T> row_sum_;
};

/// Logits policy of DINT's causal_softmax integral map (dint-transformer-v2 eq. 5-6).
/// For a tile it rebuilds the A1 tile, adds each row into the running column sums of A1 and writes
/// G[r, j] = column_sum[j] / (rows so far) — values in [0, 1], used with logit scale 1.
/// Rows must reach each key tile in order: column sum j must hold every earlier row of the
/// sequence when a row reads it. The core visits key tiles in the outer loop and the blocks of a
/// group in order in the inner one, and the sums of one key tile depend only on that tile, so a
/// whole group can run at once: each block finds the earlier blocks' rows already added to the
/// tile's columns (a block that skips a tile wholly in its future would only have added zeros).
/// It reads Q1 and K1 through A1Tiles, which packs them as map 1 does.
template <typename T, typename Mask>
class IntegralLogits {
public:
    IntegralLogits(const A1Tiles<T, Mask>& a1, VectorRef<T> column_sum, Index rows_before)
        : a1_(a1), column_sum_(column_sum), rows_before_(rows_before) {}

    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        a1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed) const { a1_.pack_keys(k_begin, keys, packed); }

    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed) {
        a1_(q_begin, group_begin, k_begin, tile, packed);
        auto column_sum = column_sum_.segment(k_begin, tile.cols());
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            column_sum += row.transpose();  // the row is final: later keys are masked for it (SPEC 6)
            row = column_sum.transpose() / static_cast<T>(rows_before_ + q_begin + r + 1);
        }
    }

private:
    const A1Tiles<T, Mask>& a1_;
    VectorRef<T> column_sum_;  // [S] column sums of A1 over all rows so far
    Index rows_before_;        // query rows of earlier calls (the cache)
};

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

/// Validates the DINT-specific options and the history, and sizes the history's sums.
template <typename T>
void check_dint(DintIntegral integral, const ResolvedOptions& resolved, Index seq_len_q, Index seq_len_kv,
                Index value_dim, DintHistory<T>* history) {
    constexpr const char* function = "dint_attention";
    const Index cached = seq_len_kv - seq_len_q;
    switch (integral) {
        case DintIntegral::global_mean:
            require<OptionError>(resolved.mask == MaskKind::none, function,
                                 ": integral global_mean sees the future and needs mask none, not causal");
            require<OptionError>(history == nullptr || history->rows == 0, function,
                                 ": integral global_mean cannot continue from a history (KV cache) of ",
                                 history ? history->rows : 0, " rows");
            return;
        case DintIntegral::causal_mean:
        case DintIntegral::causal_softmax:
            break;
        default:
            throw OptionError(concat(function, ": unknown DintIntegral value"));
    }
    if (history == nullptr) {
        require<OptionError>(cached == 0, function, ": K1 has ", seq_len_kv, " rows but Q1 has ", seq_len_q,
                             "; a causal integral over ", cached, " cached rows needs their DintHistory");
        return;
    }
    require<OptionError>(history->rows == cached, function, ": history has ", history->rows,
                         " rows but K1 has ", seq_len_kv, " and Q1 ", seq_len_q, " (need history rows == S - N = ",
                         cached, ")");
    if (integral == DintIntegral::causal_mean) {
        if (history->rows == 0) {
            history->o1_row_sum.setZero(value_dim);
        } else {
            require<ShapeError>(history->o1_row_sum.size() == value_dim, function, ": history o1_row_sum has ",
                                history->o1_row_sum.size(), " entries but V has ", value_dim, " columns");
        }
    } else {
        Vector<T>& sums = history->a1_column_sum;
        if (history->rows == 0) sums.setZero();
        require<ShapeError>(history->rows == 0 || sums.size() >= cached, function,
                            ": history a1_column_sum has ", sums.size(), " entries but ", cached,
                            " keys are cached");
        if (sums.size() < seq_len_kv) {
            const Index old_size = sums.size();
            sums.conservativeResize(seq_len_kv);  // grows with the context (reserve to avoid this)
            sums.tail(seq_len_kv - old_size).setZero();
        }
    }
}

/// The integral of the mean modes (SPEC 2.3: I V is the running or global mean of the rows of
/// O1 = A1 V), in three steps so that query groups can run on several threads and the result does
/// not depend on the thread count:
///   1. each group writes its DIFF rows (differential_block, as diff_attention) and, per block of
///      kQueryTile rows, the Kahan sum of the block's O1 rows (causal_mean also adds the part of
///      each row's running mean that comes from rows of its own block);
///   2. exclusive prefix sums over the blocks, continuing the history (sequential, O(blocks dv));
///   3. each row gets the part that comes from earlier blocks (causal_mean) or the global mean.
/// Sums run in Accumulator<T> with Kahan compensation, so identical rows (one-hot maps) do not pile
/// up rounding errors.
template <typename T, typename Mask>
void dint_mean_integral(const DotProductLogits<T>& logits1, const DotProductLogits<T>& logits2, const Mask& mask,
                        const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
                        const ResolvedOptions& resolved, Index seq_len_q, DintHistory<T>* history,
                        AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    using Wide = Accumulator<T>;
    const Index value_dim = v.cols();
    const Index rows_before = history != nullptr ? history->rows : 0;
    const bool causal = integral == DintIntegral::causal_mean;
    RowMatrix<Wide>& block_sums = ws.block_row_sums();          // [blocks x dv]
    RowMatrix<Wide>& block_errors = ws.block_row_compensation();  // [blocks x dv]
    const auto kahan_add = [](auto&& sum, auto&& error, const auto& value) {
        for (Index j = 0; j < sum.size(); ++j) {
            const Wide term = Wide(value[j]) - error[j];
            const Wide total = sum[j] + term;
            error[j] = (total - sum[j]) - term;
            sum[j] = total;
        }
    };
    const auto row_weight = [&](Index n) { return Wide(lambda) / Wide(rows_before + n + 1); };

    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>& scratch) {
        differential_block(logits1, logits2, mask, group_begin, group_rows, v, lambda, scratch, out);
        const OnlineSoftmaxState<T>& map1 = scratch.states[0];  // the group's rows
        // Sums per block rather than per group: a row's in-block running sum then adds at most
        // kQueryTile terms. Groups and blocks are fixed runs of rows, so the sums do not depend on
        // the thread count.
        for (Index b_offset = 0; b_offset < group_rows; b_offset += kQueryTile) {
            const Index q_begin = group_begin + b_offset, q_rows = std::min(kQueryTile, group_rows - b_offset);
            auto sum = block_sums.row(q_begin / kQueryTile).head(value_dim);
            auto error = block_errors.row(q_begin / kQueryTile).head(value_dim);
            sum.setZero();
            error.setZero();
            for (Index r = 0; r < q_rows; ++r) {
                kahan_add(sum, error, map1.normalized_row(b_offset + r));
                // SPEC 1: a query allowed no key gets an all-zero row (the DIFF part already is).
                if (causal && mask.key_end(q_begin + r) > 0) {
                    out.row(q_begin + r) += (row_weight(q_begin + r) * sum).template cast<T>();
                }
            }
        }
    });

    // Block b's row becomes the sum of the O1 rows of every earlier row (history and blocks < b).
    auto running = ws.running_row_sum().head(value_dim);
    auto running_error = ws.running_row_error().head(value_dim);
    running.setZero();
    running_error.setZero();
    if (causal && history != nullptr && history->rows > 0) running = history->o1_row_sum.template cast<Wide>();
    const Index blocks = query_block_count(seq_len_q);
    for (Index b = 0; b < blocks; ++b) {
        for (Index j = 0; j < value_dim; ++j) {
            const Wide block_total = block_sums(b, j) - block_errors(b, j);  // compensated
            block_sums(b, j) = running[j];
            const Wide term = block_total - running_error[j];
            const Wide total = running[j] + term;
            running_error[j] = (total - running[j]) - term;
            running[j] = total;
        }
    }

    const Wide global_weight = seq_len_q > 0 ? Wide(lambda) / Wide(seq_len_q) : Wide(0);
    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>&) {
        for (Index n = group_begin; n < group_begin + group_rows; ++n) {
            if (mask.key_end(n) == 0) continue;  // SPEC 1: stays an all-zero row
            if (causal) {
                const Index block = n / kQueryTile;
                if (block > 0 || rows_before > 0) {
                    out.row(n) += (row_weight(n) * block_sums.row(block).head(value_dim)).template cast<T>();
                }
            } else {
                out.row(n) += (global_weight * running.transpose()).template cast<T>();
            }
        }
    });
    if (causal && history != nullptr) history->o1_row_sum = running.template cast<T>();
}

/// Cuts the integral map of each query group of `seq_len_q` rows into runs of key tiles for
/// `threads` threads (split_key_tiles, handed out by order_key_runs) and writes them to `pipeline`.
/// A run costs a state to reset and merge: on one thread, 4 runs per group instead of 1 made a call
/// 3-4% slower at N 1024-2048. So a group is cut (into kKeySegmentsPerThread * threads runs) only
/// where its integral would hold up the other threads: where the maps of the later groups, which
/// need nothing from it and so can run beside it, are less work than the other threads could do
/// while one thread runs it whole (work as key_range_work counts it). The last group is always cut.
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

/// The causal_softmax integral (dint-transformer-v2 eq. 5-6): after the DIFF maps of a query group,
/// one more pass of the tiled core over logits G = running column mean of A1 (IntegralLogits),
/// on groups of up to kGroupBlocks whole blocks too (IntegralLogits says why that keeps the row
/// order the column sums need). The running column sums make each group's integral map depend on
/// every earlier group's, so with one thread the groups simply run in order. With T > 1 threads
/// each group becomes tasks that DintTaskQueue hands out as their inputs become ready:
///   - map 1 and map 2 of the group (two tasks);
///   - its integral map, as one run of all its key tiles, or, where plan_integral_runs cuts it, as
///     up to kKeySegmentsPerThread * T runs of about equal work (split_key_tiles), heaviest first
///     (order_key_runs), each into its own online-softmax state. A key tile's column sums are
///     touched by one run of a group, and a group's runs start only when every run of the group
///     before has ended, so each column still takes its rows in order;
///   - its rows, one task per block: O1 - lambda O2 plus lambda times the merged runs (add_merged_row).
/// The maps of later groups need nothing but a free slot, so they run beside a group's integral
/// and fill in while the runs of one group wait for the last run of the group before. No work is
/// repeated. The runs only change the order of the integral map's softmax sums, so results agree
/// with one thread within SPEC 7, and are the same on every run with the same T.
template <typename T, typename Mask>
void dint_softmax_integral(const DotProductLogits<T>& logits1, const DotProductLogits<T>& logits2, const Mask& mask,
                           const ConstMatrixRef<T>& v, T lambda, const ResolvedOptions& resolved, Index seq_len_q,
                           DintHistory<T>* history, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    const Index seq_len_kv = v.rows();
    const Index rows_before = history != nullptr ? history->rows : 0;
    VectorRef<T> column_sum = history != nullptr ? VectorRef<T>(history->a1_column_sum.head(seq_len_kv))
                                                 : VectorRef<T>(ws.column_sum().head(seq_len_kv));
    if (history == nullptr) column_sum.setZero();
    // The integral map of group [q_begin, q_begin + q_rows), over the keys `keys`, given map 1 of the group.
    const auto integral_map = [&](Index q_begin, Index q_rows, const OnlineSoftmaxState<T>& map1, KeyRange keys,
                                  BlockScratch<T>& scratch, OnlineSoftmaxState<T>& integral) {
        const A1Tiles<T, Mask> a1(logits1, mask, q_begin, map1.row_maxima(), map1.row_sums());
        IntegralLogits<T, Mask> integral_logits(a1, column_sum, rows_before);
        attend_block(integral_logits, mask, q_begin, q_rows, v, scratch, integral, keys);
    };

    if (resolved.threads <= 1) {
        BlockScratch<T>& scratch = ws.block(0);
        for (Index g = 0; g < query_group_count(seq_len_q); ++g) {
            const Index q_begin = g * kGroupRows, q_rows = query_group_rows(seq_len_q, g);
            differential_block(logits1, logits2, mask, q_begin, q_rows, v, lambda, scratch, out);
            integral_map(q_begin, q_rows, scratch.states[0], KeyRange{}, scratch, scratch.states[2]);
            for (Index r = 0; r < q_rows; ++r) out.row(q_begin + r) += lambda * scratch.states[2].normalized_row(r);
        }
        return;
    }

    DintPipeline<T>& pipeline = ws.dint_pipeline();
    plan_integral_runs(mask, seq_len_q, resolved.threads, pipeline);
    const auto run_task = [&](const DintTask& task, BlockScratch<T>& scratch) {
        const auto g = static_cast<std::size_t>(task.group);
        const Index q_begin = task.group * kGroupRows, q_rows = query_group_rows(seq_len_q, task.group);
        auto& maps = pipeline.maps[g % kDintMapSlots];
        auto& runs = pipeline.runs[g % 2];
        switch (task.kind) {
            case DintTask::Kind::map:
                attend_block(task.index == 0 ? logits1 : logits2, mask, q_begin, q_rows, v, scratch,
                             maps[static_cast<std::size_t>(task.index)]);
                return;
            case DintTask::Kind::run: {
                const auto run = static_cast<std::size_t>(pipeline.run_order[g][static_cast<std::size_t>(task.index)]);
                const KeyRange keys{run == 0 ? 0 : pipeline.run_end[g][run - 1], pipeline.run_end[g][run]};
                integral_map(q_begin, q_rows, maps[0], keys, scratch, runs[run]);
                return;
            }
            case DintTask::Kind::rows: {
                const Index first = task.index * kQueryTile, last = std::min(first + kQueryTile, q_rows);
                write_differential_rows(maps[0], maps[1], lambda, q_begin, first, last, out);
                for (Index r = first; r < last; ++r) {
                    add_merged_row(runs.data(), pipeline.run_count[g], r, lambda, out.row(q_begin + r));
                }
                return;
            }
        }
    };
    DintTaskQueue<T> queue(pipeline, seq_len_q);
    parallel_for(resolved.threads, resolved.threads, Schedule::equal_tasks, [&](Index, int thread) {
        while (const std::optional<DintTask> task = queue.next()) {
            try {
                run_task(*task, ws.block(thread));
            } catch (...) {
                queue.abandon();
                throw;
            }
            queue.finish(*task);
        }
    });
}

template <typename T>
void dint_attention(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                    const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
                    MatrixRef<T> out, const AttentionOptions& options, DintHistory<T>* history,
                    AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_differential<T>("dint_attention", q1, k1, q2, k2, v, lambda, out, options);
    const Index seq_len_q = q1.rows(), seq_len_kv = k1.rows(), value_dim = v.cols();
    check_dint<T>(integral, resolved, seq_len_q, seq_len_kv, value_dim, history);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, seq_len_q, seq_len_kv, q1.cols(), value_dim, resolved.threads);
    const T scale = T(resolved.scale);
    const DotProductLogits<T> logits1(q1, k1, scale), logits2(q2, k2, scale);
    dispatch_mask(resolved.mask, seq_len_q, seq_len_kv, resolved.valid_len, [&](const auto& mask) {
        if (integral == DintIntegral::causal_softmax) {
            dint_softmax_integral(logits1, logits2, mask, v, lambda, resolved, seq_len_q, history, ws, out);
        } else {
            dint_mean_integral(logits1, logits2, mask, v, lambda, integral, resolved, seq_len_q, history, ws, out);
        }
    });
    if (history != nullptr) history->rows += seq_len_q;
}

}  // namespace detail

/// DINT attention of one head (SPEC 2.3): out = (A1 - lambda A2 + lambda I) V, with the integral I
/// chosen by `integral`. Shapes as diff_attention. With a KV cache (S > N) the causal integrals
/// need `history` of the S - N earlier rows (history->rows == S - N); it is updated in place.
/// global_mean needs mask none and no history rows.
template <int = 0>  // instantiated only where called (keeps every other TU cheap to compile)
inline void dint_attention(const ConstMatrixRef<float>& q1, const ConstMatrixRef<float>& k1,
                           const ConstMatrixRef<float>& q2, const ConstMatrixRef<float>& k2,
                           const ConstMatrixRef<float>& v, float lambda, DintIntegral integral, MatrixRef<float> out,
                           const AttentionOptions& options = {}, DintHistory<float>* history = nullptr,
                           AttentionWorkspace<float>* workspace = nullptr) {
    detail::dint_attention<float>(q1, k1, q2, k2, v, lambda, integral, out, options, history, workspace);
}
template <int = 0>
inline void dint_attention(const ConstMatrixRef<double>& q1, const ConstMatrixRef<double>& k1,
                           const ConstMatrixRef<double>& q2, const ConstMatrixRef<double>& k2,
                           const ConstMatrixRef<double>& v, double lambda, DintIntegral integral,
                           MatrixRef<double> out, const AttentionOptions& options = {},
                           DintHistory<double>* history = nullptr, AttentionWorkspace<double>* workspace = nullptr) {
    detail::dint_attention<double>(q1, k1, q2, k2, v, lambda, integral, out, options, history, workspace);
}

}  // namespace diffattn
