// Layer and model benchmarks: model forward tokens/s, one attention module and one decoder layer,
// the model's matrix products alone, and Shared DIFF's factored projection against DIFF's dense
// one. (Decode tokens/s: bench_decode.) docs/benchmarks.md explains how to read the output.
//
// Models (seeded weights, float), kinds softmax, diff, dint (causal_softmax), shared_diff
// (factored projections, rank r):
//   small  D 256,  H 4, L 4, F 683,  V 512,   shared_diff r 8    (bench_decode's model)
//   mid    D 1024, H 8, L 4, F 2816, V 8192,  shared_diff r 16
// (diff, dint, shared_diff: d = D / H / 2 per map, value width 2d; softmax: d = D / H.)
//
// Names, all wall-clock timed:
//   model_forward/config:<c>/kind:<k>/N:<N>/threads:<T>   DecoderModel::forward of N tokens with
//       make_state(N, T); counters tokens/s, GFLOPs (all products + attention's useful flops,
//       below), vs_gemm
//   attention/config:<c>/kind:<k>/N:<N>/threads:<T>       layer 0's MultiHeadAttention::forward
//   layer/config:<c>/kind:<k>/N:<N>/threads:<T>           layer 0's DecoderLayer::forward
//   model_matmuls/config:<c>/kind:<k>/N:<N>/threads:1     every matrix product of one model forward
//       (q, k, v, out projections - Shared DIFF through its factors -, SwiGLU gate, up, down of
//       every layer, lm_head) run as the same library calls (linear(), SharedDiffFactors::project)
//       on buffers of the same shapes, without the rest of the forward. The model has no timing
//       hook inside forward(), so this stands in for "the time the forward spends in its products":
//       GFLOPs / vs_gemm give their rate against Eigen SGEMM, and its time over model_forward's is
//       their share of the forward. One thread: the library's products are single-threaded
//       (EIGEN_DONT_PARALLELIZE; threads parallelise attention heads).
//   proj_diff/N:<N>/D:<D>/H:<H>                           DIFF's q and k projections, X Wq^T and
//       X Wk^T with Wq, Wk [D x D] (no grouping)
//   proj_shared_diff/N:<N>/D:<D>/H:<H>/r:<r>              Shared DIFF's factored projection of
//       the same Q and K maps (SharedDiffFactors::project), r below and at d/2
//
// Flags (besides Google Benchmark's): --quick (N 256, short runs), --max-n=N.
#include "bench_common.hpp"

#include <diffattn/diffattn.hpp>
#include <diffattn/model/decoder_model.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using bench::Index;
using bench::Matrix;
using bench::Name;
using namespace diffattn;

struct ModelSpec {
    std::string config;  // "small" | "mid"
    AttentionKind kind = AttentionKind::diff;

    ModelConfig model_config() const {
        ModelConfig c;
        c.attention = kind;
        c.dint_integral = DintIntegral::causal_softmax;
        if (config == "small") {
            c.hidden_size = 256;
            c.num_attention_heads = 4;
            c.num_hidden_layers = 4;
            c.intermediate_size = 683;
            c.vocab_size = 512;
            c.shared_diff_rank = 8;
        } else {
            c.hidden_size = 1024;
            c.num_attention_heads = 8;
            c.num_hidden_layers = 4;
            c.intermediate_size = 2816;
            c.vocab_size = 8192;
            c.shared_diff_rank = 16;
        }
        return c;
    }
    std::string kind_name() const { return to_string(kind); }
};

/// One model at a time (benchmarks are registered grouped by model): the mid models are ~260 MB.
const DecoderModel<float>& model_for(const ModelSpec& spec) {
    static std::unique_ptr<DecoderModel<float>> model;
    static std::string key;
    const std::string wanted = spec.config + "/" + spec.kind_name();
    if (!model || key != wanted) {
        model.reset();
        model = std::make_unique<DecoderModel<float>>(DecoderModel<float>::seeded(spec.model_config(), 2024));
        key = wanted;
    }
    return *model;
}

std::vector<Token> tokens_for(Index n, Index vocab) {
    std::vector<Token> tokens(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<Token>((131 * i + 7) % vocab);
    return tokens;
}

/// Flops of the matrix products of one attention module over N tokens.
double attention_projection_flops(const AttentionConfig& a, Index n) {
    const double N = double(n), D = double(a.d_model);
    double flops = 2 * N * D * double(a.v_width()) + 2 * N * double(a.out_width()) * D;
    if (a.kind == AttentionKind::shared_diff) {
        const double d = double(a.head_dim()), r = double(a.shared_diff_rank), maps = double(a.n_query_maps());
        // per Q and K: X base^T (N D d), X a (N D 2H r), (X a_t) b_t^T for every map (N r d each)
        flops += 2 * (2 * N * D * d + 2 * N * D * maps * r + 2 * N * r * d * maps);
    } else {
        flops += 2 * N * D * double(a.q_width() + a.k_width());
    }
    if (a.kind == AttentionKind::diff_v2) flops += 2 * N * D * double(a.n_heads);
    return flops;
}

/// Useful flops of the attention kernels of one module over N tokens (bench::map_flops).
double attention_kernel_flops(const AttentionConfig& a, Index n) {
    const bool causal = a.causal;
    const double heads = double(a.n_heads);
    if (!a.differential()) return heads * bench::map_flops(n, a.head_dim(), a.value_dim(), causal);
    return heads * 2 * bench::map_flops(n, a.head_dim(), a.value_dim(), causal);
}

double layer_matmul_flops(const ModelConfig& c, Index n) {
    return attention_projection_flops(c.attention_config(), n) +
           3 * 2 * double(n) * double(c.hidden_size) * double(c.intermediate_size);
}

double model_matmul_flops(const ModelConfig& c, Index n) {
    return double(c.num_hidden_layers) * layer_matmul_flops(c, n) +
           2 * double(n) * double(c.hidden_size) * double(c.vocab_size);
}

double model_flops(const ModelConfig& c, Index n) {
    return model_matmul_flops(c, n) + double(c.num_hidden_layers) * attention_kernel_flops(c.attention_config(), n);
}

/// tokens/s from the wall seconds of the loop (run_and_report's return value).
void set_tokens_per_second(benchmark::State& state, Index n, double seconds) {
    state.counters["tokens/s"] = double(n) * double(state.iterations()) / seconds;
    state.counters["N"] = double(n);
}

void run_model_forward(benchmark::State& state, const ModelSpec& spec, Index n, int threads) {
    const DecoderModel<float>& model = model_for(spec);
    const std::vector<Token> tokens = tokens_for(n, model.config().vocab_size);
    ForwardState<float> fs = model.make_state(n, threads);
    auto call = [&] {
        const ConstMatrixRef<float> logits = model.forward(tokens, fs);
        benchmark::DoNotOptimize(logits.data());
    };
    call();  // warm-up
    const double seconds = bench::run_and_report(state, model_flops(model.config(), n), threads, call);
    set_tokens_per_second(state, n, seconds);
    state.counters["threads_in_state"] = fs.context.threads;
}

void run_attention(benchmark::State& state, const ModelSpec& spec, Index n, int threads) {
    const DecoderModel<float>& model = model_for(spec);
    const AttentionConfig a = model.config().attention_config(0);
    ForwardState<float> fs = model.make_state(n, threads);
    const Matrix x = bench::random_matrix(n, model.config().hidden_size, 7);
    Matrix out(n, model.config().hidden_size);
    auto call = [&] {
        model.layers[0].self_attn.forward(x, out, fs.layer.attention, fs.context);
        benchmark::DoNotOptimize(out.data());
    };
    call();
    const double seconds =
        bench::run_and_report(state, attention_projection_flops(a, n) + attention_kernel_flops(a, n), threads, call);
    set_tokens_per_second(state, n, seconds);
}

void run_layer(benchmark::State& state, const ModelSpec& spec, Index n, int threads) {
    const DecoderModel<float>& model = model_for(spec);
    const ModelConfig& c = model.config();
    ForwardState<float> fs = model.make_state(n, threads);
    const Matrix x0 = bench::random_matrix(n, c.hidden_size, 7);
    Matrix x = x0;
    auto call = [&] {
        x = x0;  // the layer updates the residual stream in place
        model.layers[0].forward(x, fs.layer, fs.context);
        benchmark::DoNotOptimize(x.data());
    };
    call();
    const double seconds = bench::run_and_report(
        state, layer_matmul_flops(c, n) + attention_kernel_flops(c.attention_config(0), n), threads, call);
    set_tokens_per_second(state, n, seconds);
}

/// Every product of one forward, as the forward calls them, on buffers of the same shapes.
void run_model_matmuls(benchmark::State& state, const ModelSpec& spec, Index n) {
    const DecoderModel<float>& model = model_for(spec);
    const ModelConfig& c = model.config();
    const AttentionConfig a = c.attention_config(0);
    const Index D = c.hidden_size;
    const Matrix x = bench::random_matrix(n, D, 7);                     // layer input (normed)
    const Matrix heads = bench::random_matrix(n, a.out_width(), 8);     // out_proj input
    const Matrix gate_in = bench::random_matrix(n, c.intermediate_size, 9);  // down_proj input
    Matrix q(n, a.q_width()), k(n, a.k_width()), v(n, a.v_width()), out(n, D);
    Matrix gate(n, c.intermediate_size), up(n, c.intermediate_size), logits(n, c.vocab_size);
    Matrix shared_base, shared_xa;
    if (a.kind == AttentionKind::shared_diff) {
        shared_base.resize(n, 2 * a.head_dim());
        shared_xa.resize(n, 4 * a.n_heads * a.shared_diff_rank);
    }
    auto call = [&] {
        for (const DecoderLayer<float>& layer : model.layers) {
            const AttentionWeights<float>& w = layer.self_attn.weights();
            if (a.kind == AttentionKind::shared_diff && !layer.self_attn.merged()) {
                w.shared.project(x, shared_base, shared_xa, q, k);
            } else {
                linear<float>(x, w.q_proj, q);
                linear<float>(x, w.k_proj, k);
            }
            linear<float>(x, w.v_proj, v);
            linear<float>(heads, w.out_proj, out);
            linear<float>(x, layer.mlp.gate_proj, gate);
            linear<float>(x, layer.mlp.up_proj, up);
            linear<float>(gate_in, layer.mlp.down_proj, out);
        }
        linear<float>(x, c.tie_word_embeddings ? model.embed_tokens : model.lm_head, logits);
        benchmark::DoNotOptimize(logits.data());
        benchmark::DoNotOptimize(out.data());
    };
    call();
    const double seconds = bench::run_and_report(state, model_matmul_flops(c, n), 1, call);
    set_tokens_per_second(state, n, seconds);
}

void run_proj_diff(benchmark::State& state, Index n, Index D) {
    const Matrix x = bench::random_matrix(n, D, 1);
    const Matrix wq = bench::random_matrix(D, D, 2, 0.03f), wk = bench::random_matrix(D, D, 3, 0.03f);
    Matrix q(n, D), k(n, D);
    auto call = [&] {
        linear<float>(x, wq, q);
        linear<float>(x, wk, k);
        benchmark::DoNotOptimize(q.data());
        benchmark::DoNotOptimize(k.data());
    };
    call();
    bench::run_and_report(state, 2 * 2.0 * double(n) * double(D) * double(D), 1, call);
}

void run_proj_shared_diff(benchmark::State& state, Index n, Index D, Index H, Index r) {
    const Index d = D / H / 2, maps = 2 * H;
    SharedDiffFactors<float> f(D, H, d, r);
    f.q_base = bench::random_matrix(d, D, 2, 0.03f);
    f.k_base = bench::random_matrix(d, D, 3, 0.03f);
    f.q_a = bench::random_matrix(D, maps * r, 4, 0.03f);
    f.k_a = bench::random_matrix(D, maps * r, 5, 0.03f);
    f.q_b = bench::random_matrix(maps * d, r, 6, 0.03f);
    f.k_b = bench::random_matrix(maps * d, r, 7, 0.03f);
    const Matrix x = bench::random_matrix(n, D, 1);
    Matrix base(n, 2 * d), xa(n, 2 * maps * r), q(n, maps * d), k(n, maps * d);
    auto call = [&] {
        f.project(x, base, xa, q, k);
        benchmark::DoNotOptimize(q.data());
        benchmark::DoNotOptimize(k.data());
    };
    call();
    const double N = double(n), Dd = double(D), dd = double(d), rr = double(r), m = double(maps);
    bench::run_and_report(state, 2 * (2 * N * Dd * dd + 2 * N * Dd * m * rr + 2 * N * rr * dd * m), 1, call);
}

void register_all(const bench::BenchArgs& args) {
    const std::vector<AttentionKind> kinds = {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                                              AttentionKind::shared_diff};
    struct Size {
        std::string config;
        Index n;
    };
    std::vector<Size> sizes;
    if (args.quick) {
        sizes = {{"small", 256}, {"mid", 256}};
    } else {
        sizes = {{"small", 1024}, {"mid", 2048}};
    }
    for (const Size& size : sizes) {
        if (!args.fits(size.n)) continue;
        for (AttentionKind kind : kinds) {
            const ModelSpec spec{size.config, kind};
            const Index n = size.n;
            auto name = [&](const char* family, int threads) {
                Name nm(family);
                nm("config", spec.config)("kind", spec.kind_name())("N", n)("threads", threads);
                return nm;
            };
            for (int threads : {1, 2}) {
                bench::add(args, name("model_forward", threads),
                           [spec, n, threads](benchmark::State& s) { run_model_forward(s, spec, n, threads); });
            }
            bench::add(args, name("model_matmuls", 1),
                       [spec, n](benchmark::State& s) { run_model_matmuls(s, spec, n); });
            for (int threads : {1, 2}) {
                bench::add(args, name("attention", threads),
                           [spec, n, threads](benchmark::State& s) { run_attention(s, spec, n, threads); });
                bench::add(args, name("layer", threads),
                           [spec, n, threads](benchmark::State& s) { run_layer(s, spec, n, threads); });
            }
        }
    }

    // Shared DIFF's factored projection against DIFF's dense one: D 1024, H 8 (d 64), r < d/2 and r = d/2.
    const Index n = args.quick ? 512 : 2048;
    const Index D = 1024, H = 8;
    if (args.fits(n)) {
        bench::add(args, Name("proj_diff")("N", n)("D", D)("H", H),
                   [n](benchmark::State& s) { run_proj_diff(s, n, D); });
        for (Index r : {8, 16, 24, 32}) {
            bench::add(args, Name("proj_shared_diff")("N", n)("D", D)("H", H)("r", r),
                       [n, r](benchmark::State& s) { run_proj_shared_diff(s, n, D, H, r); });
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args);
    return bench::run_main(argc, argv, args);
}
