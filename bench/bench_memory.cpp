// Peak extra memory of a long-context DINT forward: one head, N tokens (65,536 by default),
// d 64, value width 2d, each causally valid integral mode (causal_softmax, causal_mean) with the
// causal mask. Target (the performance issue): < 16 MB beyond the inputs and outputs.
//
// Not a Google Benchmark program: each mode runs in a fresh child process (fork), which
//   1. allocates and fills Q1, K1, Q2, K2 [N x d], V [N x 2d] and the output [N x 2d],
//   2. records the heap bytes in use and its maximum resident set size (getrusage ru_maxrss),
//   3. runs dint_attention once with no workspace (the kernel's own scratch counts as extra),
//   4. reports
//        peak_extra_heap_bytes  the peak of heap bytes in use during the call minus the bytes in
//                               use before it: every malloc / calloc / realloc / posix_memalign /
//                               aligned_alloc / memalign of the process (operator new and Eigen's
//                               aligned allocations go through them; OpenMP threads included) is
//                               counted by this program's interposed allocator, at
//                               malloc_usable_size granularity;
//        maxrss_delta_bytes     the growth of the maximum resident set during the call (a
//                               cross-check that also sees mmap'd memory such as thread stacks,
//                               at page granularity);
//        seconds                wall time of the call (informative only).
// Nothing is asserted: within_limit says whether peak_extra_heap_bytes < --limit-mb.
//
//   bench_memory [--quick] [--n=65536] [--d=64] [--threads=1] [--modes=causal_softmax,causal_mean]
//                [--limit-mb=16] [--json=FILE]
// --quick: N 16,384 (the 65,536 run takes about a minute per mode on one core).
// --modes=all adds global_mean (mask none). --json writes Google-Benchmark-style JSON
// ({"context": ..., "benchmarks": [...]}, one entry per mode) for tools/bench_json.py.
#include <diffattn/diffattn.hpp>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "heap_counter.hpp"  // every malloc of the process counted: g_in_use, g_peak

namespace {

using diffattn::DintIntegral;
using diffattn::Index;
using Matrix = diffattn::RowMatrix<float>;

struct Args {
    Index n = 65536;
    Index d = 64;
    int threads = 1;
    double limit_mb = 16;
    std::vector<DintIntegral> modes = {DintIntegral::causal_softmax, DintIntegral::causal_mean};
    std::string json;
    bool quick = false;
};

struct Result {
    long long peak_extra_heap_bytes = 0;
    long long maxrss_delta_bytes = 0;
    long long io_bytes = 0;
    double seconds = 0;
    int ok = 0;
    char error[256] = {};
};

long maxrss_kb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

void fill(Matrix& m, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = uniform(rng);
}

/// Runs in the child: one DINT forward, measured.
Result measure(const Args& args, DintIntegral mode) {
    Result r;
    try {
        const Index n = args.n, d = args.d;
        Matrix q1(n, d), k1(n, d), q2(n, d), k2(n, d), v(n, 2 * d), out(n, 2 * d);
        fill(q1, 1);
        fill(k1, 2);
        fill(q2, 3);
        fill(k2, 4);
        fill(v, 5);
        out.setZero();  // fault the output's pages in: it is not "extra"
        r.io_bytes = static_cast<long long>((q1.size() + k1.size() + q2.size() + k2.size() + v.size() + out.size()) *
                                            sizeof(float));
        diffattn::AttentionOptions options;
        options.mask = mode == DintIntegral::global_mean ? diffattn::MaskKind::none : diffattn::MaskKind::causal;
        options.threads = args.threads;

        const long rss_before = maxrss_kb();
        const long long in_use_before = g_in_use.load();
        g_peak.store(in_use_before);
        const auto t0 = std::chrono::steady_clock::now();
        diffattn::dint_attention(q1, k1, q2, k2, v, 0.8f, mode, out, options);  // no workspace: its scratch counts
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.peak_extra_heap_bytes = g_peak.load() - in_use_before;
        r.maxrss_delta_bytes = (maxrss_kb() - rss_before) * 1024LL;
        volatile float sink = out(n - 1, 0);
        (void)sink;
        r.ok = 1;
    } catch (const std::exception& e) {
        std::snprintf(r.error, sizeof r.error, "%s", e.what());
    }
    return r;
}

Result measure_in_child(const Args& args, DintIntegral mode) {
    int fds[2];
    Result r;
    if (pipe(fds) != 0) {
        std::snprintf(r.error, sizeof r.error, "pipe failed");
        return r;
    }
    const pid_t pid = fork();
    if (pid < 0) {
        std::snprintf(r.error, sizeof r.error, "fork failed");
        return r;
    }
    if (pid == 0) {
        close(fds[0]);
        const Result child = measure(args, mode);
        const ssize_t written = write(fds[1], &child, sizeof child);
        _exit(written == static_cast<ssize_t>(sizeof child) ? 0 : 1);
    }
    close(fds[1]);
    std::size_t got = 0;
    char* dst = reinterpret_cast<char*>(&r);
    while (got < sizeof r) {
        const ssize_t k = read(fds[0], dst + got, sizeof r - got);
        if (k <= 0) break;
        got += static_cast<std::size_t>(k);
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof r) {
        r = Result{};
        std::snprintf(r.error, sizeof r.error, "child process died (status %d)", status);
    }
    return r;
}

bool parse(int argc, char** argv, Args& args) {
    bool n_set = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](const char* key) -> const char* {
            const std::size_t len = std::strlen(key);
            return a.compare(0, len, key) == 0 ? argv[i] + len : nullptr;
        };
        if (a == "--quick") {
            args.quick = true;
        } else if (const char* n = value("--n=")) {
            args.n = std::atoll(n);
            n_set = true;
        } else if (const char* d = value("--d=")) {
            args.d = std::atoll(d);
        } else if (const char* t = value("--threads=")) {
            args.threads = std::atoi(t);
        } else if (const char* l = value("--limit-mb=")) {
            args.limit_mb = std::atof(l);
        } else if (const char* j = value("--json=")) {
            args.json = j;
        } else if (const char* m = value("--modes=")) {
            args.modes.clear();
            std::stringstream list(m);
            std::string item;
            while (std::getline(list, item, ',')) {
                if (item == "all") {
                    args.modes = {DintIntegral::causal_softmax, DintIntegral::causal_mean, DintIntegral::global_mean};
                    break;
                }
                DintIntegral mode;
                if (!diffattn::parse_dint_integral(item, mode)) {
                    std::cerr << "bench_memory: unknown mode '" << item << "'\n";
                    return false;
                }
                args.modes.push_back(mode);
            }
        } else {
            std::cerr << "bench_memory: unknown argument '" << a << "'\n"
                      << "usage: bench_memory [--quick] [--n=N] [--d=D] [--threads=T] [--modes=a,b|all] "
                         "[--limit-mb=MB] [--json=FILE]\n";
            return false;
        }
    }
    if (args.quick && !n_set) args.n = 16384;
    return args.n > 0 && args.d > 0 && args.threads >= 1;
}

}  // namespace

int main(int argc, char** argv) {
    Args args;
    if (!parse(argc, argv, args)) return 2;
    const double mb = 1024.0 * 1024.0;
    const long long limit = static_cast<long long>(args.limit_mb * mb);

    std::ostringstream entries;
    std::printf("DINT forward, one head: N %lld, d %lld, value width %lld, threads %d (inputs + output %.1f MB)\n",
                static_cast<long long>(args.n), static_cast<long long>(args.d), static_cast<long long>(2 * args.d),
                args.threads, double(args.n) * double(8 * args.d) * sizeof(float) / mb);
    std::printf("%-16s %-7s %16s %16s %10s  %s\n", "mode", "mask", "peak extra heap", "maxrss delta", "seconds",
                "target");
    bool first = true;
    for (DintIntegral mode : args.modes) {
        const bool causal = mode != DintIntegral::global_mean;
        const Result r = measure_in_child(args, mode);
        const char* mask = causal ? "causal" : "none";
        if (!r.ok) {
            std::printf("%-16s %-7s  error: %s\n", diffattn::to_string(mode), mask, r.error);
            continue;
        }
        const bool within = r.peak_extra_heap_bytes < limit;
        std::printf("%-16s %-7s %13.3f MB %13.3f MB %10.2f  %s %.0f MB\n", diffattn::to_string(mode), mask,
                    double(r.peak_extra_heap_bytes) / mb, double(r.maxrss_delta_bytes) / mb, r.seconds,
                    within ? "<" : ">=", args.limit_mb);
        entries << (first ? "" : ",\n") << "    {\"name\": \"memory/dint_" << diffattn::to_string(mode)
                << "/N:" << args.n << "/d:" << args.d << "/mask:" << mask << "/threads:" << args.threads
                << "\", \"run_type\": \"iteration\", \"iterations\": 1, \"real_time\": " << r.seconds * 1e3
                << ", \"time_unit\": \"ms\", \"peak_extra_heap_bytes\": " << r.peak_extra_heap_bytes
                << ", \"maxrss_delta_bytes\": " << r.maxrss_delta_bytes << ", \"io_bytes\": " << r.io_bytes
                << ", \"limit_bytes\": " << limit << ", \"within_limit\": " << (within ? 1 : 0) << "}";
        first = false;
    }
    if (!args.json.empty()) {
        std::ofstream out(args.json);
        char date[64];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
        out << "{\n  \"context\": {\"executable\": \"bench_memory\", \"date\": \"" << date
            << "\", \"diffattn_mode\": \"" << (args.quick ? "quick" : "full") << "\"},\n  \"benchmarks\": [\n"
            << entries.str() << "\n  ]\n}\n";
        if (!out) {
            std::cerr << "bench_memory: cannot write " << args.json << "\n";
            return 1;
        }
    }
    return 0;
}
