// Per-token decode time with a KV cache against a full recompute (SPEC 6).
//
// Model: seeded, hidden_size 256, 4 layers, 4 heads (no GQA), intermediate_size 683, vocab 512,
// attention dint (causal_softmax) or diff; float, one thread.
//
//   BM_decode_cached/<kind>/<context>     the cache holds `context` tokens (prefilled once, outside
//                                         the timing); each iteration feeds one new token, so the
//                                         context grows from `context` to `context` + 31 over the
//                                         32 iterations (a few per cent at 512).
//   BM_decode_recompute/<kind>/<context>  each iteration runs the full forward over context + 1
//                                         tokens, which is what producing one token costs without
//                                         a cache; one iteration (8192 takes seconds).
// kind 0 = dint causal_softmax, 1 = diff. The tokens/s counter is generated tokens per second;
// the ratio of the two benchmarks at one context is the speed-up of the cache. A cache of this
// model costs bytes_per_token = L (k_width + v_width) 4 B [+ L H 4 B for DINT] + d 4 B (see
// docs/kv_cache.md); the cache_bytes_per_token counter reports it.
//
// Run: bench_decode --benchmark_counters_tabular=true   (the whole run takes about a minute or two:
// the 8192-token prefill and recompute dominate).
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
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

void set_counters(benchmark::State& state, const ModelConfig& config, Index context) {
    state.counters["context"] = static_cast<double>(context);
    state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["cache_bytes_per_token"] = static_cast<double>(KvCache<float>::bytes_per_token(config));
    state.SetLabel(config.attention == AttentionKind::dint ? "dint causal_softmax" : "diff");
}

void BM_decode_cached(benchmark::State& state) {
    const int kind = static_cast<int>(state.range(0));
    const Index context = state.range(1);
    const DecoderModel<float>& model = bench_model(kind);
    const std::vector<Token> prompt = bench_tokens(context, model.config().vocab_size);
    KvCache<float> cache = model.make_cache(context + kDecodeSteps);
    ForwardState<float> state_buffers = model.make_state(context);
    model.forward(prompt, state_buffers, &cache);  // prefill, not timed
    std::vector<Token> next = {1};
    for (auto _ : state) {
        if (cache.remaining() == 0) state.SkipWithError("cache full: run with the fixed iteration count");
        const ConstMatrixRef<float> logits = model.forward(next, state_buffers, &cache);  // [1 x V]
        Index best = 0;
        logits.row(0).maxCoeff(&best);  // greedy: the next token
        next.front() = static_cast<Token>(best);
        benchmark::DoNotOptimize(next.front());
    }
    set_counters(state, model.config(), context);
}

void BM_decode_recompute(benchmark::State& state) {
    const int kind = static_cast<int>(state.range(0));
    const Index context = state.range(1);
    const DecoderModel<float>& model = bench_model(kind);
    std::vector<Token> tokens = bench_tokens(context + 1, model.config().vocab_size);
    ForwardState<float> state_buffers = model.make_state(context + 1);
    for (auto _ : state) {
        const ConstMatrixRef<float> logits = model.forward(tokens, state_buffers);  // [context + 1 x V]
        Index best = 0;
        logits.row(context).maxCoeff(&best);
        benchmark::DoNotOptimize(best);
    }
    set_counters(state, model.config(), context);
}

void decode_args(benchmark::internal::Benchmark* b) {
    for (int kind : {0, 1}) {
        for (Index context : {512, 2048, 8192}) b->Args({kind, context});
    }
    b->ArgNames({"kind", "context"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_decode_cached)->Apply(decode_args)->Iterations(kDecodeSteps);
BENCHMARK(BM_decode_recompute)->Apply(decode_args)->Iterations(1);
