// Runs one task per attention head, on several threads when OpenMP is available.
//
// Each task writes only its own head's output columns, and what a head computes does not depend
// on which thread runs it, so the result is bit-identical for every thread count. (The CMake
// build defines EIGEN_DONT_PARALLELIZE next to DIFFATTN_HAS_OPENMP so Eigen's own GEMM threading,
// whose blocking depends on its thread count, never joins in.)
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <algorithm>
#include <exception>
#include <vector>

#if defined(DIFFATTN_HAS_OPENMP)
#include <omp.h>
#endif

namespace diffattn::detail {

/// Calls task(h, workspaces[thread]) for h in [0, n_heads) on up to `threads` threads
/// (workspaces.size() >= threads). An exception thrown by a task is rethrown after the loop.
template <typename Workspace, typename Task>
void for_each_head(Index n_heads, int threads, std::vector<Workspace>& workspaces, Task&& task) {
    require<OptionError>(threads >= 1 && static_cast<std::size_t>(threads) <= workspaces.size(),
                         "for_each_head: ", threads, " threads but ", workspaces.size(), " workspaces");
#if defined(DIFFATTN_HAS_OPENMP)
    if (threads > 1 && n_heads > 1) {
        const int team = static_cast<int>(std::min<Index>(threads, n_heads));  // no idle threads
        std::exception_ptr failure;
#pragma omp parallel for num_threads(team) schedule(static)
        for (Index h = 0; h < n_heads; ++h) {
            try {
                task(h, workspaces[static_cast<std::size_t>(omp_get_thread_num())]);
            } catch (...) {
#pragma omp critical(diffattn_for_each_head)
                if (!failure) failure = std::current_exception();
            }
        }
        if (failure) std::rethrow_exception(failure);
        return;
    }
#endif
    for (Index h = 0; h < n_heads; ++h) task(h, workspaces.front());
}

/// Threads this build can use: `requested` with OpenMP, 1 without.
inline int available_threads(int requested) {
#if defined(DIFFATTN_HAS_OPENMP)
    return requested < 1 ? 1 : requested;
#else
    (void)requested;
    return 1;
#endif
}

}  // namespace diffattn::detail
