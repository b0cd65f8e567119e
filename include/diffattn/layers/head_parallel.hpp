// Runs one task per attention head, on several threads when OpenMP is available.
//
// Each task writes only its own head's output columns, and what a head computes does not depend
// on which thread runs it, so the result is bit-identical for every thread count.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"

#include <vector>

namespace diffattn::detail {

/// Calls task(h, workspaces[thread]) for h in [0, n_heads) on up to context.threads threads
/// (workspaces: at least one per thread). An exception thrown by a task is rethrown after the loop.
///   flops: about how much work all the heads do together. Below context.min_parallel_flops per
///          thread fewer threads run, down to one: a one-token decode step costs less than waking
///          a second thread (core/parallel.hpp). The results do not depend on it.
template <typename Workspace, typename Task>
void for_each_head(Index n_heads, double flops, const ExecutionContext& context, std::vector<Workspace>& workspaces,
                   Task&& task) {
    const int threads = available_threads(context.threads);
    require<OptionError>(context.threads >= 1 && static_cast<std::size_t>(threads) <= workspaces.size(),
                         "for_each_head: ", context.threads, " threads but ", workspaces.size(), " workspaces");
    parallel_for(n_heads, context.threads_for(flops), Schedule::equal_tasks,
                 [&](Index h, int thread) { task(h, workspaces[static_cast<std::size_t>(thread)]); });
}

}  // namespace diffattn::detail
