// Per-token decode time with a KV cache against a full recompute (docs/math.md §6).
//
// Model: seeded, hidden_size 256, 4 layers, 4 heads (no GQA), intermediate_size 683, vocab 512,
// attention dint (causal_softmax) or diff; float; attention heads on T threads
// (make_state(max_len, T)).
//
//   decode_cached/kind:<k>/context:<C>/threads:<T>     the cache holds `context` tokens (prefilled
//                                         once, outside the timing); each iteration feeds one new
//                                         token, so the context grows from `context` to
//                                         `context` + 31 over the 32 iterations (a few per cent at 512).
//   decode_recompute/kind:<k>/context:<C>/threads:<T>  each iteration runs the full forward over
//                                         context + 1 tokens, which is what producing one token
//                                         costs without a cache; one iteration (8192 takes seconds).
// kind: dint (causal_softmax) or diff. The tokens/s counter is generated tokens per second;
// the ratio of the two benchmarks at one context is the speed-up of the cache. A cache of this
// model costs bytes_per_token = L (k_width + v_width) 4 B [+ L H 4 B for DINT] + d 4 B (see
// docs/kv_cache.md); the cache_bytes_per_token counter reports it.
//
// Run: bench_decode --benchmark_counters_tabular=true   (contexts 512, 2048, 8192, threads 1 and 2:
// a few minutes, the 8192-token prefill and recompute dominate). --quick: contexts 256 and 1024;
// --max-n=C drops contexts above C.
#include "bench_common.hpp"

#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace diffattn;

constexpr Index kDecodeSteps = 32;  // iterations of a cached benchmark: tokens decoded per run

ModelConfig bench_config(int kind) {
    ModelConfig c;
    c.attention = kind == 0 ? AttentionKind::dint : AttentionKind::diff;
    c.dint_integral = DintIntegral::causal_softmax;
    c.hidden_size = 256;
    c.num_attention_heads = 4;
    c.num_hidden_layers = 4;
    c.intermediate_size = 683;
    c.vocab_size = 512;
    return c;
}

const DecoderModel<float>& bench_model(int kind) {
    static std::map<int, std::unique_ptr<DecoderModel<float>>> models;
    auto& model = models[kind];
    if (!model) model = std::make_unique<DecoderModel<float>>(DecoderModel<float>::seeded(bench_config(kind), 2024));
    return *model;
}

std::vector<Token> bench_tokens(Index n, Index vocab) {
    std::vector<Token> tokens;
    tokens.reserve(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) tokens.push_back(static_cast<Token>((131 * i + 7) % vocab));
    return tokens;
}

/// seconds: wall time of the benchmark loop (so tokens/s stays right with several threads).
void set_counters(benchmark::State& state, const ModelConfig& config, Index context, double seconds) {
    state.counters["context"] = static_cast<double>(context);
    state.counters["tokens/s"] = static_cast<double>(state.iterations()) / seconds;
    state.counters["cache_bytes_per_token"] = static_cast<double>(KvCache<float>::bytes_per_token(config));
    state.SetLabel(config.attention == AttentionKind::dint ? "dint causal_softmax" : "diff");
}

void BM_decode_cached(benchmark::State& state, int kind, Index context, int threads) {
    const DecoderModel<float>& model = bench_model(kind);
    const std::vector<Token> prompt = bench_tokens(context, model.config().vocab_size);
    KvCache<float> cache = model.make_cache(context + kDecodeSteps);
    ForwardState<float> state_buffers = model.make_state(context, threads);
    model.forward(prompt, state_buffers, &cache);  // prefill, not timed
    std::vector<Token> next = {1};
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        if (cache.remaining() == 0) state.SkipWithError("cache full: run with the fixed iteration count");
        const ConstMatrixRef<float> logits = model.forward(next, state_buffers, &cache);  // [1 x V]
        Index best = 0;
        logits.row(0).maxCoeff(&best);  // greedy: the next token
        next.front() = static_cast<Token>(best);
        benchmark::DoNotOptimize(next.front());
    }
    set_counters(state, model.config(), context, bench::seconds_since(start));
}

void BM_decode_recompute(benchmark::State& state, int kind, Index context, int threads) {
    const DecoderModel<float>& model = bench_model(kind);
    std::vector<Token> tokens = bench_tokens(context + 1, model.config().vocab_size);
    ForwardState<float> state_buffers = model.make_state(context + 1, threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        const ConstMatrixRef<float> logits = model.forward(tokens, state_buffers);  // [context + 1 x V]
        Index best = 0;
        logits.row(context).maxCoeff(&best);
        benchmark::DoNotOptimize(best);
    }
    set_counters(state, model.config(), context, bench::seconds_since(start));
}

const char* kind_name(int kind) { return kind == 0 ? "dint" : "diff"; }

void register_all(const bench::BenchArgs& args) {
    const std::vector<Index> contexts = args.quick ? std::vector<Index>{256, 1024} : std::vector<Index>{512, 2048, 8192};
    for (const char* family : {"decode_cached", "decode_recompute"}) {
        const bool cached = std::string(family) == "decode_cached";
        for (int kind : {0, 1}) {
            for (Index context : contexts) {
                if (!args.fits(context)) continue;
                for (int threads : {1, 2}) {
                    bench::Name name(family);
                    name("kind", kind_name(kind))("context", context)("threads", threads);
                    benchmark::RegisterBenchmark(name.str().c_str(),
                                                 [=](benchmark::State& s) {
                                                     if (cached) {
                                                         BM_decode_cached(s, kind, context, threads);
                                                     } else {
                                                         BM_decode_recompute(s, kind, context, threads);
                                                     }
                                                 })
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond)
                        ->Iterations(cached ? kDecodeSteps : 1);
                }
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args);
    return bench::run_main(argc, argv, args);
}
