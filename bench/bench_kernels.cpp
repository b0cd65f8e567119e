// Single-head kernel benchmarks: every kernel and DINT integral mode over a sweep of sequence
// lengths, head dims, masks and thread counts, next to an Eigen GEMM of the same FLOP count in
// the same binary, so each figure reads as a fraction of GEMM speed. docs/benchmarks.md explains
// how to read the output; scripts/bench.sh runs it and charts it.
//
// Names (tools/bench_json.py parses them), all wall-clock timed (".../real_time"):
//   softmax/N:<N>/d:<d>/mask:<causal|none>/threads:<T>                 Q, K [N x d], V [N x d]
//   diff/...                                                          Q1, K1, Q2, K2 [N x d], V [N x 2d]
//   dint_causal_softmax/..., dint_causal_mean/..., dint_global_mean/...  (global_mean: mask none only)
//   reference_softmax/..., reference_diff/..., reference_dint_causal_softmax/...
//                                   the plain transcription (materialised N x N maps), one thread,
//                                   only where its maps fit in kReferenceMaxBytes
//   gemm/N:<N>/d:<d>/mask:<m>/threads:<T>
//                                   Eigen SGEMM, square, with the flops of a softmax map of that
//                                   N, d, mask (the chart's GEMM line); T > 1: T row panels (OpenMP)
//
// FLOPs counted (the useful work of the formula): QK^T and PV of every map, 2 flops per
// multiply-add, S = N, causal counted half. DIFF = 2 maps of value width 2d. DINT is counted as
// DIFF (its integral term is overhead on top of the same useful work), so DINT / DIFF time ratios
// read directly from the GFLOP/s columns.
// Counters: GFLOPs (rate), vs_gemm (rate / the rate of an Eigen SGEMM of equal flops on the same
// thread count, measured in this process), gemm_GFLOPs (that denominator).
// The kernels get AttentionOptions::threads = T (1 and 2 for the headline cases).
//
// Flags (besides Google Benchmark's): --quick (N 512..2048, short runs), --max-n=N.
#include "bench_common.hpp"

#include <diffattn/diffattn.hpp>

#include <string>
#include <vector>

namespace {

using bench::Index;
using bench::Matrix;
using bench::Name;
using diffattn::DintIntegral;

/// The reference materialises several N x N float maps; it runs only while they fit in this.
constexpr double kReferenceMaxBytes = 384.0 * 1024 * 1024;  // softmax, DIFF to N 4096; DINT to 2048

enum class Kind { softmax, diff, dint };

struct Case {
    Kind kind = Kind::softmax;
    DintIntegral integral = DintIntegral::causal_softmax;
    Index n = 0, d = 0;
    bool causal = true;
    int threads = 1;

    Index value_dim() const { return kind == Kind::softmax ? d : 2 * d; }
    double flops() const {
        const double one = bench::map_flops(n, d, value_dim(), causal);
        return kind == Kind::softmax ? one : 2 * one;
    }
    std::string family() const {
        switch (kind) {
            case Kind::softmax: return "softmax";
            case Kind::diff: return "diff";
            case Kind::dint: return std::string("dint_") + diffattn::to_string(integral);
        }
        return "?";
    }
    /// N x N float matrices the reference holds at its peak (logits, maps, combined, integral).
    double reference_bytes() const {
        const double maps = kind == Kind::softmax ? 3 : kind == Kind::diff ? 5 : 8;
        return maps * double(n) * double(n) * sizeof(float);
    }
    Name name(const std::string& family_name) const {
        Name name(family_name);
        name("N", n)("d", d)("mask", causal ? "causal" : "none")("threads", threads);
        return name;
    }
    diffattn::AttentionOptions options() const {
        diffattn::AttentionOptions options;
        options.mask = causal ? diffattn::MaskKind::causal : diffattn::MaskKind::none;
        options.threads = threads;
        return options;
    }
};

struct Inputs {
    Matrix q1, k1, q2, k2, v, out;
    explicit Inputs(const Case& c)
        : q1(bench::random_matrix(c.n, c.d, 1)),
          k1(bench::random_matrix(c.n, c.d, 2)),
          q2(c.kind == Kind::softmax ? Matrix() : bench::random_matrix(c.n, c.d, 3)),
          k2(c.kind == Kind::softmax ? Matrix() : bench::random_matrix(c.n, c.d, 4)),
          v(bench::random_matrix(c.n, c.value_dim(), 5)),
          out(c.n, c.value_dim()) {}
};

constexpr float kLambda = 0.8f;

void run_kernel(benchmark::State& state, const Case& c) {
    Inputs in(c);
    diffattn::AttentionWorkspace<float> ws;
    const diffattn::AttentionOptions options = c.options();
    auto call = [&] {
        switch (c.kind) {
            case Kind::softmax: diffattn::softmax_attention(in.q1, in.k1, in.v, in.out, options, &ws); break;
            case Kind::diff:
                diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, kLambda, in.out, options, &ws);
                break;
            case Kind::dint:
                diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, kLambda, c.integral, in.out, options,
                                         nullptr, &ws);
                break;
        }
        benchmark::DoNotOptimize(in.out.data());
    };
    call();  // warm-up: sizes the workspace, faults the pages in
    bench::run_and_report(state, c.flops(), c.threads, call);
}

void run_reference(benchmark::State& state, const Case& c) {
    Inputs in(c);
    const diffattn::AttentionOptions options = c.options();
    auto call = [&] {
        Matrix out;
        switch (c.kind) {
            case Kind::softmax: out = diffattn::reference::softmax_attention(in.q1, in.k1, in.v, options); break;
            case Kind::diff:
                out = diffattn::reference::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, kLambda, options);
                break;
            case Kind::dint:
                out = diffattn::reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, kLambda, c.integral,
                                                          options);
                break;
        }
        benchmark::DoNotOptimize(out.data());
    };
    bench::run_and_report(state, c.flops(), 1, call);
}

/// Eigen SGEMM with the flops of a softmax map of (N, d, mask): the chart's GEMM line.
void run_gemm(benchmark::State& state, const Case& c) {
    const Index e = bench::gemm_edge_for(c.flops());
    const Matrix a = bench::random_matrix(e, e, 1), b = bench::random_matrix(e, e, 2);
    Matrix out(e, e);
    state.counters["edge"] = double(e);
    bench::run_and_report(state, 2.0 * double(e) * double(e) * double(e), c.threads, [&] {
        bench::gemm(a, b, out, c.threads);
        benchmark::DoNotOptimize(out.data());
    });
}

void register_all(const bench::BenchArgs& args) {
    std::vector<Index> sizes;
    for (Index n = 512; n <= (args.quick ? 2048 : 16384); n *= 2) {
        if (args.fits(n)) sizes.push_back(n);
    }
    const std::vector<Index> head_dims = {64, 128};
    const std::vector<bool> masks = {true, false};

    // Threads 2 for the headline cases at N >= 1024: softmax d128 (and its GEMM), DIFF and every
    // DINT mode at d64, each at its decoder mask (global_mean: none).
    auto thread_counts = [](const Case& c) {
        std::vector<int> t = {1};
        const bool headline = (c.kind == Kind::softmax && c.d == 128) || (c.kind != Kind::softmax && c.d == 64);
        const bool decoder_mask = c.causal || (c.kind == Kind::dint && c.integral == DintIntegral::global_mean) ||
                                  c.kind == Kind::softmax;
        if (headline && decoder_mask && c.n >= 1024) t.push_back(2);
        return t;
    };

    std::vector<Case> cases;
    for (Index d : head_dims) {
        for (bool causal : masks) {
            for (Index n : sizes) {
                Case c;
                c.n = n;
                c.d = d;
                c.causal = causal;
                c.kind = Kind::softmax;
                cases.push_back(c);
                c.kind = Kind::diff;
                cases.push_back(c);
                c.kind = Kind::dint;
                for (DintIntegral integral :
                     {DintIntegral::causal_softmax, DintIntegral::causal_mean, DintIntegral::global_mean}) {
                    if (integral == DintIntegral::global_mean && causal) continue;  // needs mask none (SPEC 2.3)
                    c.integral = integral;
                    cases.push_back(c);
                }
            }
        }
    }

    for (const Case& base : cases) {
        for (int threads : thread_counts(base)) {
            Case c = base;
            c.threads = threads;
            bench::add(args, c.name(c.family()), [c](benchmark::State& s) { run_kernel(s, c); });
        }
    }
    // The plain reference (one thread) where its N x N maps fit; DINT in its default mode only.
    for (const Case& c : cases) {
        if (c.kind == Kind::dint && c.integral != DintIntegral::causal_softmax) continue;
        if (c.reference_bytes() > kReferenceMaxBytes) continue;
        bench::add(args, c.name("reference_" + c.family()), [c](benchmark::State& s) { run_reference(s, c); });
    }
    // The GEMM line: per (N, d, mask) with a softmax map's flops; 2 threads where softmax has them.
    for (const Case& c : cases) {
        if (c.kind != Kind::softmax) continue;
        for (int threads : thread_counts(c)) {
            Case g = c;
            g.threads = threads;
            bench::add(args, g.name("gemm"), [g](benchmark::State& s) { run_gemm(s, g); });
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args);
    return bench::run_main(argc, argv, args);
}
