// The frame of a benchmark program (header-only, bench-local). BenchArgs: the program's own flags
// (--quick, --max-n=N), stripped before Google Benchmark sees the command line; benchmarks are
// registered at run time from them (add), under "family/key:value" names (Name), and run_main
// runs them.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace bench {

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

}  // namespace bench
