// DINT attention (docs/math.md §2.3): DIFF plus lambda times an integral term built from A1,
// out = (A1 - lambda A2 + lambda I) V, so every row of the final matrix sums to 1.
//
// The public entry point, composing three parts: the DIFF part runs in query groups of kGroupRows
// rows through differential_block, the same grouped, packed path as diff_attention; the integral
// is an epilogue on it (dint_integral.hpp: the mean modes, and the logits policies of the extra
// causal_softmax pass); that pass runs on several threads by the schedule of dint_schedule.hpp.
// Each query row needs sums over all rows before it; dint_mean_integral and
// dint_softmax_integral say how the groups still run on several threads.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_few_rows.hpp"
#include "diffattn/kernels/dint_integral.hpp"
#include "diffattn/kernels/dint_schedule.hpp"

#include <optional>

namespace diffattn {
namespace detail {

/// Validates the DINT-specific options and the history (check_dint_integral), and sizes the
/// history's sums.
template <typename T>
void check_dint(DintIntegral integral, const ResolvedOptions& resolved, const NamedShape& q1, const NamedShape& k1,
                Index value_dim, DintHistory<T>* history) {
    constexpr const char* function = "dint_attention";
    check_dint_integral(function, integral, resolved.mask, q1, k1,
                        history != nullptr ? std::optional<Index>(history->rows) : std::nullopt);
    if (integral == DintIntegral::global_mean || history == nullptr) return;
    const Index seq_len_kv = k1.rows, cached = k1.rows - q1.rows;
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
/// with one thread within docs/math.md §7, and are the same on every run with the same T.
/// A call of fewer than kMinPackedRows rows (a decode step) takes dint_few_rows.hpp's two passes,
/// which read K1 and V once rather than twice.
template <typename T, typename S, typename Mask>
void dint_softmax_integral(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2,
                           const Mask& mask, const ConstMatrixRef<S>& v, T lambda, const ResolvedOptions& resolved, Index seq_len_q,
                           DintHistory<T>* history, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    const Index seq_len_kv = v.rows();
    const Index rows_before = history != nullptr ? history->rows : 0;
    VectorRef<T> column_sum = history != nullptr ? VectorRef<T>(history->a1_column_sum.head(seq_len_kv))
                                                 : VectorRef<T>(ws.column_sum().head(seq_len_kv));
    if (history == nullptr) column_sum.setZero();
    // Calls run(logits) with the logits policy of the integral map of the group starting at
    // q_begin, given map 1 of the group.
    const auto with_integral_logits = [&](Index q_begin, const OnlineSoftmaxState<T>& map1, auto&& run) {
        const A1Tiles<T, Mask, DotProductLogits<T, S>> a1(logits1, mask, q_begin, map1.row_maxima(), map1.row_sums());
        IntegralLogits<T, decltype(a1)> integral_logits(a1, column_sum, rows_before);
        run(integral_logits);
    };

    // A call of few rows: one group, in one read of K1, K2 and V, its keys split over the threads.
    if (seq_len_q < kMinPackedRows) {
        dint_softmax_few_rows(logits1, logits2, mask, v, lambda, column_sum, rows_before, seq_len_q,
                              resolved.threads, ws, out);
        return;
    }
    // One thread: the groups in order.
    if (resolved.threads <= 1) {
        BlockScratch<T>& scratch = ws.block(0);
        for (Index g = 0; g < query_group_count(seq_len_q); ++g) {
            const Index q_begin = g * kGroupRows, q_rows = query_group_rows(seq_len_q, g);
            differential_block(logits1, logits2, mask, q_begin, q_rows, v, lambda, scratch, out);
            with_integral_logits(q_begin, scratch.states[0], [&](auto& integral_logits) {
                attend_block(integral_logits, mask, q_begin, q_rows, v, scratch, scratch.states[2]);
            });
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
                with_integral_logits(q_begin, maps[0], [&](auto& integral_logits) {
                    attend_block(integral_logits, mask, q_begin, q_rows, v, scratch, runs[run], keys);
                });
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

template <typename T, typename S = T>
void dint_attention(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                    const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, T lambda, DintIntegral integral,
                    MatrixRef<T> out, const AttentionOptions& options, DintHistory<T>* history,
                    AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_differential<T, S>("dint_attention", q1, k1, q2, k2, v, lambda, out, options);
    const Index seq_len_q = q1.rows(), seq_len_kv = k1.rows(), value_dim = v.cols();
    check_dint<T>(integral, resolved, named("Q1", q1), named("K1", k1), value_dim, history);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, seq_len_q, seq_len_kv, q1.cols(), value_dim, resolved);
    const T scale = T(resolved.scale);
    const DotProductLogits<T, S> logits1(q1, k1, scale), logits2(q2, k2, scale);
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

/// DINT attention of one head (docs/math.md §2.3): out = (A1 - lambda A2 + lambda I) V, with the integral I
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
