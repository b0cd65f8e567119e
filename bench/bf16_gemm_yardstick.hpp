// The BF16 GEMM yardstick of the compute benchmarks (header-only, bench-local), beside the SGEMM
// one (gemm_yardstick.hpp): C = A B for square A, B stored as BF16 (row-major) and C in fp32, by
//   dnnl  oneDNN's matmul (builds that found libdnnl-dev: DIFFATTN_BENCH_DNNL), which picks its
//         kernel at run time (AMX tiles where the OS grants them, else vdpbf16ps);
//   own   diffattn's vdpbf16ps products (kernels/bf16_dot.hpp), where the CPU has AVX512-BF16:
//         B turned into pair panels, then blocks of 256 k x 256 columns, T row panels on T threads.
// Both are measured for each (edge, threads), the mean over >= 0.2 s each, and the faster is the
// yardstick; bf16_gemm_report() says which ran and at what rates.
#pragma once

#include "bench_timing.hpp"
#include "gemm_yardstick.hpp"

#include <diffattn/kernels/bf16_dot.hpp>
#include <diffattn/kernels/bf16_rounding.hpp>
#include <diffattn/kernels/packed_tiles.hpp>

#include <benchmark/benchmark.h>

#if defined(DIFFATTN_BENCH_DNNL)
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace bench {

/// An e x e x e GEMM of BF16 operands: a, b row-major BF16 bits (random values in [-1, 1]), c fp32.
struct Bf16GemmOperands {
    Index e;
    std::vector<std::uint16_t> a, b;
    std::vector<float> c;
    explicit Bf16GemmOperands(Index edge) : e(edge), a(edge * edge), b(edge * edge), c(edge * edge) {
        std::mt19937 rng(17);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (auto* m : {&a, &b}) {
            for (auto& x : *m) x = diffattn::detail::bf16_bits(uniform(rng));
        }
    }
    double flops() const { return 2.0 * double(e) * double(e) * double(e); }
};

#if defined(DIFFATTN_X86_TARGETS)
/// diffattn's own BF16 GEMM: A's BF16 rows are already the products' A operand; B is turned into
/// pair panels (in parallel, by pair rows), then each thread multiplies its panel of C's rows in
/// blocks of kKc entries of k and kNc columns (the B block stays in L2, a 64-column panel of it in L1).
class OwnBf16Gemm {
public:
    static constexpr Index kKc = 256, kNc = 256;
    explicit OwnBf16Gemm(Index e) : panels_(static_cast<std::size_t>((e + 1) / 2 * ((e + 15) / 16 * 16))) {}

    void multiply(Bf16GemmOperands& m, int threads) {
        namespace dot = diffattn::detail::bf16_dot;
        const Index e = m.e, pairs = dot::words_of(e), ldb = dot::panel_columns(e), lda = pairs;
        const auto* a = reinterpret_cast<const dot::Word*>(m.a.data());
        const int team = std::max(threads, 1);
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
        {
#ifdef _OPENMP
            const int t = omp_get_thread_num();
#else
            const int t = 0;
#endif
            const Index pair_rows = (pairs + team - 1) / team, p_begin = std::min(pairs, t * pair_rows);
            const Index p_count = std::min(pairs, p_begin + pair_rows) - p_begin;
            if (p_count > 0) {
                dot::pack_values(m.b.data() + 2 * p_begin * e, std::min(e - 2 * p_begin, 2 * p_count), e, e,
                                 panels_.data() + p_begin * ldb, ldb);
            }
#ifdef _OPENMP
#pragma omp barrier
#endif
            const Index rows = (e + team - 1) / team, r_begin = std::min(e, t * rows);
            const Index r_count = std::min(e, r_begin + rows) - r_begin;
            for (Index n0 = 0; n0 < e && r_count > 0; n0 += kNc) {
                for (Index p0 = 0; p0 < pairs; p0 += kKc / 2) {
                    dot::multiply(a + r_begin * lda + p0, lda, r_count, panels_.data() + p0 * ldb + n0, ldb,
                                  std::min(kNc, e - n0), std::min(kKc / 2, pairs - p0), m.c.data() + r_begin * e + n0,
                                  e, 1.0f, p0 > 0);
                }
            }
        }
        benchmark::DoNotOptimize(m.c.data());
    }

private:
    std::vector<std::uint32_t> panels_;  // B's pair panels
};
#endif

#if defined(DIFFATTN_BENCH_DNNL)
/// oneDNN's matmul of the operands (one primitive per edge; threads set per call).
class DnnlBf16Gemm {
public:
    explicit DnnlBf16Gemm(Bf16GemmOperands& m) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
        using tag = dnnl::memory::format_tag;
        using dt = dnnl::memory::data_type;
        const dnnl::memory::dims dims{m.e, m.e};
        const dnnl::memory::desc a(dims, dt::bf16, tag::ab), b(dims, dt::bf16, tag::ab), c(dims, dt::f32, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine_);
        implementation_ = pd.impl_info_str();
        matmul_ = dnnl::matmul(pd);
        a_ = dnnl::memory(a, engine_, m.a.data());
        b_ = dnnl::memory(b, engine_, m.b.data());
        c_ = dnnl::memory(c, engine_, m.c.data());
    }
    void multiply(int threads) {
#ifdef _OPENMP
        omp_set_num_threads(std::max(threads, 1));
#endif
        matmul_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
        stream_.wait();
    }
    const std::string& implementation() const { return implementation_; }

private:
    dnnl::engine engine_;
    dnnl::stream stream_;
    dnnl::matmul matmul_;
    dnnl::memory a_, b_, c_;
    std::string implementation_;
};
#endif

/// Which GEMM a yardstick rate is of.
struct Bf16GemmRate {
    double mean = 0;           ///< GFLOP/s over >= 0.2 s (the faster of the candidates)
    double best = 0;           ///< the chosen GEMM's fastest product so far in this process
    std::string which;         ///< "oneDNN <implementation>" or "own vdpbf16ps"
    double dnnl_mean = 0;      ///< 0: not built or not measured
    double own_mean = 0;       ///< 0: no AVX512-BF16
};

/// One product of the GEMM `which` (0: oneDNN, 1: own) on `threads` threads.
class Bf16Gemms {
public:
    explicit Bf16Gemms(Index e) : operands_(e) {
#if defined(DIFFATTN_BENCH_DNNL)
        dnnl_ = std::make_unique<DnnlBf16Gemm>(operands_);
#endif
#if defined(DIFFATTN_X86_TARGETS)
        if (diffattn::bf16_dot_available()) own_ = std::make_unique<OwnBf16Gemm>(e);
#endif
    }
    bool has(int which) const { return which == 0 ? dnnl_ != nullptr : own_ != nullptr; }
    void multiply(int which, int threads) {
#if defined(DIFFATTN_BENCH_DNNL)
        if (which == 0) dnnl_->multiply(threads);
#endif
#if defined(DIFFATTN_X86_TARGETS)
        if (which == 1) own_->multiply(operands_, threads);
#endif
        (void)which, (void)threads;
    }
    std::string name(int which) const {
#if defined(DIFFATTN_BENCH_DNNL)
        if (which == 0) return "oneDNN " + dnnl_->implementation();
#endif
        return which == 0 ? "oneDNN" : "own vdpbf16ps";
    }
    double flops() const { return operands_.flops(); }

private:
    Bf16GemmOperands operands_;
#if defined(DIFFATTN_BENCH_DNNL)
    std::unique_ptr<DnnlBf16Gemm> dnnl_;
#else
    std::unique_ptr<int> dnnl_;
#endif
#if defined(DIFFATTN_X86_TARGETS)
    std::unique_ptr<OwnBf16Gemm> own_;
#else
    std::unique_ptr<int> own_;
#endif
};

/// The BF16 GEMMs of edge e, kept for later uses.
inline Bf16Gemms& bf16_gemms_for_edge(Index e) {
    static std::map<Index, std::unique_ptr<Bf16Gemms>> gemms;
    auto& slot = gemms[e];
    if (!slot) slot = std::make_unique<Bf16Gemms>(e);
    return *slot;
}

/// The BF16 yardstick of an e x e x e GEMM on `threads` threads: each candidate's mean (measured
/// once per edge and thread count, after a warm-up), the faster one's, and its fastest product
/// over every call of the process (each call times a few more). No candidate: all zero.
inline std::map<std::pair<Index, int>, int>& bf16_gemm_choices() {
    static std::map<std::pair<Index, int>, int> chosen;  // (edge, threads) -> 0 oneDNN, 1 own
    return chosen;
}
inline Bf16GemmRate bf16_gemm_rate_for_edge(Index e, int threads) {
    static std::map<std::pair<Index, int>, Bf16GemmRate> cache;
    std::map<std::pair<Index, int>, int>& chosen = bf16_gemm_choices();
    Bf16Gemms& gemms = bf16_gemms_for_edge(e);
    Bf16GemmRate& rate = cache[std::make_pair(e, threads)];
    const auto timed_runs = [&](int which, double min_seconds, int min_runs, double& best) {
        int runs = 0;
        double fastest = std::numeric_limits<double>::infinity();
        const auto start = Clock::now();
        while (runs < min_runs || (seconds_since(start) < min_seconds && runs < 1000)) {
            fastest = std::min(fastest, time_call([&] { gemms.multiply(which, threads); }));
            ++runs;
        }
        best = std::max(best, gemms.flops() / fastest / 1e9);
        return gemms.flops() * runs / seconds_since(start) / 1e9;
    };
    const auto key = std::make_pair(e, threads);
    if (rate.mean == 0 && (gemms.has(0) || gemms.has(1))) {
        double bests[2] = {0, 0}, means[2] = {0, 0};
        for (int which : {0, 1}) {
            if (!gemms.has(which)) continue;
            gemms.multiply(which, threads);  // warm-up
            means[which] = timed_runs(which, 0.2, 2, bests[which]);
        }
        const int faster = means[0] >= means[1] ? 0 : 1;
        chosen[key] = faster;
        rate = {means[faster], bests[faster], gemms.name(faster), means[0], means[1]};
    } else if (rate.mean > 0) {
        timed_runs(chosen[key], 0.05, 1, rate.best);
    }
    return rate;
}

/// One product of the yardstick of edge e on `threads` threads (what bf16_gemm_rate_for_edge chose),
/// and its flops; nothing (0 flops) where no BF16 GEMM runs.
inline double bf16_gemm_multiply(Index e, int threads) {
    const auto key = std::make_pair(e, threads);
    auto& choices = bf16_gemm_choices();
    if (choices.find(key) == choices.end() && bf16_gemm_rate_for_edge(e, threads).mean == 0) return 0;
    Bf16Gemms& gemms = bf16_gemms_for_edge(e);
    gemms.multiply(choices[key], threads);
    return gemms.flops();
}

/// The yardstick of a benchmark doing `flops` useful flops: the BF16 GEMM of equal flops.
inline Bf16GemmRate bf16_gemm_rate_equal_flops(double flops, int threads) {
    return bf16_gemm_rate_for_edge(gemm_edge_for(flops), threads);
}

/// One line on which BF16 GEMM is the yardstick, and the candidates' rates.
inline std::string bf16_gemm_report(const Bf16GemmRate& r) {
    std::ostringstream s;
    s << "bf16 gemm: " << r.which << " (oneDNN " << r.dnnl_mean << " GFLOP/s, own vdpbf16ps " << r.own_mean
      << " GFLOP/s; 0 = not available)";
    return s.str();
}

}  // namespace bench
