// The bandwidth yardstick of the decode benchmarks (bench_decode, bench_batched_decode,
// bench/peers/ggml; header-only, bench-local): a vectorised sum over a 512 MB buffer of huge pages,
// split in equal parts over the threads.
#pragma once

#include "bench_timing.hpp"

#include <diffattn/core/huge_pages.hpp>
#include <diffattn/core/parallel.hpp>
#include <diffattn/core/types.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace bench {

constexpr std::size_t kStreamBytes = std::size_t{512} << 20;

/// The yardstick's buffer: 512 MB of floats, written once (so its pages exist). On Linux it asks
/// for 2 MB pages (madvise; Debian's transparent-huge-page mode is "madvise"): over 4 KB pages one
/// sequential stream reads only about 2/3 of what one core can, so the roofline would sit too low
/// (docs/benchmarks.md, "The yardstick over huge pages"). Where the advice is declined the buffer
/// keeps 4 KB pages.
inline const float* stream_buffer() {
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
inline double stream_sum(int threads, diffattn::Index offset, diffattn::Index count) {
    const float* buffer = stream_buffer() + offset;
    const diffattn::Index parts = threads, part = (count + parts - 1) / parts;
    std::vector<double> sums(static_cast<std::size_t>(parts), 0.0);
    using diffattn::detail::Schedule;
    diffattn::detail::parallel_for(parts, threads, Schedule::equal_tasks, [&](diffattn::Index p, int) {
        const diffattn::Index begin = p * part, n = std::min(part, count - begin);
        sums[static_cast<std::size_t>(p)] = Eigen::Map<const Eigen::VectorXf>(buffer + begin, n).sum();
    });
    double total = 0;
    for (double x : sums) total += x;
    return total;
}

/// One streaming read of the whole buffer on `threads` threads (equal parts): its sum.
inline double stream_sum(int threads) {
    return stream_sum(threads, 0, static_cast<diffattn::Index>(kStreamBytes / sizeof(float)));
}

/// Read bandwidth in bytes/s on `threads` threads, measured now: the best of 3 streaming reads
/// (about 0.1 s). It also leaves the last-level cache holding the yardstick's buffer, not the
/// operands of the next timed loop.
inline double stream_bandwidth_now(int threads) {
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
inline double stream_bandwidth(int threads) {
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
