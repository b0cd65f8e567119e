// Helpers shared by the Google Benchmark programs of bench/ (header-only, bench-local), one concept
// per header, included together:
//   bench_inputs.hpp      random inputs
//   bench_timing.hpp      wall-clock timing, calls timed in turns, medians
//   gemm_yardstick.hpp    the same-binary yardstick: Eigen SGEMM on `threads` threads, and its rates
//   flop_rates.hpp        FLOP counts of an attention map; run_and_report (GFLOPs / vs_gemm counters)
//   bench_program.hpp     BenchArgs (--quick, --max-n=N), benchmark names and registration, run_main
//   stream_yardstick.hpp  the bandwidth yardstick of the decode benchmarks: a streaming read
#pragma once

#include "bench_inputs.hpp"
#include "bench_program.hpp"
#include "bench_timing.hpp"
#include "flop_rates.hpp"
#include "gemm_yardstick.hpp"
#include "stream_yardstick.hpp"
