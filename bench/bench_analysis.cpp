// Attention analysis on a long context (include/diffattn/analysis/): time and peak heap memory of
// one AttentionAnalyzer, made and run over N tokens, for the statistics of the last 4 rows (a
// retrieval question at the end of a long context) of a small model (hidden 64, 4 heads, 2
// layers): softmax, diff, and dint causal_softmax, whose integral streams over every earlier row.
//
// Counters:
//   peak_heap_bytes     the peak of heap bytes in use while the analyzer is made and runs, minus
//                       the bytes in use before (heap_counter.hpp counts every malloc): the whole
//                       analysis, forward state included;
//   bytes_per_token     peak_heap_bytes / N: flat in N when memory is O(N);
//   map_bytes           what one N x N map of doubles would take (what the analysis never forms).
//
//   bench_analysis [--benchmark_filter=...]       (Google Benchmark flags)
#include "heap_counter.hpp"  // first: every malloc of the process counted

#include <diffattn/analysis/attention_analysis.hpp>

#include <benchmark/benchmark.h>

#include <vector>

namespace {

using namespace diffattn;
using namespace diffattn::analysis;

ModelConfig bench_config(AttentionKind kind) {
    ModelConfig c;
    c.attention = kind;
    c.dint_integral = DintIntegral::causal_softmax;
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.num_hidden_layers = 2;
    c.intermediate_size = 172;
    c.vocab_size = 256;
    if (kind == AttentionKind::diff_v2) c.head_dim = 8;
    return c;
}

void analysis_long_context(benchmark::State& state, AttentionKind kind) {
    const Index n = state.range(0);
    const ModelConfig config = bench_config(kind);
    const DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    std::vector<Token> tokens;
    for (Index i = 0; i < n; ++i) tokens.push_back(static_cast<Token>((7 * i + 3) % config.vocab_size));
    std::vector<AnalysisRow> rows;
    for (Index r = n - 4; r < n; ++r) {
        AnalysisRow row;
        row.position = r;
        row.answer = {10, 11, 12};
        for (Index j = 13; j < r; ++j) row.noise.push_back(j);
        rows.push_back(row);
    }
    long long peak = 0;
    for (auto _ : state) {
        const long long before = g_in_use.load();
        g_peak.store(before);
        AttentionAnalyzer<float> analyzer(config, n);
        AnalysisResult result;
        analyzer.run(model, tokens, rows, result);
        benchmark::DoNotOptimize(result.figures.data());
        peak = g_peak.load() - before;
    }
    state.counters["peak_heap_bytes"] = static_cast<double>(peak);
    state.counters["bytes_per_token"] = static_cast<double>(peak) / static_cast<double>(n);
    state.counters["map_bytes"] = static_cast<double>(n) * static_cast<double>(n) * sizeof(double);
}

}  // namespace

BENCHMARK_CAPTURE(analysis_long_context, softmax, AttentionKind::softmax)
    ->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(analysis_long_context, diff, AttentionKind::diff)
    ->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(analysis_long_context, dint_causal_softmax, AttentionKind::dint)
    ->RangeMultiplier(4)->Range(1024, 16384)->Unit(benchmark::kMillisecond)->Iterations(1);

BENCHMARK_MAIN();
