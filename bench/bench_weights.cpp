// A released-size model in each weight format (docs/math.md §10): decode at the memory roofline of
// the stored bytes, and prefill, f32 / bf16 / q8_0 / q4_0.
//
// Model: Motif-2.6B's shape (hidden 2048, 32 layers, 16 differential heads of map width 64 and no
// GQA, intermediate 8192 with the PolyNorm-gated MLP, vocabulary 219520, tied embeddings: 2.6e9
// parameters), seeded in memory in each format in turn (one model alive at a time: the f32 one
// takes 10.4 GB). --layers=L builds L layers instead (the same per-layer shape).
//
//   stream_read/threads:<T>                         the bandwidth yardstick (stream_yardstick.hpp)
//   decode/weights:<F>/context:512/threads:<T>      the cache prefilled with a 512-token prompt
//     (timed once: prefill_tokens/s), then one token per iteration, greedy; counters
//       tokens/s, step_bytes (the stored bytes one step reads at least: every weight in its format
//       (the tied table is the output head, read whole), the norms, and the f32 KV cache's keys and
//       values), stream_GB/s (the yardstick around the timed loop, bench::StreamYardstick),
//       roofline_tokens/s = stream_GB/s / step_bytes, roofline_share = tokens/s / roofline_tokens/s,
//       stored_GB (DecoderModel::stored_bytes), prefill_tokens/s.
//
//   prefill/weights:<F>/compute:<C>/tokens:<N>/threads:<T>
//     one forward of N tokens (the logits of every row, no cache), f32 and bf16 weights, in float
//     (compute:scalar) and with BF16 products (compute:bf16, docs/math.md §7.1, §10.1: the path this
//     CPU takes is in the label); N 512 on 1 and 2 threads, 4096 on 2; counter tokens/s.
//
// Run: bench_weights --benchmark_counters_tabular=true [--layers=L] [--formats=f32,q8_0]
//      [--benchmark_filter=prefill] (--quick: 2 layers, context 64, prefills of 64 tokens).
#include "bench_common.hpp"

#include "diffattn/core/isa.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace diffattn;

constexpr Index kDecodeSteps = 32;

ModelConfig motif_2_6b_shape(Index layers) {
    ModelConfig c;
    c.attention = AttentionKind::diff;
    c.hidden_size = 2048;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 16;
    c.num_hidden_layers = layers;
    c.intermediate_size = 8192;
    c.vocab_size = 219520;
    c.tie_word_embeddings = true;
    c.mlp_activation = MlpActivation::poly_norm;
    return c;
}

/// The model of the format asked for last: building another drops it first (memory).
const DecoderModel<float>& model_in(WeightFormat format, Index layers) {
    static std::unique_ptr<DecoderModel<float>> model;
    static WeightFormat built = WeightFormat::f32;
    if (!model || built != format) {
        model.reset();
        model = std::make_unique<DecoderModel<float>>(DecoderModel<float>::seeded(motif_2_6b_shape(layers), 2026, format));
        built = format;
    }
    return *model;
}

/// Bytes one decode step reads at least (the file comment).
double step_bytes(const DecoderModel<float>& model, Index context) {
    const ModelConfig& c = model.config();
    double bytes = model.stored_bytes();
    if (!c.tie_word_embeddings) {
        bytes -= model.embed_tokens.stored_bytes() * (1.0 - 1.0 / static_cast<double>(c.vocab_size));
    }
    const AttentionConfig a = c.attention_config();
    return bytes + static_cast<double>(c.num_hidden_layers * context * (a.k_width() + a.v_width())) * sizeof(float);
}

void BM_decode(benchmark::State& state, WeightFormat format, Index layers, Index context, int threads) {
    const DecoderModel<float>& model = model_in(format, layers);
    std::vector<Token> prompt;
    for (Index i = 0; i < context; ++i) prompt.push_back(static_cast<Token>((131 * i + 7) % model.config().vocab_size));
    KvCache<float> cache = model.make_cache(context + kDecodeSteps + 1);
    ForwardState<float> buffers = model.make_state(context, threads);
    const auto prefill_start = bench::Clock::now();
    model.forward(prompt, buffers, &cache);
    const double prefill_seconds = bench::seconds_since(prefill_start);
    std::vector<Token> next = {1};
    bench::StreamYardstick yardstick(threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        const ConstMatrixRef<float> logits = model.forward(next, buffers, &cache);
        Index best = 0;
        logits.row(0).maxCoeff(&best);
        next.front() = static_cast<Token>(best);
        benchmark::DoNotOptimize(next.front());
    }
    const double seconds = bench::seconds_since(start);
    const double bandwidth = yardstick.after();
    const double bytes = step_bytes(model, context + kDecodeSteps / 2);
    const double tokens_per_second = static_cast<double>(state.iterations()) / seconds;
    state.counters["tokens/s"] = tokens_per_second;
    state.counters["step_bytes"] = bytes;
    state.counters["stream_GB/s"] = bandwidth / 1e9;
    state.counters["roofline_tokens/s"] = bandwidth / bytes;
    state.counters["roofline_share"] = tokens_per_second / (bandwidth / bytes);
    state.counters["stored_GB"] = model.stored_bytes() / 1e9;
    state.counters["prefill_tokens/s"] = static_cast<double>(context) / prefill_seconds;
    state.SetLabel(compiled_isa());
}

void BM_prefill(benchmark::State& state, WeightFormat format, Index layers, Index tokens, int threads, Compute compute) {
    const DecoderModel<float>& model = model_in(format, layers);
    std::vector<Token> prompt;
    for (Index i = 0; i < tokens; ++i) prompt.push_back(static_cast<Token>((131 * i + 7) % model.config().vocab_size));
    ForwardState<float> buffers = model.make_state(tokens, threads);
    buffers.set_compute(compute);
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        const ConstMatrixRef<float> logits = model.forward(prompt, buffers);
        benchmark::DoNotOptimize(logits.data());
    }
    state.counters["tokens/s"] = static_cast<double>(tokens * state.iterations()) / bench::seconds_since(start);
    state.SetLabel(std::string(compiled_isa()) + "; products: " + to_string(product_path(compute)));
}

}  // namespace

int main(int argc, char** argv) {
    Index layers = 32;
    std::vector<WeightFormat> formats = {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0};
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--layers=", 9) == 0) {
            layers = std::atol(argv[i] + 9);
        } else if (std::strncmp(argv[i], "--formats=", 10) == 0) {
            formats.clear();
            std::stringstream list(argv[i] + 10);
            std::string name;
            while (std::getline(list, name, ',')) formats.push_back(parse_weight_format(name, "--formats"));
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    argv[argc] = nullptr;
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    if (args.quick) layers = 2;
    const Index context = args.quick ? 64 : 512;
    bench::register_stream_read();
    for (WeightFormat format : formats) {
        for (int threads : {1, 2}) {
            bench::Name name("decode");
            name("weights", to_string(format))("context", context)("threads", threads);
            benchmark::RegisterBenchmark(name.str().c_str(),
                                         [=](benchmark::State& s) { BM_decode(s, format, layers, context, threads); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->Iterations(kDecodeSteps);
        }
    }
    for (WeightFormat format : formats) {
        if (format != WeightFormat::f32 && format != WeightFormat::bf16) continue;
        for (Compute compute : {Compute::scalar, Compute::bf16}) {
            for (auto [tokens, threads] : {std::pair<Index, int>{512, 1}, {512, 2}, {4096, 2}}) {
                if (args.quick) tokens = 64;
                bench::Name name("prefill");
                name("weights", to_string(format))("compute", to_string(compute))("tokens", tokens)("threads", threads);
                benchmark::RegisterBenchmark(name.str().c_str(), [=](benchmark::State& s) {
                    BM_prefill(s, format, layers, tokens, threads, compute);
                })->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(1);
            }
        }
    }
    return bench::run_main(argc, argv, args);
}
