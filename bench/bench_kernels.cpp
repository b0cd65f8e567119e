// Single-head kernel benchmarks: every kernel and the reference at a few sizes, next to an Eigen
// GEMM of the same FLOP count in the same binary, so each figure reads as a fraction of GEMM speed.
//
// FLOPs counted (useful work of the formula): QK^T and PV of every map, 2 flops per multiply-add,
// causal counted half. DINT is counted as DIFF (its integral term is overhead on top of the same
// useful work), so a DINT/DIFF time ratio reads directly from the GFLOP/s columns.
// Counters: GFLOPs (rate) and vs_gemm (rate / the GEMM rate measured once at start-up).
#include <diffattn/diffattn.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace {

using diffattn::Index;
using Matrix = diffattn::RowMatrix<float>;

Matrix random_matrix(Index rows, Index cols, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

/// Multiply-add flops of one attention map: QK^T (N S d) + PV (N S dv), causal halved.
double map_flops(Index n, Index head_dim, Index value_dim, bool causal) {
    const double full = 2.0 * double(n) * double(n) * double(head_dim + value_dim);
    return causal ? full / 2 : full;
}

/// Square GEMM edge whose 2 n^3 flops best match `flops`.
Index gemm_edge_for(double flops) { return std::max<Index>(8, Index(std::lround(std::cbrt(flops / 2.0)))); }

/// GFLOP/s of Eigen's single-threaded SGEMM at 512^3, best of a few runs (the ratio's denominator).
double gemm_rate() {
    static const double rate = [] {
        const Index n = 512;
        Matrix a = random_matrix(n, n, 1), b = random_matrix(n, n, 2), c(n, n);
        double best = 0;
        for (int i = 0; i < 8; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            c.noalias() = a * b;
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            benchmark::DoNotOptimize(c.data());
            best = std::max(best, 2.0 * n * n * n / s / 1e9);
        }
        return best;
    }();
    return rate;
}

/// Runs `body` for every benchmark iteration and sets the GFLOPs and vs_gemm counters from the
/// wall time of the whole loop.
template <typename Body>
void run_and_report(benchmark::State& state, double flops_per_iteration, Body&& body) {
    const double gemm = gemm_rate();  // measured before the timed loop
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) body();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = flops_per_iteration * double(state.iterations()) / seconds / 1e9;
    state.counters["GFLOPs"] = rate;
    state.counters["vs_gemm"] = rate / gemm;
}

diffattn::AttentionOptions options_for(bool causal) {
    diffattn::AttentionOptions options;
    options.mask = causal ? diffattn::MaskKind::causal : diffattn::MaskKind::none;
    return options;
}

// Arguments: {N (= S), head_dim, causal}
void BM_softmax(benchmark::State& state) {
    const Index n = state.range(0), d = state.range(1);
    const bool causal = state.range(2) != 0;
    const Matrix q = random_matrix(n, d, 1), k = random_matrix(n, d, 2), v = random_matrix(n, d, 3);
    Matrix out(n, d);
    diffattn::AttentionWorkspace<float> ws(n, n, d, d);
    run_and_report(state, map_flops(n, d, d, causal), [&] {
        diffattn::softmax_attention(q, k, v, out, options_for(causal), &ws);
        benchmark::DoNotOptimize(out.data());
    });
}

// Arguments: {N, head_dim d (value width 2d), causal}
void BM_diff(benchmark::State& state) {
    const Index n = state.range(0), d = state.range(1);
    const bool causal = state.range(2) != 0;
    const Matrix q1 = random_matrix(n, d, 1), k1 = random_matrix(n, d, 2), q2 = random_matrix(n, d, 3),
                 k2 = random_matrix(n, d, 4), v = random_matrix(n, 2 * d, 5);
    Matrix out(n, 2 * d);
    diffattn::AttentionWorkspace<float> ws(n, n, d, 2 * d);
    run_and_report(state, 2 * map_flops(n, d, 2 * d, causal), [&] {
        diffattn::diff_attention(q1, k1, q2, k2, v, 0.8f, out, options_for(causal), &ws);
        benchmark::DoNotOptimize(out.data());
    });
}

// Arguments: {N, head_dim d, integral mode}; causal for the causal modes, none for global_mean.
void BM_dint(benchmark::State& state) {
    const Index n = state.range(0), d = state.range(1);
    const auto integral = static_cast<diffattn::DintIntegral>(state.range(2));
    const bool causal = integral != diffattn::DintIntegral::global_mean;
    const Matrix q1 = random_matrix(n, d, 1), k1 = random_matrix(n, d, 2), q2 = random_matrix(n, d, 3),
                 k2 = random_matrix(n, d, 4), v = random_matrix(n, 2 * d, 5);
    Matrix out(n, 2 * d);
    diffattn::AttentionWorkspace<float> ws(n, n, d, 2 * d);
    run_and_report(state, 2 * map_flops(n, d, 2 * d, causal), [&] {
        diffattn::dint_attention(q1, k1, q2, k2, v, 0.8f, integral, out, options_for(causal), nullptr, &ws);
        benchmark::DoNotOptimize(out.data());
    });
}

// The plain reference (materialised N x S maps), DINT causal_softmax: {N, head_dim}
void BM_reference_dint(benchmark::State& state) {
    const Index n = state.range(0), d = state.range(1);
    const Matrix q1 = random_matrix(n, d, 1), k1 = random_matrix(n, d, 2), q2 = random_matrix(n, d, 3),
                 k2 = random_matrix(n, d, 4), v = random_matrix(n, 2 * d, 5);
    run_and_report(state, 2 * map_flops(n, d, 2 * d, true), [&] {
        auto out = diffattn::reference::dint_attention(q1, k1, q2, k2, v, 0.8f,
                                                       diffattn::DintIntegral::causal_softmax, options_for(true));
        benchmark::DoNotOptimize(out.data());
    });
}

// Eigen GEMM with the FLOPs of a softmax map {N, head_dim, causal}: the same-binary yardstick.
void BM_gemm_equal_flops(benchmark::State& state) {
    const double flops = map_flops(state.range(0), state.range(1), state.range(1), state.range(2) != 0);
    const Index e = gemm_edge_for(flops);
    const Matrix a = random_matrix(e, e, 1), b = random_matrix(e, e, 2);
    Matrix c(e, e);
    run_and_report(state, 2.0 * double(e) * double(e) * double(e), [&] {
        c.noalias() = a * b;
        benchmark::DoNotOptimize(c.data());
    });
}

void sizes(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> dims, std::initializer_list<int64_t> flags) {
    for (int64_t n : {256, 1024, 4096})
        for (int64_t d : dims)
            for (int64_t f : flags) b->Args({n, d, f});
}

}  // namespace

BENCHMARK(BM_softmax)->Apply([](auto* b) { sizes(b, {64, 128}, {0, 1}); })->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_equal_flops)->Apply([](auto* b) { sizes(b, {64, 128}, {0, 1}); })->Unit(benchmark::kMillisecond);
BENCHMARK(BM_diff)->Apply([](auto* b) { sizes(b, {64}, {0, 1}); })->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dint)->Apply([](auto* b) { sizes(b, {64}, {0, 1, 2}); })->Unit(benchmark::kMillisecond);
BENCHMARK(BM_reference_dint)->Args({256, 64})->Args({1024, 64})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
