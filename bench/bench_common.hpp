// Helpers shared by the Google Benchmark programs of bench/ (header-only, bench-local).
//
// - Random inputs, FLOP counts of an attention map.
// - The same-binary yardstick: Eigen SGEMM on `threads` threads (Eigen's own threading is off in
//   this build, EIGEN_DONT_PARALLELIZE, so T > 1 threads split C's rows into T panels with
//   OpenMP, each an ordinary single-threaded Eigen product), and its rates for a square GEMM of a
//   given FLOP count: the mean over >= 0.2 s, and the fastest product of the process.
// - run_and_report: times the benchmark loop and each call with a wall clock and sets the
//   GFLOPs / vs_gemm counters of the mean and of the fastest call (wall time, so the figures stay
//   right with several threads).
// - BenchArgs: the program's own flags (--quick, --max-n=N), stripped before Google Benchmark
//   sees the command line; benchmarks are registered at run time from them.
#pragma once

#include <diffattn/core/huge_pages.hpp>
#include <diffattn/core/parallel.hpp>
#include <diffattn/core/types.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace bench {

using diffattn::Index;
using Matrix = diffattn::RowMatrix<float>;
using Clock = std::chrono::steady_clock;

inline Matrix random_matrix(Index rows, Index cols, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

/// The median of v (the upper one of an even count); v is reordered.
inline double median(std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

/// The median over the rounds of a[i] / b[i]: two calls timed in turns (time_in_turns).
inline double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> ratios;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) ratios.push_back(a[i] / b[i]);
    return median(ratios);
}

/// Calls per second of the calls that took `seconds` each: their count over their total time.
inline double calls_per_second(const std::vector<double>& seconds) {
    double total = 0;
    for (double t : seconds) total += t;
    return static_cast<double>(seconds.size()) / total;
}

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Wall seconds of one call of `f`.
template <typename F>
double time_call(F&& f) {
    const auto start = Clock::now();
    f();
    return seconds_since(start);
}

/// Times `calls` in turns, one round per iteration of `state`, each call alone, the order of a
/// round alternating (forward, then backward), so that every call meets the same machine as the
/// others of its round: load from other tenants of a shared host comes and goes over seconds,
/// while benchmarks of their own run a minute apart. After each call, untimed, after(c, seconds)
/// (a yardstick read, bench_decode's decode_paired). Returns seconds[c][round].
template <typename Call, typename After>
std::vector<std::vector<double>> time_in_turns(benchmark::State& state, const std::vector<Call>& calls, After&& after) {
    const std::size_t count = calls.size();
    std::vector<std::vector<double>> seconds(count);
    bool forward = true;
    for (auto _ : state) {
        for (std::size_t i = 0; i < count; ++i) {
            const std::size_t c = forward ? i : count - 1 - i;
            seconds[c].push_back(time_call(calls[c]));
            after(c, seconds[c].back());
        }
        forward = !forward;
    }
    return seconds;
}

template <typename Call>
std::vector<std::vector<double>> time_in_turns(benchmark::State& state, const std::vector<Call>& calls) {
    return time_in_turns(state, calls, [](std::size_t, double) {});
}

/// Useful flops of one attention map: QK^T (2 N S d) + PV (2 N S dv), S = N, causal counted half.
inline double map_flops(Index n, Index head_dim, Index value_dim, bool causal) {
    const double full = 2.0 * double(n) * double(n) * double(head_dim + value_dim);
    return causal ? full / 2 : full;
}

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

/// The program's own flags, removed from argv before benchmark::Initialize.
///   --quick       small sizes and short runs (the pipeline check; scripts/bench.sh --quick)
///   --max-n=N     drop sizes above N (sequence length / context)
struct BenchArgs {
    bool quick = false;
    long long max_n = 0;  // 0: no limit

    bool fits(long long n) const { return max_n <= 0 || n <= max_n; }
    /// Minimum time per benchmark: Google Benchmark's 0.5 s default, 0.05 s in quick mode.
    double min_time() const { return quick ? 0.05 : 0.5; }

    static BenchArgs parse(int& argc, char** argv) {
        BenchArgs args;
        int out = 1;
        for (int i = 1; i < argc; ++i) {
            const char* a = argv[i];
            if (std::strcmp(a, "--quick") == 0) {
                args.quick = true;
            } else if (std::strncmp(a, "--max-n=", 8) == 0) {
                args.max_n = std::atoll(a + 8);
            } else {
                argv[out++] = argv[i];
            }
        }
        argc = out;
        argv[argc] = nullptr;
        return args;
    }
};

/// "family/key:value/key:value" benchmark names (tools/bench_json.py parses them).
class Name {
public:
    explicit Name(std::string family) : text_(std::move(family)) {}
    template <typename V>
    Name& operator()(const char* key, const V& value) {
        std::ostringstream s;
        s << '/' << key << ':' << value;
        text_ += s.str();
        return *this;
    }
    Name& operator()(const std::string& part) {
        text_ += '/' + part;
        return *this;
    }
    const std::string& str() const { return text_; }

private:
    std::string text_;
};

/// Registers `fn` under `name`, wall-clock timed, in `unit`; --quick sets a short minimum time
/// (Google Benchmark then appends "/min_time:0.050" to the name; tools/bench_json.py drops it).
template <typename Fn>
benchmark::internal::Benchmark* add(const BenchArgs& args, const Name& name, Fn&& fn,
                                    benchmark::TimeUnit unit = benchmark::kMillisecond) {
    benchmark::internal::Benchmark* b =
        benchmark::RegisterBenchmark(name.str().c_str(), std::forward<Fn>(fn))->UseRealTime()->Unit(unit);
    if (args.quick) b->MinTime(args.min_time());
    return b;
}

/// Initialises Google Benchmark with the remaining flags, runs, shuts down. Returns main's code.
inline int run_main(int argc, char** argv, const BenchArgs& args) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("diffattn_mode", args.quick ? "quick" : "full");
#ifdef _OPENMP
    benchmark::AddCustomContext("diffattn_openmp_max_threads", std::to_string(omp_get_max_threads()));
#else
    benchmark::AddCustomContext("diffattn_openmp_max_threads", "0 (no OpenMP)");
#endif
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

constexpr std::size_t kStreamBytes = std::size_t{512} << 20;

// The bandwidth yardstick of the decode benchmarks (bench_decode, bench_batched_decode,
// bench/peers/ggml): a vectorised sum over a 512 MB buffer of huge pages, split in equal parts
// over the threads.

/// The yardstick's buffer: 512 MB of floats, written once (so its pages exist). On Linux it asks
/// for 2 MB pages (madvise; Debian's transparent-huge-page mode is "madvise"): over 4 KB pages one
/// sequential stream reads only about 2/3 of what one core can, so the roofline would sit too low
/// (docs/benchmarks.md, "The yardstick over huge pages"). Where the advice is declined the buffer
/// keeps 4 KB pages.
const float* stream_buffer() {
    static const std::unique_ptr<float, void (*)(void*)> buffer = [] {
        auto* data = static_cast<float*>(std::aligned_alloc(diffattn::kHugePageBytes, kStreamBytes));
        if (data == nullptr) throw std::bad_alloc();
        diffattn::advise_huge_pages(data, kStreamBytes);  // the whole buffer: it is 2 MB-aligned
        std::fill(data, data + kStreamBytes / sizeof(float), 1.0f);
        return std::unique_ptr<float, void (*)(void*)>(data, &std::free);
    }();
    return buffer.get();
}

/// The share of the yardstick's buffer that Linux backs with huge pages (the AnonHugePages of
/// the mappings it lies in, from /proc/self/smaps; 0 where that cannot be read): whether the
/// advice was taken, and so which read the rooflines divide by.
inline double stream_buffer_huge_page_share() {
    const auto begin = reinterpret_cast<std::uintptr_t>(stream_buffer()), end = begin + kStreamBytes;
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    double huge_bytes = 0;
    while (std::getline(smaps, line)) {
        unsigned long long from = 0, to = 0;  // a mapping's header: "from-to perms ..." in hex
        if (std::sscanf(line.c_str(), "%llx-%llx ", &from, &to) == 2 && line.find(':') > line.find(' ')) {
            inside = from < end && to > begin;
        } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
            huge_bytes += 1024.0 * std::strtod(line.c_str() + std::strlen("AnonHugePages:"), nullptr);  // in kB
        }
    }
    return std::min(1.0, huge_bytes / static_cast<double>(kStreamBytes));
}

/// One streaming read of the buffer's floats [offset, offset + count) on `threads` threads (equal
/// parts): their sum.
double stream_sum(int threads, diffattn::Index offset, diffattn::Index count) {
    const float* buffer = stream_buffer() + offset;
    const diffattn::Index parts = threads, part = (count + parts - 1) / parts;
    std::vector<double> sums(static_cast<std::size_t>(parts), 0.0);
    diffattn::detail::parallel_for(parts, threads, diffattn::detail::Schedule::equal_tasks, [&](diffattn::Index p, int) {
        const diffattn::Index begin = p * part, n = std::min(part, count - begin);
        sums[static_cast<std::size_t>(p)] = Eigen::Map<const Eigen::VectorXf>(buffer + begin, n).sum();
    });
    double total = 0;
    for (double x : sums) total += x;
    return total;
}

/// One streaming read of the whole buffer on `threads` threads (equal parts): its sum.
double stream_sum(int threads) {
    return stream_sum(threads, 0, static_cast<diffattn::Index>(kStreamBytes / sizeof(float)));
}

/// Read bandwidth in bytes/s on `threads` threads, measured now: the best of 3 streaming reads
/// (about 0.1 s). It also leaves the last-level cache holding the yardstick's buffer, not the
/// operands of the next timed loop.
double stream_bandwidth_now(int threads) {
    stream_sum(threads);  // pages and thread team warm
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const auto start = Clock::now();
        benchmark::DoNotOptimize(stream_sum(threads));
        best = std::max(best, static_cast<double>(kStreamBytes) / seconds_since(start));
    }
    return best;
}

/// Read bandwidth in bytes/s on `threads` threads: stream_bandwidth_now(), measured once per run.
double stream_bandwidth(int threads) {
    static std::map<int, double> measured;
    auto found = measured.find(threads);
    if (found != measured.end()) return found->second;
    return measured[threads] = stream_bandwidth_now(threads);
}

/// The yardstick of one timed loop on a shared host, whose bandwidth drifts over a run of
/// minutes: the higher of stream_bandwidth_now() just before the loop (the constructor) and just
/// after it (after()), so a loop is held against the bandwidth of its own moment. The higher one,
/// because a read that a neighbour disturbed only understates what the host could give.
class StreamYardstick {
public:
    explicit StreamYardstick(int threads) : threads_(threads), before_(stream_bandwidth_now(threads)) {}
    /// Call once, after the timed loop: the bandwidth in bytes/s the loop's roofline divides by.
    double after() { return std::max(before_, stream_bandwidth_now(threads_)); }

private:
    int threads_;
    double before_;
};

/// The yardstick read beside each timed step, where a benchmark pairs them one by one (bench_decode's
/// decode_paired): the buffer in kStreamSlices slices of 128 MB, each read in turn, so that one
/// read also evicts the step before it from any last-level cache up to 128 MB.
class StreamSlices {
public:
    static constexpr int kStreamSlices = 4;
    explicit StreamSlices(int threads) : threads_(threads) { stream_sum(threads); }  // pages and team warm
    /// Reads the next slice on the threads: its bandwidth in bytes/s.
    double read_next() {
        const auto floats = static_cast<diffattn::Index>(kStreamBytes / sizeof(float) / kStreamSlices);
        const auto start = Clock::now();
        benchmark::DoNotOptimize(stream_sum(threads_, (next_++ % kStreamSlices) * floats, floats));
        return static_cast<double>(floats) * sizeof(float) / seconds_since(start);
    }

private:
    int threads_;
    int next_ = 0;
};

/// Registers stream_read/threads:<T> for T = 1, 2, the yardstick shown beside a decode program's
/// roofline counters: bytes_per_second of the timed passes, and best_of_3_bytes_per_second, the
/// stream_bandwidth() the roofline counters divide by.
inline void register_stream_read() {
    for (int threads : {1, 2}) {
        const std::string name = "stream_read/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& state) {
                                         stream_sum(threads);
                                         const auto start = Clock::now();
                                         for (auto _ : state) benchmark::DoNotOptimize(stream_sum(threads));
                                         const double seconds = seconds_since(start);
                                         state.counters["bytes_per_second"] =
                                             static_cast<double>(kStreamBytes) * state.iterations() / seconds;
                                         state.counters["best_of_3_bytes_per_second"] = stream_bandwidth(threads);
                                         state.counters["huge_page_share"] = stream_buffer_huge_page_share();
                                     })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(5);
    }
}

}  // namespace bench
