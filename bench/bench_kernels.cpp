// Single-head kernel benchmarks: every kernel and DINT integral mode over a sweep of sequence
// lengths, head dims, masks and thread counts, next to an Eigen GEMM of the same FLOP count in
// the same binary, so each figure reads as a fraction of GEMM speed. docs/benchmarks.md explains
// how to read the output; scripts/bench.sh runs it and charts it.
//
// Names (tools/bench_json.py parses them), all wall-clock timed (".../real_time"):
//   softmax/N:<N>/d:<d>/mask:<causal|none>/threads:<T>                 Q, K [N x d], V [N x d]
//   diff/...                                                          Q1, K1, Q2, K2 [N x d], V [N x 2d]
//   dint_causal_softmax/..., dint_causal_mean/..., dint_global_mean/...  (global_mean: mask none only)
//   gda/gr:<gr>/...                                                   one GDA group (docs/math.md §9):
//                                   Q1 [N x gr d] (gr signal heads), K1, Q2, K2 [N x d], V [N x 2d]
//   reference_softmax/..., reference_diff/..., reference_dint_causal_softmax/...
//                                   the plain transcription (materialised N x N maps), one thread,
//                                   only where its maps fit in kReferenceMaxBytes
//   gemm/N:<N>/d:<d>/mask:<m>/threads:<T>
//                                   Eigen SGEMM, square, with the flops of a softmax map of that
//                                   N, d, mask (the chart's GEMM line); T > 1: T row panels (OpenMP)
//   pair/what:<what>/N:<N>/d:<d>/mask:<m>
//                                   two of the above timed call for call in alternation (run_pair,
//                                   register_pairs): the ratio targets at N 1024..4096
//   <family>_bf16/.../products:<dot|amx|widened>, bf16_gemm/..., pair/what:bf16_...
//                                   the kernels with BF16 products (AttentionOptions::compute) and
//                                   the BF16 GEMM yardstick (bf16_gemm_yardstick.hpp: oneDNN's
//                                   matmul or our own vdpbf16ps GEMM, the faster), register_bf16
//   linear/N:<N>/in:<i>/out:<o>/weights:<f32|bf16>/threads:<T>/compute:<scalar|bf16_widened|bf16_dot|bf16_amx>
//                                   a prefill's projection (linear()) at Motif-2.6B's widths, in
//                                   float and with BF16 products (docs/math.md §10.1), register_linear
//
// FLOPs counted (the useful work of the formula): QK^T and PV of every map, 2 flops per
// multiply-add, S = N, causal counted half. DIFF = 2 maps of value width 2d; a GDA group = gr + 1
// maps of value width 2d (gr signal heads and the noise head, whose output serves all gr). DINT is counted as
// DIFF (its integral term is overhead on top of the same useful work), so DINT / DIFF time ratios
// read directly from the GFLOP/s columns.
// Counters: GFLOPs (rate), vs_gemm (rate / the rate of an Eigen SGEMM of equal flops on the same
// thread count, measured in this process), gemm_GFLOPs (that denominator).
// The kernels get AttentionOptions::threads = T (1 and 2 for the headline cases).
//
// Flags (besides Google Benchmark's): --quick (N 512..2048, short runs), --max-n=N.
#include "bench_common.hpp"
#include "bf16_gemm_yardstick.hpp"

#include <diffattn/diffattn.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using bench::Index;
using bench::Matrix;
using bench::Name;
using diffattn::Compute;
using diffattn::DintIntegral;

/// The reference materialises several N x N float maps; it runs only while they fit in this.
constexpr double kReferenceMaxBytes = 384.0 * 1024 * 1024;  // softmax, DIFF to N 4096; DINT to 2048

enum class Kind { softmax, diff, dint, gda };

struct Case {
    Kind kind = Kind::softmax;
    DintIntegral integral = DintIntegral::causal_softmax;
    Index n = 0, d = 0;
    bool causal = true;
    int threads = 1;
    Index gr = 4;     // gda: signal heads of the group
    Index heads = 1;  // diff: heads run one after another (gda_vs_diff's gr DIFF heads)
    Compute compute = Compute::scalar;  ///< bf16_dot / bf16_amx / bf16_widened: the *_bf16 families

    Index value_dim() const { return kind == Kind::softmax ? d : 2 * d; }
    double flops() const {
        const double one = bench::map_flops(n, d, value_dim(), causal);
        switch (kind) {
            case Kind::softmax: return one;
            case Kind::gda: return double(gr + 1) * one;
            case Kind::diff: return 2 * one * double(heads);
            case Kind::dint: return 2 * one;
        }
        return 0;
    }
    std::string family() const {
        const std::string suffix = compute == Compute::scalar ? "" : "_bf16";
        switch (kind) {
            case Kind::softmax: return "softmax" + suffix;
            case Kind::diff: return (heads == 1 ? "diff" : "diff_heads") + suffix;
            case Kind::dint: return std::string("dint_") + diffattn::to_string(integral) + suffix;
            case Kind::gda: return "gda" + suffix;
        }
        return "?";
    }
    /// "dot", "amx" or "widened" for the BF16 families (their products: docs/math.md §7.1).
    const char* products() const { return products_of(compute); }
    static const char* products_of(Compute compute) {
        return compute == Compute::bf16_dot ? "dot" : compute == Compute::bf16_amx ? "amx" : "widened";
    }
    /// Logits of the maps the products make (softmax 1, DIFF 2), S = N, causal counted half.
    double logits() const {
        const double one = double(n) * double(n) * (causal ? 0.5 : 1.0);
        return kind == Kind::softmax ? one : 2 * one;
    }
    /// N x N float matrices the reference holds at its peak (logits, maps, combined, integral).
    double reference_bytes() const {
        const double maps = kind == Kind::softmax ? 3 : kind == Kind::diff ? 5 : 8;
        return maps * double(n) * double(n) * sizeof(float);
    }
    Name name(const std::string& family_name) const {
        Name name(family_name);
        if (kind == Kind::gda) name("gr", gr);
        name("N", n)("d", d)("mask", causal ? "causal" : "none")("threads", threads);
        if (compute != Compute::scalar) name("products", products());
        return name;
    }
    diffattn::AttentionOptions options() const {
        diffattn::AttentionOptions options;
        options.mask = causal ? diffattn::MaskKind::causal : diffattn::MaskKind::none;
        options.threads = threads;
        options.compute = compute;
        return options;
    }
};

struct Inputs {
    Matrix q1, k1, q2, k2, v, out;
    explicit Inputs(const Case& c)
        : q1(bench::random_matrix(c.n, c.kind == Kind::gda ? c.gr * c.d : c.d, 1)),
          k1(bench::random_matrix(c.n, c.d, 2)),
          q2(c.kind == Kind::softmax ? Matrix() : bench::random_matrix(c.n, c.d, 3)),
          k2(c.kind == Kind::softmax ? Matrix() : bench::random_matrix(c.n, c.d, 4)),
          v(bench::random_matrix(c.n, c.value_dim(), 5)),
          out(c.n, c.kind == Kind::gda ? c.gr * c.value_dim() : c.value_dim()) {}
};

constexpr float kLambda = 0.8f;

/// One call of the kernel of `c` on inputs of its own (held by the returned function).
std::function<void()> kernel_call(const Case& c) {
    auto in = std::make_shared<Inputs>(c);
    auto ws = std::make_shared<diffattn::AttentionWorkspace<float>>();
    const diffattn::AttentionOptions options = c.options();
    return [c, in, ws, options] {
        switch (c.kind) {
            case Kind::softmax: diffattn::softmax_attention(in->q1, in->k1, in->v, in->out, options, ws.get()); break;
            case Kind::diff:
                for (Index h = 0; h < c.heads; ++h) {
                    diffattn::diff_attention(in->q1, in->k1, in->q2, in->k2, in->v, kLambda, in->out, options,
                                             ws.get());
                }
                break;
            case Kind::dint:
                diffattn::dint_attention(in->q1, in->k1, in->q2, in->k2, in->v, kLambda, c.integral, in->out, options,
                                         nullptr, ws.get());
                break;
            case Kind::gda:
                diffattn::gda_attention(in->q1, in->k1, in->q2, in->k2, in->v, kLambda, in->out, options, ws.get());
                break;
        }
        benchmark::DoNotOptimize(in->out.data());
    };
}

/// One call of an Eigen SGEMM with the flops of a softmax map of (N, d, mask) on c.threads
/// threads (the chart's GEMM line), and those flops.
std::pair<std::function<void()>, double> gemm_call(const Case& c) {
    auto problem = std::make_shared<bench::GemmProblem>(bench::gemm_edge_for(c.flops()), 1u);
    const int threads = c.threads;
    return {[problem, threads] { problem->multiply(threads); }, problem->flops()};
}

/// Seconds per logit of the online softmax's own work (OnlineSoftmaxState::fold: the max, the exp,
/// the sum and the rescale of a block's accumulator rows of width `value_dim`) on an unmasked tile
/// of kQueryTile x kKeyTile logits: the fastest of 20 runs of 50 folds, measured once per width.
/// After the first fold the tile holds probabilities and the row max stays put, as in a long row.
double fold_seconds_per_logit(Index value_dim) {
    static std::map<Index, double> cache;
    double& seconds = cache[value_dim];
    if (seconds > 0) return seconds;
    using diffattn::kKeyTile;
    using diffattn::kQueryTile;
    diffattn::OnlineSoftmaxState<float> softmax;
    softmax.reserve(kQueryTile, value_dim);
    softmax.reset(kQueryTile, value_dim);
    diffattn::RowMatrix<float> tile = bench::random_matrix(kQueryTile, kKeyTile, 23) * 3.0f;
    const auto visible = [](Index) { return kKeyTile; };
    double fastest = std::numeric_limits<double>::infinity();
    for (int run = 0; run < 20; ++run) {
        fastest = std::min(fastest, bench::time_call([&] {
            for (int f = 0; f < 50; ++f) softmax.fold(0, tile.topLeftCorner(kQueryTile, kKeyTile), false, visible);
            benchmark::DoNotOptimize(tile.data());
        }));
    }
    seconds = fastest / (50.0 * double(kQueryTile * kKeyTile));
    return seconds;
}

/// The counters of a BF16 kernel beside the GFLOPs that run_and_report set:
///   vs_bf16_gemm      GFLOPs over the BF16 GEMM yardstick's mean rate (bf16_gemm_yardstick.hpp)
///   bf16_gemm_GFLOPs  that denominator
///   bound_GFLOPs      softmax and DIFF: the rate the kernel could reach if its products ran at
///                     the rate of their own GEMM (bf16_dot, bf16_amx: the BF16 yardstick; bf16_widened:
///                     SGEMM) and the online softmax took its own time per logit on top
///                     (fold_seconds_per_logit): flops / (flops / products' rate + logits t_fold)
///   bound_share       GFLOPs over bound_GFLOPs
/// and a label saying which products and which BF16 GEMM ran.
void report_bf16(benchmark::State& state, const Case& c) {
    const bench::Bf16GemmRate bf16 = bench::bf16_gemm_rate_equal_flops(c.flops(), c.threads);
    const double rate = double(state.counters["GFLOPs"]);
    state.counters["bf16_gemm_GFLOPs"] = bf16.mean;
    if (bf16.mean > 0) state.counters["vs_bf16_gemm"] = rate / bf16.mean;
    if (c.kind != Kind::dint) {
        // The products' rate: the BF16 GEMM's for the BF16 instructions, the SGEMM's for the widened ones.
        const bool bf16_instructions = c.compute == Compute::bf16_dot || c.compute == Compute::bf16_amx;
        const double products = bf16_instructions ? bf16.mean : double(state.counters["gemm_GFLOPs"]);
        if (products > 0) {
            const double seconds = c.flops() / (products * 1e9) + c.logits() * fold_seconds_per_logit(c.value_dim());
            state.counters["bound_GFLOPs"] = c.flops() / seconds / 1e9;
            state.counters["bound_share"] = rate / (c.flops() / seconds / 1e9);
        }
    }
    state.SetLabel(std::string("products: bf16_") + c.products() + "; " + bench::bf16_gemm_report(bf16));
}

void run_kernel(benchmark::State& state, const Case& c) {
    const std::function<void()> call = kernel_call(c);
    call();  // warm-up: sizes the workspace, faults the pages in
    bench::run_and_report(state, c.flops(), c.threads, call);
    if (c.compute != Compute::scalar) report_bf16(state, c);
}

/// The BF16 GEMM yardstick with the flops of a softmax map of (N, d, mask); vs_gemm: over SGEMM.
void run_bf16_gemm(benchmark::State& state, const Case& c) {
    const Index edge = bench::gemm_edge_for(c.flops());
    const bench::Bf16GemmRate bf16 = bench::bf16_gemm_rate_for_edge(edge, c.threads);
    if (bf16.mean == 0) {
        state.SkipWithError("no BF16 GEMM on this CPU and build");
        return;
    }
    const double flops = bench::bf16_gemm_multiply(edge, c.threads);
    state.counters["edge"] = double(edge);
    state.counters["dnnl_GFLOPs"] = bf16.dnnl_mean;
    state.counters["own_GFLOPs"] = bf16.own_mean;
    bench::run_and_report(state, flops, c.threads, [&] { bench::bf16_gemm_multiply(edge, c.threads); });
    state.SetLabel(bench::bf16_gemm_report(bf16));
}

#if defined(DIFFATTN_X86_TARGETS)
/// Register-only vdpbf16ps work of `flops` flops (2 per multiply-add, 32 multiply-adds an
/// instruction) on `threads` threads: the rate of the BF16 products' instruction, beside fma_work's.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) float dpbf16_chains(long iterations, int seed) {
    constexpr int chains = 12;
    __m512 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(float(seed + c));
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3e813f05), b = (__m512bh)_mm512_set1_epi32(0x3f413d80);
    for (long i = 0; i < iterations; ++i) {
        for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
        __asm__ volatile("" : "+v"(a));  // a new operand each round: the loop is not folded away
    }
    __m512 sum = acc[0];
    for (int c = 1; c < chains; ++c) sum = _mm512_add_ps(sum, acc[c]);
    return _mm512_reduce_add_ps(sum);
}

void dpbf16_work(double flops, int threads) {
    const long iterations = long(flops / (2.0 * 32 * 12) / threads);
    float total = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) reduction(+ : total)
#endif
    for (int t = 0; t < threads; ++t) total += dpbf16_chains(iterations, t);
    benchmark::DoNotOptimize(total);
}
#endif

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
            case Kind::gda:
                out = diffattn::reference::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, kLambda, options);
                break;
        }
        benchmark::DoNotOptimize(out.data());
    };
    bench::run_and_report(state, c.flops(), 1, call);
}

/// Eigen SGEMM with the flops of a softmax map of (N, d, mask): the chart's GEMM line.
void run_gemm(benchmark::State& state, const Case& c) {
    const auto [call, flops] = gemm_call(c);
    state.counters["edge"] = double(bench::gemm_edge_for(c.flops()));
    bench::run_and_report(state, flops, c.threads, call);
}

/// Register-only FMA work of `flops` flops shared by `threads` threads: what the machine's cores
/// give when nothing but arithmetic is asked of them. Its 2-thread speed-up gauges the second core:
/// ~2 when the two virtual CPUs run on two free physical cores, less when they share one, or when
/// other guests share ours.
void fma_work(double flops, int threads) {
    constexpr int chains = 8, lanes = 16;  // independent accumulators: enough to fill the FMA pipes
    const long iterations = long(flops / (2.0 * chains * lanes) / threads);
    float total = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) reduction(+ : total)
#endif
    for (int t = 0; t < threads; ++t) {
        float acc[chains][lanes];
        for (int c = 0; c < chains; ++c) {
            for (int l = 0; l < lanes; ++l) acc[c][l] = float(t + c + l);
        }
        for (long i = 0; i < iterations; ++i) {
            for (int c = 0; c < chains; ++c) {
                for (int l = 0; l < lanes; ++l) acc[c][l] = acc[c][l] * 0.999999f + 1e-7f;
            }
        }
        for (int c = 0; c < chains; ++c) {
            for (int l = 0; l < lanes; ++l) total += acc[c][l];
        }
    }
    benchmark::DoNotOptimize(total);
}

/// One side of a paired benchmark: a kernel case, the GEMM of a softmax case's flops, FMA work
/// of the case's flops on its threads, the BF16 GEMM yardstick of the case's flops, or vdpbf16ps
/// work of its flops (dpbf16_work).
struct Side {
    enum class Source { kernel, gemm, fma, bf16_gemm, dpbf16 };
    Case c;
    Source source = Source::kernel;
};

/// A paired benchmark: the two sides' calls alternate (which one goes first alternates too), each
/// call timed on its own, so both sides meet the same machine, call for call. Counters:
///   ratio       median over the pairs of (time(first) / flops(first)) / (time(second) / flops(second)),
///               the time per useful flop of the first over the second's
///   ratio_best  the same from each side's fastest call
///   pairs       pairs timed
/// Other load on a shared machine comes and goes over seconds to minutes: it slows both calls of a
/// pair alike, so their ratio keeps what the two sides' own benchmarks, run minutes apart, lose.
/// With `gauge`, each round also times register-only FMA work (fma_work) of each side's flops on
/// that side's threads, in the same alternation, so that the round measures the machine's own ratio
/// too (for a 2-thread speed-up: how much of a second core the machine gave in that round):
///   gauge                 median over the rounds of the FMA work's ratio; gauge_best from its fastest calls
///   ratio_vs_gauge        median over the rounds of ratio / the gauge's ratio in the same round
///   ratio_vs_gauge_best   ratio_best / gauge_best
void run_pair(benchmark::State& state, const Side& first, const Side& second, bool gauge = false) {
    const auto make = [](const Side& side) -> std::pair<std::function<void()>, double> {
        switch (side.source) {
            case Side::Source::gemm: return gemm_call(side.c);
            case Side::Source::fma: {
                const double flops = side.c.flops();
                const int threads = side.c.threads;
                return {[flops, threads] { fma_work(flops, threads); }, flops};
            }
            case Side::Source::bf16_gemm: {
                const Index edge = bench::gemm_edge_for(side.c.flops());
                const int threads = side.c.threads;
                const double flops = bench::bf16_gemm_multiply(edge, threads);
                return {[edge, threads] { bench::bf16_gemm_multiply(edge, threads); }, flops};
            }
            case Side::Source::dpbf16: {
                const double flops = side.c.flops();
                const int threads = side.c.threads;
#if defined(DIFFATTN_X86_TARGETS)
                return {[flops, threads] { dpbf16_work(flops, threads); }, flops};
#else
                return {[] {}, flops};
#endif
            }
            case Side::Source::kernel: break;
        }
        return {kernel_call(side.c), side.c.flops()};
    };
    // The calls of a round: first, second, then (gauge) the FMA work of first and of second.
    std::vector<std::pair<std::function<void()>, double>> calls = {make(first), make(second)};
    if (gauge) {
        calls.push_back(make({first.c, Side::Source::fma}));
        calls.push_back(make({second.c, Side::Source::fma}));
    }
    std::vector<std::function<void()>> bodies;
    for (const auto& call : calls) {
        call.first();  // warm-up
        bodies.push_back(call.first);
    }
    const std::size_t count = calls.size();
    const std::vector<std::vector<double>> times = bench::time_in_turns(state, bodies);
    // Time per flop of call `a` over call `a + 1`'s.
    const auto ratio_of = [&](const std::vector<double>& t, std::size_t a) {
        return (t[a] / calls[a].second) / (t[a + 1] / calls[a + 1].second);
    };
    std::vector<double> seconds(count), best(count, std::numeric_limits<double>::infinity());
    std::vector<double> ratios, gauge_ratios, vs_gauge;
    for (std::size_t round = 0; round < times[0].size(); ++round) {
        for (std::size_t c = 0; c < count; ++c) {
            seconds[c] = times[c][round];
            best[c] = std::min(best[c], seconds[c]);
        }
        ratios.push_back(ratio_of(seconds, 0));
        if (gauge) {
            gauge_ratios.push_back(ratio_of(seconds, 2));
            vs_gauge.push_back(ratios.back() / gauge_ratios.back());
        }
    }
    state.counters["ratio"] = bench::median(ratios);
    state.counters["ratio_best"] = ratio_of(best, 0);
    state.counters["pairs"] = double(ratios.size());
    if (gauge) {
        state.counters["gauge"] = bench::median(gauge_ratios);
        state.counters["gauge_best"] = ratio_of(best, 2);
        state.counters["ratio_vs_gauge"] = bench::median(vs_gauge);
        state.counters["ratio_vs_gauge_best"] = ratio_of(best, 0) / ratio_of(best, 2);
    }
}

/// The pairs behind issue 5's ratio targets, at N 1024 to 4096 (above, one call takes long enough
/// that a pair sees few calls), named pair/what:<what>/N:<N>/d:<d>/mask:<mask> (d and mask of the
/// first side):
///   scaling_<family>       the kernel on 1 thread vs on 2 (ratio = the 2-thread speed-up), for the
///                          headline kernels, the GEMM, and register-only FMA work (fma_work: the
///                          machine's own 2-core speed-up, a gauge for the others); the kernels' and
///                          the GEMM's also carry the gauge in every round (run_pair's ratio_vs_gauge)
///   gemm_vs_softmax        SGEMM of equal flops vs softmax d128, 1 thread (ratio = vs_gemm)
///   gemm_vs_softmax_2thr   1-thread SGEMM vs softmax d128 on 2 threads (ratio = the 2-thread rate
///                          over the 1-thread SGEMM rate)
///   diff_vs_softmax        DIFF d vs softmax d128 (ratio = DIFF's time per useful flop over softmax's)
//   gda_vs_diff            one GDA group of gr = 4 signal heads vs 4 DIFF heads (the same signal
//                          heads), same N, d, mask (ratio = GDA's time per useful flop over DIFF's;
//                          times GDA's flops over DIFF's, (gr + 1) / (2 gr), it is the time ratio)
///   dint_<mode>_vs_diff    DINT vs DIFF, same N, d, mask (ratio = the time ratio)
void register_pairs(const bench::BenchArgs& args, const std::vector<Index>& sizes) {
    const auto make = [](Kind kind, Index n, Index d, bool causal, int threads,
                         DintIntegral integral = DintIntegral::causal_softmax) {
        return Case{kind, integral, n, d, causal, threads};
    };
    // gauge: the 2-thread speed-ups also time the FMA gauge in every round (run_pair); a round then
    // takes about twice as long, so these run 4x the minimum time to keep enough rounds.
    const auto add = [&](const std::string& what, const Side& first, const Side& second, bool gauge = false) {
        Name name("pair");
        name("what", what)("N", first.c.n)("d", first.c.d)("mask", first.c.causal ? "causal" : "none");
        benchmark::internal::Benchmark* b =
            bench::add(args, name, [first, second, gauge](benchmark::State& s) { run_pair(s, first, second, gauge); });
        if (gauge) b->MinTime(4 * args.min_time());
    };
    using Source = Side::Source;
    for (Index n : sizes) {
        if (n < 1024 || n > 4096) continue;
        for (bool causal : {true, false}) {
            const Case softmax1 = make(Kind::softmax, n, 128, causal, 1), softmax2 = make(Kind::softmax, n, 128, causal, 2);
            add("scaling_softmax", {softmax1}, {softmax2}, true);
            add("gemm_vs_softmax", {softmax1, Source::gemm}, {softmax1});
            add("gemm_vs_softmax_2thr", {softmax1, Source::gemm}, {softmax2});
            for (Index d : {64, 128}) add("diff_vs_softmax", {make(Kind::diff, n, d, causal, 1)}, {softmax1});
            Case gda = make(Kind::gda, n, 128, causal, 1), heads = make(Kind::diff, n, 128, causal, 1);
            heads.heads = gda.gr;  // the same signal heads as DIFF heads
            add("gda_vs_diff", {gda}, {heads});
        }
        add("scaling_gemm", {make(Kind::softmax, n, 128, true, 1), Source::gemm},
            {make(Kind::softmax, n, 128, true, 2), Source::gemm}, true);
        add("scaling_fma", {make(Kind::softmax, n, 128, true, 1), Source::fma},
            {make(Kind::softmax, n, 128, true, 2), Source::fma});
        add("scaling_diff", {make(Kind::diff, n, 64, true, 1)}, {make(Kind::diff, n, 64, true, 2)}, true);
        for (auto [integral, causal] : {std::pair{DintIntegral::causal_softmax, true},
                                        std::pair{DintIntegral::causal_mean, true},
                                        std::pair{DintIntegral::global_mean, false}}) {
            const std::string mode = diffattn::to_string(integral);
            add("scaling_dint_" + mode, {make(Kind::dint, n, 64, causal, 1, integral)},
                {make(Kind::dint, n, 64, causal, 2, integral)}, true);
            for (Index d : {64, 128}) {
                add("dint_" + mode + "_vs_diff", {make(Kind::dint, n, d, causal, 1, integral)},
                    {make(Kind::diff, n, d, causal, 1)});
            }
        }
    }
}

/// The BF16 products (docs/math.md §7.1; docs/benchmarks.md, "BF16 products") at N 1024 to 4096,
/// causal (global_mean: none), d 64 and 128, for each way this CPU multiplies in BF16 (products
/// widened; dot where it has AVX512-BF16; amx where it has AMX tiles), on 1 and 2 threads:
///   <family>_bf16/N/d/mask/threads/products:<p>   softmax, DIFF and every DINT mode (run_kernel:
///                                                 vs_bf16_gemm, bound_share)
///   bf16_gemm/N/d/mask/threads                    the BF16 GEMM yardstick of a softmax map's flops
/// and the pairs (ratio as run_pair's; "_2thr": both sides on 2 threads):
///   product_rate[_2thr]                  FMA work vs vdpbf16ps work: vdpbf16ps's flop rate over the FMA's
///   bf16_<p>_speedup_<family>[_2thr]     the float kernel vs the BF16 one: the BF16 speed-up
///   bf16_gemm_vs_<family>_<p>[_2thr]     the BF16 GEMM vs the BF16 kernel: the kernel's rate over the GEMM's
///   dint_<mode>_vs_diff_bf16_<p>         DINT vs DIFF, both BF16, 1 thread: the time ratio
void register_bf16(const bench::BenchArgs& args, const std::vector<Index>& sizes) {
    const std::vector<Compute> products = diffattn::bf16_paths_here();
    const auto make = [](Kind kind, Index n, Index d, bool causal, int threads, Compute compute,
                         DintIntegral integral = DintIntegral::causal_softmax) {
        Case c{kind, integral, n, d, causal, threads};
        c.compute = compute;
        return c;
    };
    const auto add_pair = [&](const std::string& what, const Side& first, const Side& second) {
        Name name("pair");
        name("what", what + (first.c.threads > 1 ? "_2thr" : ""))("N", first.c.n)("d", first.c.d)(
            "mask", first.c.causal ? "causal" : "none");
        bench::add(args, name, [first, second](benchmark::State& s) { run_pair(s, first, second); });
    };
    using Source = Side::Source;
    for (Index n : sizes) {
        if (n < 1024 || n > 4096) continue;
        for (int threads : {1, 2}) {
            if (n == 1024 && diffattn::bf16_dot_available()) {
                add_pair("product_rate", {make(Kind::softmax, n, 128, true, threads, Compute::scalar), Source::fma},
                         {make(Kind::softmax, n, 128, true, threads, Compute::scalar), Source::dpbf16});
            }
            for (Index d : {64, 128}) {
                const Case gemm = make(Kind::softmax, n, d, true, threads, Compute::scalar);
                bench::add(args, gemm.name("bf16_gemm"), [gemm](benchmark::State& s) { run_bf16_gemm(s, gemm); });
                for (Compute compute : products) {
                    const std::string p = Case::products_of(compute);
                    for (Kind kind : {Kind::softmax, Kind::diff}) {
                        const Case bf16 = make(kind, n, d, true, threads, compute);
                        bench::add(args, bf16.name(bf16.family()), [bf16](benchmark::State& s) { run_kernel(s, bf16); });
                        const std::string family = kind == Kind::softmax ? "softmax" : "diff";
                        add_pair("bf16_" + p + "_speedup_" + family, {make(kind, n, d, true, threads, Compute::scalar)},
                                 {bf16});
                        add_pair("bf16_gemm_vs_" + family + "_" + p, {bf16, Source::bf16_gemm}, {bf16});
                    }
                    for (auto [integral, causal] : {std::pair{DintIntegral::causal_softmax, true},
                                                    std::pair{DintIntegral::causal_mean, true},
                                                    std::pair{DintIntegral::global_mean, false}}) {
                        const Case dint = make(Kind::dint, n, d, causal, threads, compute, integral);
                        bench::add(args, dint.name(dint.family()), [dint](benchmark::State& s) { run_kernel(s, dint); });
                        if (threads == 1) {
                            add_pair("dint_" + std::string(diffattn::to_string(integral)) + "_vs_diff_bf16_" + p, {dint},
                                     {make(Kind::diff, n, d, causal, 1, compute)});
                        }
                    }
                }
            }
        }
    }
}

/// One projection of a prefill: out [N x out] = x [N x in] W^T with W stored as `format`, under
/// `compute`, with the run state's panels (WeightPanels, room for BF16 operands). Counters as
/// run_and_report's (GFLOPs, vs_gemm), and for BF16 products vs_bf16_gemm and bf16_gemm_GFLOPs
/// (report_bf16's); the label names the path taken.
void run_linear(benchmark::State& state, Index n, Index in, Index out, diffattn::WeightFormat format, int threads,
                Compute compute) {
    const diffattn::RowMatrix<float> x = bench::random_matrix(n, in, 31);
    diffattn::LinearWeight<float> w(out, in, format);
    w = bench::random_matrix(out, in, 32, 0.05f);
    diffattn::RowMatrix<float> y(n, out);
    const diffattn::WeightPanels panels(threads, sizeof(float), compute != Compute::scalar);
    diffattn::ExecutionContext context{threads, 0.0};
    context.compute = compute;
    context.panels = &panels;
    const auto call = [&] {
        diffattn::linear<float>(x, w, y, context);
        benchmark::DoNotOptimize(y.data());
    };
    call();  // warm-up: faults the pages in
    const double flops = 2.0 * double(n) * double(in) * double(out);
    bench::run_and_report(state, flops, threads, call);
    std::string label = std::string("products: ") + diffattn::to_string(diffattn::product_path(compute));
    if (compute != Compute::scalar) {
        const bench::Bf16GemmRate bf16 = bench::bf16_gemm_rate_equal_flops(flops, threads);
        state.counters["bf16_gemm_GFLOPs"] = bf16.mean;
        if (bf16.mean > 0) state.counters["vs_bf16_gemm"] = double(state.counters["GFLOPs"]) / bf16.mean;
        label += "; " + bench::bf16_gemm_report(bf16);
    }
    state.SetLabel(label);
}

/// The projections of a Motif-2.6B prefill of 512 tokens: 2048 -> 8192 (the SwiGLU's gate and up)
/// and 8192 -> 2048 (its down), f32 and bf16 weights, on 1 and 2 threads, in float and with BF16
/// products by each path this CPU runs (run_linear).
void register_linear(const bench::BenchArgs& args) {
    std::vector<Compute> computes{Compute::scalar};
    for (Compute path : diffattn::bf16_paths_here()) computes.push_back(path);
    for (auto [in, out] : {std::pair<Index, Index>{2048, 8192}, std::pair<Index, Index>{8192, 2048}}) {
        for (diffattn::WeightFormat format : {diffattn::WeightFormat::f32, diffattn::WeightFormat::bf16}) {
            for (int threads : {1, 2}) {
                for (Compute compute : computes) {
                    Name name("linear");
                    name("N", 512)("in", in)("out", out)("weights", diffattn::to_string(format))("threads", threads)(
                        "compute", diffattn::to_string(compute));
                    bench::add(args, name, [in = in, out = out, format, threads, compute](benchmark::State& s) {
                        run_linear(s, 512, in, out, format, threads, compute);
                    });
                }
            }
        }
    }
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
        const bool headline = (c.kind == Kind::softmax && c.d == 128) ||
                              (c.kind != Kind::softmax && c.kind != Kind::gda && c.d == 64);
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
                c.kind = Kind::gda;  // Motif-2-12.7B's ratio: 4 signal heads per noise head
                cases.push_back(c);
                c.kind = Kind::dint;
                for (DintIntegral integral :
                     {DintIntegral::causal_softmax, DintIntegral::causal_mean, DintIntegral::global_mean}) {
                    if (integral == DintIntegral::global_mean && causal) continue;  // needs mask none (docs/math.md §2.3)
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
    register_pairs(args, sizes);
    register_bf16(args, sizes);
    register_linear(args);
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args);
    return bench::run_main(argc, argv, args);
}
