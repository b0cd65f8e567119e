// Per-token decode time with a KV cache against a full recompute (docs/math.md §6), held against
// the memory roofline.
//
// Model: seeded, hidden_size 256, 4 layers, 4 heads (no GQA; diff_v2 head_dim 32), intermediate_size
// 683, vocab 512;
// float; attention heads on T threads (make_state(max_len, T)). kind: diff, dint (causal_softmax),
// dint_mean (causal_mean), softmax, diff_v2, gda (4 signal heads sharing one noise head and one kv
// pair: Motif-2-12.7B's group, docs/math.md §9).
//
//   stream_read/threads:<T>          the yardstick: a vectorised sum over a 512 MB buffer of huge
//                                    pages (stream_yardstick.hpp), split in T equal parts, one per
//                                    thread (each decode_cached benchmark measures it again
//                                    around its loop: stream_GB/s).
//   decode_cached/kind:<k>/context:<C>/threads:<T>     the cache holds `context` tokens (prefilled
//                                         once, outside the timing); each iteration feeds one new
//                                         token, so the context grows from `context` to
//                                         `context` + 31 over the 32 iterations (a few per cent at 2048).
//   decode_cached/kind:<k>/kv:<P>/context:<C>/threads:<T>  the same with a cache storing keys and
//                                         values as P = f16 or bf16 (KvPrecision): half the bytes.
//   decode_heads/kind:<k>/context:<C>/threads:<T>  a step's attention heads alone (k = diff,
//                                         softmax or gda; gda: each group): each head of every layer, one after another, its
//                                         kernel on one query row over `context` keys and values of
//                                         a store laid out as the KvCache's (detail::KvStore, huge
//                                         pages), its keys split over the T threads as in the
//                                         model's one-row step. roofline_share: the cache's bytes
//                                         over the time, against the same yardstick; beside
//                                         decode_cached it tells the kernels' share from the step's.
//   decode_paired/kind:<k>/context:<C>/threads:<T>  (every context; issue 20's f16 target is at
//                                         >= 8192) the model with an f32 and an f16 cache,
//                                         both prefilled, decoding in turns: each iteration one
//                                         token with each (which goes first alternates), each step
//                                         timed alone and followed by a read of the next 128 MB
//                                         slice of the yardstick's buffer (bench::StreamSlices),
//                                         which also evicts the step from the last-level cache.
//                                         Other load on a shared host comes and goes over seconds:
//                                         the steps of one iteration and the reads around them meet
//                                         the same host, so their ratios keep what two benchmarks
//                                         run a minute apart lose. Counters: f16_over_f32, the
//                                         median over the iterations of the f32 step's time over
//                                         the f16 step's (the f16 cache's tokens/s over the f32's);
//                                         f16_over_f32_bound, the f32 step_bytes over the f16's
//                                         (the ratio two steps at the same share of the roofline
//                                         would give); f32_share and f16_share, the medians of each
//                                         step's step_bytes / time over the higher of the reads
//                                         before and after it; f32_tokens/s and f16_tokens/s;
//                                         stream_GB/s, the median read.
//   decode_recompute/kind:<k>/context:<C>/threads:<T>  each iteration runs the full forward over
//                                         context + 1 tokens, which is what producing one token
//                                         costs without a cache; one iteration (8192 takes seconds).
// Counters of decode_cached: tokens/s; step_bytes, what one step must read at least (every weight
// but the token embedding, of which one row, and the cached keys and values of every layer once
// at their stored size,
// plus DINT causal_softmax's column sums, read and written); stream_GB/s, the benchmark's own
// yardstick: the higher of two streaming reads of the same thread count (best of 3 passes each),
// one just before its timed loop and one just after (bench::StreamYardstick: the host's bandwidth
// drifts over a run); roofline_tokens/s = stream_GB/s / step_bytes; roofline_share = tokens/s /
// roofline_tokens/s (1 = at the memory bound). The read before the loop also evicts the
// prefill's operands from the last-level cache. cache_bytes_per_token is KvCache::bytes_per_token
// (docs/kv_cache.md).
//
// Run: bench_decode --benchmark_counters_tabular=true   (contexts 2048 and 8192, threads 1 and 2;
// --long adds 32768, whose prefill takes tens of seconds per kind). --quick: contexts 256 and
// 1024; --max-n=C drops contexts above C. The recompute benchmarks run for diff and dint only.
#include "bench_common.hpp"

#include "diffattn/core/parallel.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/head_blocks.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/kv_store.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace diffattn;

constexpr Index kDecodeSteps = 32;  // iterations of a cached benchmark: tokens decoded per run

/// The attention kinds of the benchmark model: name, kind, DINT integral.
struct Kind {
    const char* name;
    AttentionKind attention;
    DintIntegral integral;
};
constexpr Kind kKinds[] = {{"dint", AttentionKind::dint, DintIntegral::causal_softmax},
                           {"diff", AttentionKind::diff, DintIntegral::causal_softmax},
                           {"dint_mean", AttentionKind::dint, DintIntegral::causal_mean},
                           {"softmax", AttentionKind::softmax, DintIntegral::causal_softmax},
                           {"diff_v2", AttentionKind::diff_v2, DintIntegral::causal_softmax},
                           {"gda", AttentionKind::gda, DintIntegral::causal_softmax}};
constexpr int kKindCount = static_cast<int>(sizeof(kKinds) / sizeof(kKinds[0]));

ModelConfig bench_config(int kind) {
    ModelConfig c;
    c.attention = kKinds[kind].attention;
    c.dint_integral = kKinds[kind].integral;
    c.hidden_size = 256;
    c.num_attention_heads = 4;
    c.num_hidden_layers = 4;
    c.intermediate_size = 683;
    c.vocab_size = 512;
    if (c.attention == AttentionKind::diff_v2) c.head_dim = 32;  // 2H query heads of 32: q width D, as diff
    if (c.attention == AttentionKind::gda) {  // one group: 4 signal heads of 32, a noise head, a kv pair
        c.gda_group_ratio = 4;
        c.num_key_value_heads = 1;
    }
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

/// Bytes of the cached keys and values of every layer at `context` tokens, at their stored size.
double cache_bytes(const ModelConfig& c, Index context, KvPrecision precision) {
    const AttentionConfig a = c.attention_config();
    return static_cast<double>(c.num_hidden_layers) * static_cast<double>(context) *
           static_cast<double>(a.k_width() + a.v_width()) *
           static_cast<double>(KvCache<float>::stored_scalar_bytes(precision));
}

/// Bytes one decode step at `context` cached tokens must read at least: the weights (the token
/// embedding only one row, unless lm_head shares it) and the cached keys and values of every
/// layer, and DINT causal_softmax's column sums (read and written).
double step_bytes(const DecoderModel<float>& model, Index context, KvPrecision precision) {
    const ModelConfig& c = model.config();
    double weights = static_cast<double>(model.parameter_count());
    if (!c.tie_word_embeddings) weights -= static_cast<double>((c.vocab_size - 1) * c.hidden_size);
    const double cache = cache_bytes(c, context, precision);
    double sums = 0;
    if (c.attention == AttentionKind::dint && c.dint_integral == DintIntegral::causal_softmax) {
        sums = 2.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads) * static_cast<double>(context);
    }
    return (weights + sums) * sizeof(float) + cache;
}

/// seconds: wall time of the benchmark loop (so tokens/s stays right with several threads).
void set_counters(benchmark::State& state, int kind, const ModelConfig& config, Index context, double seconds,
                  KvPrecision precision = KvPrecision::f32) {
    state.counters["context"] = static_cast<double>(context);
    state.counters["tokens/s"] = static_cast<double>(state.iterations()) / seconds;
    state.counters["cache_bytes_per_token"] = static_cast<double>(KvCache<float>::bytes_per_token(config, precision));
    state.SetLabel(kKinds[kind].name);
}

/// The roofline counters of a decode benchmark at `context` (mid-run context), bandwidth the
/// yardstick of its timed loop (bench::StreamYardstick) in bytes/s.
void set_roofline_counters(benchmark::State& state, const DecoderModel<float>& model, Index context, double bandwidth,
                           double seconds, KvPrecision precision) {
    const double bytes = step_bytes(model, context, precision);
    const double roofline = bandwidth / bytes;
    state.counters["stream_GB/s"] = bandwidth / 1e9;
    state.counters["step_bytes"] = bytes;
    state.counters["roofline_tokens/s"] = roofline;
    state.counters["roofline_share"] = static_cast<double>(state.iterations()) / seconds / roofline;
}

void BM_decode_cached(benchmark::State& state, int kind, Index context, int threads, KvPrecision precision) {
    const DecoderModel<float>& model = bench_model(kind);
    const std::vector<Token> prompt = bench_tokens(context, model.config().vocab_size);
    KvCache<float> cache = model.make_cache(context + kDecodeSteps, precision);
    ForwardState<float> state_buffers = model.make_state(context, threads);
    model.forward(prompt, state_buffers, &cache);  // prefill, not timed
    std::vector<Token> next = {1};
    bench::StreamYardstick yardstick(threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        if (cache.remaining() == 0) state.SkipWithError("cache full: run with the fixed iteration count");
        const ConstMatrixRef<float> logits = model.forward(next, state_buffers, &cache);  // [1 x V]
        Index best = 0;
        logits.row(0).maxCoeff(&best);  // greedy: the next token
        next.front() = static_cast<Token>(best);
        benchmark::DoNotOptimize(next.front());
    }
    const double seconds = bench::seconds_since(start);
    set_counters(state, kind, model.config(), context, seconds, precision);
    set_roofline_counters(state, model, context + kDecodeSteps / 2, yardstick.after(), seconds, precision);
}

/// decode_heads (the file comment): a step's attention heads alone, kind diff or softmax.
void BM_decode_heads(benchmark::State& state, int kind, Index context, int threads) {
    const ModelConfig config = bench_config(kind);
    const AttentionConfig a = config.attention_config();
    const bool diff = kKinds[kind].attention == AttentionKind::diff;
    const bool gda = kKinds[kind].attention == AttentionKind::gda;
    detail::KvStore<float> store;
    store.allocate(config.num_hidden_layers, context + kDecodeSteps, a);
    for (Index layer = 0; layer < config.num_hidden_layers; ++layer) {
        store.keys(layer) = bench::random_matrix(store.keys(layer).rows(), a.head_dim(), 2 * layer + 1);
        store.values(layer) = bench::random_matrix(store.values(layer).rows(), a.value_dim(), 2 * layer + 2);
    }
    const detail::KvStore<float>& stored = store;  // read-only from here
    const RowMatrix<float> q = bench::random_matrix(2, a.head_dim(), 99);
    const RowMatrix<float> signal = bench::random_matrix(1, config.gda_group_ratio * a.head_dim(), 98);  // gda
    RowMatrix<float> out(1, (gda ? config.gda_group_ratio : 1) * a.value_dim());
    AttentionWorkspace<float> ws;
    AttentionOptions options;
    options.mask = MaskKind::causal;  // one row at the end of the sequence: it sees every key
    options.threads = threads;
    const auto heads_of_every_layer = [&] {
        for (Index layer = 0; layer < config.num_hidden_layers; ++layer) {
            const auto keys = HeadBlocks<const float>::blocked_keys(stored.keys(layer).data(), a.n_key_maps(),
                                                                    a.head_dim(), context + kDecodeSteps);
            const auto values = HeadBlocks<const float>::head_major(stored.values(layer), a.n_value_heads());
            for (Index h = 0; h < config.num_attention_heads; h += gda ? config.gda_group_ratio : 1) {
                const auto v = values.head(a.value_head(h, 0), 0, context);
                if (gda) {  // the group of heads h .. h + gr - 1
                    detail::gda_attention<float, float>(signal, keys.keys(a.key_map(h, 0), context), q.row(1),
                                                        keys.keys(a.key_map(h, 1), context), v, 0.5f, out, options,
                                                        &ws);
                } else if (diff) {
                    detail::diff_attention<float, float>(q.row(0), keys.keys(a.key_map(h, 0), context), q.row(1),
                                                         keys.keys(a.key_map(h, 1), context), v, 0.5f, out, options,
                                                         &ws);
                } else {
                    detail::softmax_attention<float, float>(q.row(0), keys.keys(a.key_map(h, 0), context), v, out,
                                                            options, &ws);
                }
            }
        }
        benchmark::ClobberMemory();
    };
    heads_of_every_layer();  // sizes the workspace
    bench::StreamYardstick yardstick(threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) heads_of_every_layer();
    const double seconds = bench::seconds_since(start);
    const double bandwidth = yardstick.after();
    const double bytes = cache_bytes(config, context, KvPrecision::f32);
    const double rate = bytes * static_cast<double>(state.iterations()) / seconds;
    state.counters["context"] = static_cast<double>(context);
    state.counters["cache_bytes"] = bytes;
    state.counters["GB/s"] = rate / 1e9;
    state.counters["stream_GB/s"] = bandwidth / 1e9;
    state.counters["roofline_share"] = rate / bandwidth;
    state.SetLabel(kKinds[kind].name);
}

/// decode_paired (the file comment): the kind's model decoding with an f32 and an f16 cache in
/// turns, each step timed alone right after a read of the next yardstick slice.
void BM_decode_paired(benchmark::State& state, int kind, Index context, int threads) {
    const DecoderModel<float>& model = bench_model(kind);
    const std::vector<Token> prompt = bench_tokens(context, model.config().vocab_size);
    ForwardState<float> state_buffers = model.make_state(context, threads);
    struct Side {
        KvCache<float> cache;
        double bytes;  // step_bytes at the mid-run context
        std::vector<Token> next{1};
        std::vector<double> shares;
    };
    const auto side_of = [&](KvPrecision precision) {
        return Side{model.make_cache(context + kDecodeSteps, precision),
                    step_bytes(model, context + kDecodeSteps / 2, precision), {1}, {}};
    };
    Side sides[2] = {side_of(KvPrecision::f32), side_of(KvPrecision::f16)};
    std::vector<std::function<void()>> steps;
    for (Side& side : sides) {
        model.forward(prompt, state_buffers, &side.cache);  // prefill, not timed
        steps.push_back([&state, &model, &state_buffers, s = &side] {
            if (s->cache.remaining() == 0) state.SkipWithError("cache full: run with the fixed iteration count");
            const ConstMatrixRef<float> logits = model.forward(s->next, state_buffers, &s->cache);
            Index best = 0;
            logits.row(0).maxCoeff(&best);  // greedy: the next token
            s->next.front() = static_cast<Token>(best);
        });
    }
    bench::StreamSlices yardstick(threads);
    std::vector<double> bandwidths = {yardstick.read_next()};
    const auto seconds = bench::time_in_turns(state, steps, [&](std::size_t c, double step_seconds) {
        // A step is held against the higher of the reads just before and after it (StreamYardstick).
        const double before = bandwidths.back();
        bandwidths.push_back(yardstick.read_next());
        sides[c].shares.push_back(sides[c].bytes / step_seconds / std::max(before, bandwidths.back()));
    });
    state.counters["context"] = static_cast<double>(context);
    state.counters["f32_tokens/s"] = bench::calls_per_second(seconds[0]);
    state.counters["f16_tokens/s"] = bench::calls_per_second(seconds[1]);
    state.counters["f32_share"] = bench::median(sides[0].shares);
    state.counters["f16_share"] = bench::median(sides[1].shares);
    state.counters["f16_over_f32"] = bench::median_ratio(seconds[0], seconds[1]);
    state.counters["f16_over_f32_bound"] = sides[0].bytes / sides[1].bytes;
    state.counters["stream_GB/s"] = bench::median(bandwidths) / 1e9;
    state.SetLabel(kKinds[kind].name);
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
    set_counters(state, kind, model.config(), context, bench::seconds_since(start));
}

void register_all(const bench::BenchArgs& args, bool long_contexts) {
    bench::register_stream_read();
    std::vector<Index> contexts = args.quick ? std::vector<Index>{256, 1024} : std::vector<Index>{2048, 8192};
    if (long_contexts && !args.quick) contexts.push_back(32768);
    for (const char* family : {"decode_cached", "decode_heads", "decode_paired", "decode_recompute"}) {
        const bool cached = std::string(family) == "decode_cached";
        const bool heads = std::string(family) == "decode_heads";
        const bool paired = std::string(family) == "decode_paired";
        for (int kind = 0; kind < kKindCount; ++kind) {
            if (!cached && !heads && !paired && kind > 1) continue;  // the recompute yardstick: dint and diff
            const AttentionKind attention = kKinds[kind].attention;
            if (heads && attention != AttentionKind::diff && attention != AttentionKind::softmax &&
                attention != AttentionKind::gda) {
                continue;
            }
          for (const KvPrecision precision : {KvPrecision::f32, KvPrecision::f16, KvPrecision::bf16}) {
            if (!cached && precision != KvPrecision::f32) continue;  // only decode_cached: half precision
            for (Index context : contexts) {
                if (!args.fits(context)) continue;
                for (int threads : {1, 2}) {
                    bench::Name name(family);
                    name("kind", kKinds[kind].name);
                    if (precision != KvPrecision::f32) name("kv", to_string(precision));
                    name("context", context)("threads", threads);
                    benchmark::RegisterBenchmark(name.str().c_str(),
                                                 [=](benchmark::State& s) {
                                                     if (cached) {
                                                         BM_decode_cached(s, kind, context, threads, precision);
                                                     } else if (heads) {
                                                         BM_decode_heads(s, kind, context, threads);
                                                     } else if (paired) {
                                                         BM_decode_paired(s, kind, context, threads);
                                                     } else {
                                                         BM_decode_recompute(s, kind, context, threads);
                                                     }
                                                 })
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond)
                        ->Iterations(cached || heads || paired ? kDecodeSteps : 1);
                }
            }
          }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    bool long_contexts = false;  // --long: context 32768 too
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--long") == 0) {
            long_contexts = true;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    argv[argc] = nullptr;
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args, long_contexts);
    return bench::run_main(argc, argv, args);
}
