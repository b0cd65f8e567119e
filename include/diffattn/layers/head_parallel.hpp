// Runs one task per attention head, on several threads when OpenMP is available.
//
// Each task writes only its own head's output columns. The heads go to the threads, and what a
// head computes does not depend on which thread runs it, so the result is bit-identical for every
// thread count; except in a call of few query rows (a decode step) whose heads do not share evenly
// over the threads: there the heads run one after another, each kernel splitting its keys over
// all the threads (kernels/key_split.hpp), which agrees within docs/math.md §7.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/tiling.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <algorithm>
#include <vector>

namespace diffattn::detail {

/// Whether a call of `seq_len_q` query rows runs its `n_heads` heads one after another, each
/// kernel on all `threads` threads (over its keys), rather than the heads on the threads: a call
/// of fewer than kMinPackedRows rows whose heads do not share evenly over the threads.
inline bool split_heads_over_keys(Index n_heads, Index seq_len_q, int threads) {
    return threads > 1 && seq_len_q < kMinPackedRows && n_heads % threads != 0;
}

/// About how much work the heads of one sequence's call do, in flops, for choosing threads:
/// 2 N S (q_width + maps x value_dim) for the products (Q K^T of every query map, P V of every map;
/// a differential head's two maps each multiply V). A call of fewer than kMinPackedRows rows (a
/// decode step) is bound by reading its keys and values instead, as a few-rows projection is by
/// its weights, so it counts at least kFlopsPerByteRead per byte of them.
inline double heads_work(const AttentionConfig& config, Index rows, Index keys, Index stored_scalar_bytes) {
    const double products = 2.0 * static_cast<double>(rows) * static_cast<double>(keys) *
                            static_cast<double>(config.q_width() + config.n_query_maps() * config.value_dim());
    if (rows >= kMinPackedRows) return products;
    const double bytes = static_cast<double>(keys) * static_cast<double>(config.k_width() + config.v_width()) *
                         static_cast<double>(stored_scalar_bytes);
    return std::max(products, kFlopsPerByteRead * bytes);
}

/// g: how many heads in a row read the same key maps and value heads (grouped-query attention),
/// so that a call of one query row can run them as the g rows of one kernel call, which reads
/// their keys and values once instead of g times; 1 when no two heads share, for dint, whose
/// integral is a sum over a head's own rows and history (docs/math.md §2.3), and for gda, whose
/// kernel already runs a group's signal heads as the rows of one map (kernels/gda_attention.hpp).
inline Index heads_sharing_kv(const AttentionConfig& config) {
    const Index n_heads = config.n_heads;
    if (config.kind == AttentionKind::dint || config.kind == AttentionKind::gda) return 1;
    const auto same_reads = [&](Index h, Index first) {
        for (Index m = 0; m < (config.differential() ? 2 : 1); ++m) {
            if (config.key_map(h, m) != config.key_map(first, m) || config.value_head(h, m) != config.value_head(first, m)) {
                return false;
            }
        }
        return true;
    };
    for (Index g = n_heads; g > 1; --g) {
        bool shared = n_heads % g == 0;
        for (Index h = 0; shared && h < n_heads; ++h) shared = same_reads(h, h / g * g);
        if (shared) return g;
    }
    return 1;
}

/// Calls task(h, workspace, kernel_threads) for h in [0, n_heads) on up to context.threads threads
/// (workspaces: at least one per thread); kernel_threads is what the head's kernel may use: 1 when
/// the heads run on the threads, all of them (on workspaces[0]) when split_heads_over_keys. An
/// exception thrown by a task is rethrown after the loop.
///   flops: about how much work all the heads do together. Below context.min_parallel_flops per
///          thread fewer threads run, down to one: a one-token decode step costs less than waking
///          a second thread (core/parallel.hpp).
template <typename Workspace, typename Task>
void for_each_head(Index n_heads, Index seq_len_q, double flops, const ExecutionContext& context,
                   std::vector<Workspace>& workspaces, Task&& task) {
    const int threads = available_threads(context.threads);
    require<OptionError>(context.threads >= 1 && static_cast<std::size_t>(threads) <= workspaces.size(),
                         "for_each_head: ", context.threads, " threads but ", workspaces.size(), " workspaces");
    const int team = context.threads_for(flops);
    if (split_heads_over_keys(n_heads, seq_len_q, team)) {
        for (Index h = 0; h < n_heads; ++h) task(h, workspaces.front(), team);
        return;
    }
    parallel_for(n_heads, team, Schedule::equal_tasks,
                 [&](Index h, int thread) { task(h, workspaces[static_cast<std::size_t>(thread)], 1); });
}

}  // namespace diffattn::detail
