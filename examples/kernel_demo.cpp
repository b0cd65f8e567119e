// diffattn-kernel-demo: runs every single-head kernel on built-in random inputs, checks each
// against the plain reference, and prints results, timings and the vector ISA it was compiled for.
//
//   diffattn-kernel-demo [--n N] [--head-dim D] [--seed S]
#include <diffattn/core/isa.hpp>
#include <diffattn/diffattn.hpp>

#include "cli_support.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <ostream>
#include <random>
#include <string>

namespace {

using diffattn::Index;
using Matrix = diffattn::RowMatrix<float>;

Matrix random_matrix(Index rows, Index cols, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

/// Best wall time of a few runs, in seconds.
double best_time(const std::function<void()>& run) {
    double best = 1e300;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

void print_help(std::ostream& out) {
    out << "diffattn-kernel-demo: single-head DIFF / DINT kernels on random inputs, each against the reference\n"
           "usage: diffattn-kernel-demo [--n N] [--head-dim D] [--seed S]\n"
           "  --n N           tokens (queries = keys), 1 to 65536 (default 1024)\n"
           "  --head-dim D    d of Q and K (V has 2d), 1 to 1024 (default 64)\n"
           "  --seed S        the inputs' seed (default 42)\n"
           "Exit status: 0 on success, 2 for any error, before anything is computed.\n";
}

int run_demo(int argc, char** argv) {
    Index n = 1024, d = 64;
    unsigned seed = 42;
    cli::Flags flags(argc, argv, print_help);
    while (flags.next()) {
        const std::string& flag = flags.flag();
        if (flag == "--n") n = cli::parse_integer("--n", flags.value(), 1, Index{1} << 16);
        else if (flag == "--head-dim") d = cli::parse_integer("--head-dim", flags.value(), 1, 1024);
        else if (flag == "--seed") seed = static_cast<unsigned>(cli::parse_integer(flag, flags.value(), 0, 0xffffffff));
        else throw cli::UsageError{"unknown argument \"" + flag + "\""};
    }
    // Q1, Q2, K1, K2 [n x d], V and the output [n x 2d], the workspace's tiles: about 16 n d floats.
    diffattn::require_memory<diffattn::ShapeError>(16.0L * n * d * sizeof(float), "--n ", n, " with --head-dim ", d);

    std::mt19937 rng(seed);
    // One differential head of the DIFF Transformer layout: Q1, Q2, K1, K2 of width d, V of width 2d.
    const Matrix q1 = random_matrix(n, d, rng), k1 = random_matrix(n, d, rng);
    const Matrix q2 = random_matrix(n, d, rng), k2 = random_matrix(n, d, rng);
    const Matrix v = random_matrix(n, 2 * d, rng);
    const float lambda = 0.8f - 0.6f * std::exp(-0.3f * 1);  // lambda_init at depth 1 (docs/math.md §2.5)
    diffattn::AttentionOptions causal;                         // causal mask, scale 1/sqrt(d)
    diffattn::AttentionOptions bidirectional;
    bidirectional.mask = diffattn::MaskKind::none;
    diffattn::AttentionWorkspace<float> ws(n, n, d, 2 * d);
    Matrix out(n, 2 * d);

    // The reference materialises N x N maps; check on the first rows/keys only when n is large.
    const Index check = std::min<Index>(n, 512);
    const Matrix q1c = q1.topRows(check), k1c = k1.topRows(check), q2c = q2.topRows(check),
                 k2c = k2.topRows(check), vc = v.topRows(check);

    std::printf("diffattn %s kernel demo: N = S = %ld, head dim d = %ld, value dim 2d = %ld, lambda = %.4f, seed %u\n",
                diffattn::version, static_cast<long>(n), static_cast<long>(d), static_cast<long>(2 * d),
                lambda, seed);
    // The kernels' speed is the ISA's: say which one, and how to get the machine's own.
    std::printf("kernels compiled for %s%s\n", diffattn::compiled_isa(),
                std::string(diffattn::compiled_isa()) == "SSE2"
                    ? " (generic x86-64; configure with -DDIFFATTN_NATIVE=ON, i.e. link diffattn::native, for this machine's)"
                    : "");
    std::printf("%-28s %12s %12s %10s %22s\n", "kernel", "out[0,0]", "out[N-1,0]", "ms/call", "max |fast - reference|");

    const auto show = [&](const char* name, double flops_maps, const std::function<void(Matrix&)>& fast,
                          const std::function<Matrix()>& reference_small,
                          const std::function<void(Matrix&)>& fast_small) {
        const double seconds = best_time([&] { fast(out); });
        Matrix small_out(check, out.cols());
        fast_small(small_out);
        const float error = (small_out - reference_small()).cwiseAbs().maxCoeff();
        std::printf("%-28s %12.6f %12.6f %10.3f %22.3g   (%.1f GFLOP/s)\n", name, out(0, 0), out(n - 1, 0),
                    seconds * 1e3, error, flops_maps / seconds / 1e9);
    };
    const double causal_map_flops = 2.0 * n * n * (d + 2 * d) / 2;

    show("softmax (Q1,K1,V) causal", causal_map_flops,
         [&](Matrix& o) { diffattn::softmax_attention(q1, k1, v, o, causal, &ws); },
         [&] { return diffattn::reference::softmax_attention(q1c, k1c, vc, causal); },
         [&](Matrix& o) { diffattn::softmax_attention(q1c, k1c, vc, o, causal, &ws); });
    show("diff causal", 2 * causal_map_flops,
         [&](Matrix& o) { diffattn::diff_attention(q1, k1, q2, k2, v, lambda, o, causal, &ws); },
         [&] { return diffattn::reference::diff_attention(q1c, k1c, q2c, k2c, vc, lambda, causal); },
         [&](Matrix& o) { diffattn::diff_attention(q1c, k1c, q2c, k2c, vc, lambda, o, causal, &ws); });
    const struct {
        const char* name;
        diffattn::DintIntegral integral;
        const diffattn::AttentionOptions* options;
    } dint_modes[] = {{"dint causal_softmax", diffattn::DintIntegral::causal_softmax, &causal},
                      {"dint causal_mean", diffattn::DintIntegral::causal_mean, &causal},
                      {"dint global_mean (no mask)", diffattn::DintIntegral::global_mean, &bidirectional}};
    for (const auto& mode : dint_modes) {
        const double flops = mode.options == &causal ? 2 * causal_map_flops : 4 * causal_map_flops;
        show(mode.name, flops,
             [&](Matrix& o) { diffattn::dint_attention(q1, k1, q2, k2, v, lambda, mode.integral, o, *mode.options, nullptr, &ws); },
             [&] { return diffattn::reference::dint_attention(q1c, k1c, q2c, k2c, vc, lambda, mode.integral, *mode.options); },
             [&](Matrix& o) { diffattn::dint_attention(q1c, k1c, q2c, k2c, vc, lambda, mode.integral, o, *mode.options, nullptr, &ws); });
    }
    std::printf("(reference checked on the first %ld tokens; GFLOP/s counts QK^T + PV of each map)\n",
                static_cast<long>(check));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("diffattn-kernel-demo", [&] { return run_demo(argc, argv); });
}
