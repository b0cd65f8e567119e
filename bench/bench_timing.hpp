// Wall-clock timing of the benchmarks (header-only, bench-local): one call, calls timed in turns
// against the same machine, and the medians and rates of what they took.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

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

}  // namespace bench
