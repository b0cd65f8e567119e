// FLOP rates of the compute benchmarks (header-only, bench-local): the useful flops of an attention
// map, and run_and_report, which times the benchmark loop and each call with a wall clock and sets
// the GFLOPs / vs_gemm counters of the mean and of the fastest call (wall time, so the figures stay
// right with several threads) against the SGEMM yardstick (gemm_yardstick.hpp).
#pragma once

#include "bench_inputs.hpp"
#include "bench_timing.hpp"
#include "gemm_yardstick.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <limits>

namespace bench {

/// Useful flops of one attention map: QK^T (2 N S d) + PV (2 N S dv), S = N, causal counted half.
inline double map_flops(Index n, Index head_dim, Index value_dim, bool causal) {
    const double full = 2.0 * double(n) * double(n) * double(head_dim + value_dim);
    return causal ? full / 2 : full;
}

/// Runs `body` once per benchmark iteration, timing each call, and sets
///   GFLOPs        = flops_per_iteration * iterations / (wall seconds of the loop) / 1e9
///   vs_gemm       = GFLOPs / (Eigen SGEMM mean rate, square GEMM of equal flops, same threads)
///   best_ms       = the fastest single call, in ms
///   GFLOPs_best   = flops_per_iteration / (fastest call) / 1e9
///   vs_gemm_best  = GFLOPs_best / (that GEMM's fastest product so far)
/// The mean figures are what a call costs on this machine as it is; the best ones, what the code
/// does when nothing else runs on its cores. On a shared machine neighbours slow some calls by up to
/// 1.5x, which swamps the differences the ratios are about; the fastest call is the least disturbed
/// (docs/benchmarks.md). The GEMM is measured before the timed loop. Returns the wall seconds of
/// the loop.
template <typename Body>
double run_and_report(benchmark::State& state, double flops_per_iteration, int threads, Body&& body) {
    const GemmRate gemm_rate = gemm_rate_equal_flops(flops_per_iteration, threads);
    double fastest = std::numeric_limits<double>::infinity();
    const auto start = Clock::now();
    for (auto _ : state) fastest = std::min(fastest, time_call(body));
    const double seconds = seconds_since(start);
    const double rate = flops_per_iteration * double(state.iterations()) / seconds / 1e9;
    const double best_rate = flops_per_iteration / fastest / 1e9;
    state.counters["GFLOPs"] = rate;
    state.counters["vs_gemm"] = rate / gemm_rate.mean;
    state.counters["gemm_GFLOPs"] = gemm_rate.mean;
    state.counters["best_ms"] = fastest * 1e3;
    state.counters["GFLOPs_best"] = best_rate;
    state.counters["vs_gemm_best"] = best_rate / gemm_rate.best;
    return seconds;
}

}  // namespace bench
