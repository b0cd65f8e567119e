// The one place diffattn starts threads: a parallel loop over independent tasks (attention heads,
// query blocks), with OpenMP when the build has it (DIFFATTN_HAS_OPENMP) and sequential otherwise.
//
// A task receives the index of the thread running it, so it can use that thread's scratch. What a
// task computes must not depend on which thread runs it; the callers keep results bit-identical for
// every thread count except where they document otherwise. (The CMake build defines
// EIGEN_DONT_PARALLELIZE next to DIFFATTN_HAS_OPENMP so Eigen's own GEMM threading, whose blocking
// depends on its thread count, never joins in.)
#pragma once

#include "diffattn/core/compute.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_panels.hpp"

#include <algorithm>
#include <exception>

#if defined(DIFFATTN_HAS_OPENMP)
#include <omp.h>
#endif

namespace diffattn::detail {

/// The most threads a call or a state takes: more than the machines this runs on have, and few
/// enough that their scratch (one kernel workspace each, sized before the call) stays small.
inline constexpr int kMaxThreads = 1024;

/// OptionError "<function>: threads must be in [1, kMaxThreads], got <threads>" unless it is. The
/// one check of a thread count that a caller gives (kernel options, a ForwardState).
inline void require_thread_count(const char* function, int threads) {
    require<OptionError>(threads >= 1 && threads <= kMaxThreads, function, ": threads must be in [1, ", kMaxThreads,
                         "], got ", threads);
}

/// Threads this build can use: `requested` (at least 1) with OpenMP, 1 without.
inline int available_threads(int requested) {
#if defined(DIFFATTN_HAS_OPENMP)
    return requested < 1 ? 1 : requested;
#else
    (void)requested;
    return 1;
#endif
}

/// Work below which a parallel region costs more than it saves, in flops per thread: a few times
/// what forking and joining a team whose threads still spin costs in arithmetic, and for a call
/// bound by its reads (counted at kFlopsPerByteRead) 125 KB a thread. The weights of a small
/// model's one-token projections (0.25-1 MB) then take every thread the caller gave
/// (docs/benchmarks.md, "Both threads for the one-token projections"). On cores shared
/// with other load a woken thread may wait a scheduler time slice whatever the threshold: a caller
/// that expects such load runs one thread.
inline constexpr double kMinParallelFlopsPerThread = 5e5;

/// What streaming one byte from memory costs, in flops: a core does about this many in the time it
/// reads one byte at the memory's rate (docs/benchmarks.md, "Decode-time projections"). Work bound by
/// its reads (a decode step's projections and heads) counts this per byte when choosing threads.
inline constexpr double kFlopsPerByteRead = 4.0;

/// Threads worth starting for `flops` of work split over independent tasks: `requested` (at least
/// 1), but no more than one per `min_flops_per_thread`, so small calls stay on the calling thread
/// (min_flops_per_thread = 0: always `requested`). Only the thread count changes, so callers whose
/// results do not depend on it stay bit-identical.
inline int threads_for_work(int requested, double flops, double min_flops_per_thread = kMinParallelFlopsPerThread) {
    if (requested <= 1) return 1;
    if (!(min_flops_per_thread > 0)) return requested;
    const double worth = flops / min_flops_per_thread;  // threads the work pays for
    if (worth < 2) return 1;
    return worth < requested ? static_cast<int>(worth) : requested;
}

}  // namespace diffattn::detail

namespace diffattn {

/// How the calls of one caller may use threads. The caller's run state owns one
/// (ForwardState::context()) and every parallel call takes it by const reference: linear(),
/// SharedDiffFactors::project, the heads of MultiHeadAttention. Its threads change only how many
/// threads run, never a result; its compute changes the products (docs/math.md §7.1, §10.1).
struct ExecutionContext {
    int threads = 1;  ///< run on up to this many threads (with OpenMP; 1 without)
    /// ... but on fewer, down to one, when a call has less than this much work (flops) per thread
    /// (detail::threads_for_work; 0: always `threads`).
    double min_parallel_flops = detail::kMinParallelFlopsPerThread;
    /// The products of the calls of many rows, the attention heads' prefill and chunk calls
    /// (AttentionOptions::compute) and the projections (layers/linear.hpp): scalar, the default,
    /// or BF16 operands with fp32 sums (float models only; docs/math.md §7.1, §10.1).
    Compute compute = Compute::scalar;
    /// Where products of many rows decode panels of stored weights, one per thread (null: such a
    /// product allocates its panels for the call).
    const WeightPanels* panels = nullptr;

    /// Threads worth starting for `flops` of work split over independent tasks.
    int threads_for(double flops) const { return detail::threads_for_work(threads, flops, min_parallel_flops); }
};

}  // namespace diffattn

namespace diffattn::detail {

/// How parallel_for hands tasks to threads.
enum class Schedule {
    equal_tasks,   ///< tasks cost about the same: dynamic, in index order
    largest_first, ///< task cost grows with its index (causal query blocks): dynamic, last index first
};

/// Calls task(i, thread) for i in [0, count) on up to `threads` threads, thread in [0, threads).
/// Runs sequentially (thread 0, increasing i) with one thread, without OpenMP, or when called from
/// inside another parallel region. An exception thrown by a task is rethrown after the loop.
template <typename Task>
void parallel_for(Index count, int threads, Schedule schedule, Task&& task) {
#if defined(DIFFATTN_HAS_OPENMP)
    const int team = static_cast<int>(std::min<Index>(available_threads(threads), count));  // no idle threads
    if (team > 1 && !omp_in_parallel()) {
        std::exception_ptr failure;
        const auto guarded = [&](Index i) {
            try {
                task(i, omp_get_thread_num());
            } catch (...) {
#pragma omp critical(diffattn_parallel_for)
                if (!failure) failure = std::current_exception();
            }
        };
        // One task at a time for both schedules: equal tasks do not make equal threads. On a shared
        // machine one core is often slowed by other load, and a static split then waits for its
        // slower half. Handing out one task at a time costs little next to a task; the schedules
        // differ in order only.
        const bool last_first = schedule == Schedule::largest_first;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
        for (Index i = 0; i < count; ++i) guarded(last_first ? count - 1 - i : i);
        if (failure) std::rethrow_exception(failure);
        return;
    }
#else
    (void)threads;
    (void)schedule;
#endif
    for (Index i = 0; i < count; ++i) task(i, 0);
}

}  // namespace diffattn::detail
