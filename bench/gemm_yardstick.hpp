// The same-binary yardstick of the compute benchmarks (header-only, bench-local): Eigen SGEMM on
// `threads` threads (Eigen's own threading is off in this build, EIGEN_DONT_PARALLELIZE, so T > 1
// threads split C's rows into T panels with OpenMP, each an ordinary single-threaded Eigen
// product), and its rates for a square GEMM of a given FLOP count: the mean over >= 0.2 s, and
// the fastest product of the process.
#pragma once

#include "bench_inputs.hpp"
#include "bench_timing.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

namespace bench {

/// c = a b with Eigen, on `threads` row panels (1: one plain Eigen product).
inline void gemm(const Matrix& a, const Matrix& b, Matrix& c, int threads) {
    if (threads <= 1) {
        c.noalias() = a * b;
        return;
    }
    const Index rows = a.rows();
    const Index panel = (rows + threads - 1) / threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int t = 0; t < threads; ++t) {
        const Index r0 = std::min<Index>(rows, t * panel);
        const Index r1 = std::min<Index>(rows, r0 + panel);
        if (r1 > r0) c.middleRows(r0, r1 - r0).noalias() = a.middleRows(r0, r1 - r0) * b;
    }
}

/// Square GEMM edge whose 2 e^3 flops best match `flops`.
inline Index gemm_edge_for(double flops) {
    return std::max<Index>(16, Index(std::lround(std::cbrt(flops / 2.0))));
}

/// An e x e x e SGEMM with operands of its own: a and b random (seeds `seed`, `seed + 1`), c its output.
struct GemmProblem {
    Matrix a, b, c;
    GemmProblem(Index e, unsigned seed) : a(random_matrix(e, e, seed)), b(random_matrix(e, e, seed + 1)), c(e, e) {}
    /// One product c = a b on `threads` threads (gemm).
    void multiply(int threads) {
        gemm(a, b, c, threads);
        benchmark::DoNotOptimize(c.data());
    }
    double flops() const { return 2.0 * double(a.rows()) * double(a.rows()) * double(a.rows()); }
};

/// Rates of Eigen SGEMM e x e x e on `threads` threads, GFLOP/s.
struct GemmRate {
    double mean = 0;  ///< over its first measurement (>= 0.2 s, >= 2 runs, after a warm-up): as GFLOPs
    double best = 0;  ///< of its fastest single product so far in this process: as GFLOPs_best
};

/// The rates of an e x e x e SGEMM on `threads` threads. The mean is measured once per (edge,
/// threads) and cached. The best is the fastest product over every call of this process: each
/// call times a few more products (>= 1 and >= 0.05 s), so the yardstick of a figure taken late
/// in a run has had as many chances as the kernels to meet a quiet machine.
inline GemmRate gemm_rate_for_edge(Index e, int threads) {
    static std::map<std::pair<Index, int>, GemmRate> cache;
    static std::map<Index, GemmProblem> problems;  // one per edge, kept for later uses
    GemmProblem& problem = problems.try_emplace(e, e, 11u).first->second;
    const double flops = problem.flops();
    GemmRate& rate = cache[std::make_pair(e, threads)];
    const auto product = [&] { problem.multiply(threads); };
    const auto timed_runs = [&](double min_seconds, int min_runs) {
        int runs = 0;
        double fastest = std::numeric_limits<double>::infinity();
        const auto start = Clock::now();
        while (runs < min_runs || (seconds_since(start) < min_seconds && runs < 1000)) {
            fastest = std::min(fastest, time_call(product));
            ++runs;
        }
        rate.best = std::max(rate.best, flops / fastest / 1e9);
        return flops * runs / seconds_since(start) / 1e9;
    };
    if (rate.mean == 0) {
        product();  // warm-up (page faults, thread team); later uses find the pages and team warm
        rate.mean = timed_runs(0.2, 2);
    } else {
        timed_runs(0.05, 1);
    }
    return rate;
}

/// The yardstick of a benchmark doing `flops` useful flops per iteration: Eigen SGEMM of equal
/// flops (a square GEMM) on the same number of threads.
inline GemmRate gemm_rate_equal_flops(double flops, int threads) {
    return gemm_rate_for_edge(gemm_edge_for(flops), threads);
}

}  // namespace bench
