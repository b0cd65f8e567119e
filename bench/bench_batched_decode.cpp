// Batched decoding (DecoderModel::forward_batch, docs/math.md §6) and the decode-time projections,
// held against the memory roofline.
//
// Model: seeded DIFF with GQA, hidden_size 1024, 8 layers, 16 heads over 4 key/value heads (maps of
// 32), intermediate_size 2816, vocab 8192: 98M parameters, 392 MB in float, a layout of the
// released checkpoints' kind (docs/checkpoints.md) at a size this machine decodes in milliseconds.
// Its cache takes 16 KB per token, so at context 1024 the weights are 24x one sequence's cache:
// a step is dominated by reading the weights, which a batch shares.
//
//   stream_read/threads:<T>     the yardstick: the bandwidth of a vectorised sum over 512 MB of
//                               huge pages (stream_yardstick.hpp).
//   batched_decode/batch:<B>/context:<C>/threads:<T>
//                               B sequences, each with its own cache holding C tokens (one prefill,
//                               copied B times, outside the timing); each iteration is one
//                               forward_batch step feeding one token to every sequence.
//   batched_paired/batch:8/context:<C>/threads:<T>
//                               issue 20's ratio in one loop: a step of 8 sequences and a step of
//                               one in turns (bench::time_in_turns), each timed alone, so both meet
//                               the same host; batch_over_single, the median over the iterations of
//                               8 x the single step's time over the batch step's (the batch's
//                               tokens/s over one sequence's); batch_tokens/s and single_tokens/s.
//   linear/rows:<N>/threads:<T> the decode-time projection y = x W^T (layers/linear.hpp) of N
//                               tokens by a weight of a 7B model's SwiGLU, [11008 x 4096] (180 MB:
//                               past every cache, so it streams from memory).
// Counters: tokens/s (B per step); step_bytes, what a step must read at least (every weight but the
// token embedding, of which B rows, and each sequence's cached keys and values); stream_GB/s, the
// step loop's own yardstick (bench::StreamYardstick: streaming reads just before and after it);
// roofline_tokens/s = B * stream_GB/s / step_bytes; roofline_share = tokens/s / roofline_tokens/s;
// step_GFLOP, its arithmetic; compute_floor_tokens/s = B * (Eigen SGEMM's rate on as many flops,
// same threads) / step flops; bound_share = tokens/s over the lower of the two floors. linear:
// bytes the weight holds, the share of the stream bandwidth its read reaches (the loop's own
// yardstick, stream_GB/s, as for the steps), and its flop rate over SGEMM's (vs_gemm).
//
// Run: bench_batched_decode --benchmark_counters_tabular=true   (--quick: batches 1 and 8 only)
#include "bench_common.hpp"

#include "diffattn/layers/linear.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace {

using namespace diffattn;

constexpr Index kSteps = 16;  // iterations of a batched benchmark: steps per run

ModelConfig bench_config() {
    ModelConfig c;
    c.attention = AttentionKind::diff;
    c.hidden_size = 1024;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 4;
    c.num_hidden_layers = 8;
    c.intermediate_size = 2816;
    c.vocab_size = 8192;
    return c;
}

const DecoderModel<float>& bench_model() {
    static const DecoderModel<float> model = DecoderModel<float>::seeded(bench_config(), 2024);
    return model;
}

/// A cache holding `context` tokens of the bench model, prefilled once per context.
const KvCache<float>& prefilled(Index context) {
    static std::map<Index, std::unique_ptr<KvCache<float>>> caches;
    auto& cache = caches[context];
    if (!cache) {
        const DecoderModel<float>& model = bench_model();
        cache = std::make_unique<KvCache<float>>(model.make_cache(context + kSteps));
        std::vector<Token> prompt;
        for (Index i = 0; i < context; ++i) prompt.push_back(static_cast<Token>((131 * i + 7) % 8192));
        ForwardState<float> state = model.make_state(context, 2);
        model.forward(prompt, state, cache.get());
    }
    return *cache;
}

/// Bytes a step of `batch` sequences at `context` cached tokens must read at least.
double step_bytes(const DecoderModel<float>& model, Index batch, Index context) {
    const ModelConfig& c = model.config();
    const AttentionConfig a = c.attention_config();
    double weights = static_cast<double>(model.parameter_count());
    if (!c.tie_word_embeddings) weights -= static_cast<double>((c.vocab_size - batch) * c.hidden_size);
    const double cache = static_cast<double>(batch) * static_cast<double>(c.num_hidden_layers) *
                         static_cast<double>(context) * static_cast<double>(a.k_width() + a.v_width());
    return (weights + cache) * sizeof(float);
}

/// Flops of a step of `batch` sequences at `context` cached tokens: 2 per weight of every product
/// (all but the embedding) per sequence, and the heads' 2 S (q_width + maps x value_dim) per layer.
double step_flops(const DecoderModel<float>& model, Index batch, Index context) {
    const ModelConfig& c = model.config();
    const AttentionConfig a = c.attention_config();
    const double products = static_cast<double>(model.parameter_count() -
                                                (c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size));
    const double heads = static_cast<double>(c.num_hidden_layers) * static_cast<double>(context + 1) *
                         static_cast<double>(a.q_width() + a.n_query_maps() * a.value_dim());
    return 2.0 * static_cast<double>(batch) * (products + heads);
}

/// B sequences decoding together, each with its own copy of the prefilled cache at `context`.
class Batch {
public:
    Batch(Index batch, Index context, int threads)
        : caches_(static_cast<std::size_t>(batch), prefilled(context)),
          buffers_(bench_model().make_state(batch, threads)),
          logits_(batch, bench_model().config().vocab_size),
          next_(static_cast<std::size_t>(batch), 1) {
        for (KvCache<float>& cache : caches_) pointers_.push_back(&cache);
    }

    /// One forward_batch step: a token into every sequence, and each one's next token (greedy).
    void step(benchmark::State& state) {
        if (caches_.front().remaining() == 0) state.SkipWithError("cache full: run with the fixed iteration count");
        bench_model().forward_batch(next_, pointers_, buffers_, logits_);
        for (std::size_t b = 0; b < next_.size(); ++b) {
            Index best = 0;
            logits_.row(static_cast<Index>(b)).maxCoeff(&best);
            next_[b] = static_cast<Token>(best);
        }
        benchmark::DoNotOptimize(next_.data());
    }

private:
    std::vector<KvCache<float>> caches_;
    std::vector<KvCache<float>*> pointers_;
    ForwardState<float> buffers_;
    RowMatrix<float> logits_;
    std::vector<Token> next_;
};

void BM_batched_decode(benchmark::State& state, Index batch, Index context, int threads) {
    const DecoderModel<float>& model = bench_model();
    Batch sequences(batch, context, threads);
    bench::StreamYardstick yardstick(threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) sequences.step(state);
    const double seconds = bench::seconds_since(start);
    const double tokens_per_second = static_cast<double>(batch * state.iterations()) / seconds;
    const double bytes = step_bytes(model, batch, context + kSteps / 2);
    const double bandwidth = yardstick.after();
    const double roofline = static_cast<double>(batch) * bandwidth / bytes;
    state.counters["tokens/s"] = tokens_per_second;
    state.counters["stream_GB/s"] = bandwidth / 1e9;
    state.counters["step_ms"] = 1e3 * seconds / static_cast<double>(state.iterations());
    state.counters["step_bytes"] = bytes;
    state.counters["roofline_tokens/s"] = roofline;
    state.counters["roofline_share"] = tokens_per_second / roofline;
    // The arithmetic floor: the step's flops at the rate of Eigen's SGEMM of equal flops (this
    // binary, same threads). A batch of 8 does 16 flops per weight it reads, which may take longer
    // than reading it.
    const double flops = step_flops(model, batch, context + kSteps / 2);
    const double compute_floor = static_cast<double>(batch) * bench::gemm_rate_equal_flops(flops, threads).mean * 1e9 / flops;
    state.counters["step_GFLOP"] = flops / 1e9;
    state.counters["compute_floor_tokens/s"] = compute_floor;
    state.counters["bound_share"] = tokens_per_second / std::min(roofline, compute_floor);
}

/// batched_paired (the file comment): a step of `batch` sequences and a step of one in turns.
void BM_batched_paired(benchmark::State& state, Index batch, Index context, int threads) {
    Batch many(batch, context, threads), one(1, context, threads);
    const std::vector<std::function<void()>> steps = {[&] { many.step(state); }, [&] { one.step(state); }};
    const auto seconds = bench::time_in_turns(state, steps);
    state.counters["batch_tokens/s"] = static_cast<double>(batch) * bench::calls_per_second(seconds[0]);
    state.counters["single_tokens/s"] = bench::calls_per_second(seconds[1]);
    state.counters["batch_over_single"] = static_cast<double>(batch) * bench::median_ratio(seconds[1], seconds[0]);
}

void BM_linear(benchmark::State& state, Index rows, int threads) {
    static const RowMatrix<float> weight = bench::random_matrix(11008, 4096, 3, 0.03f);
    const RowMatrix<float> x = bench::random_matrix(rows, 4096, 4);
    RowMatrix<float> y(rows, 11008);
    ExecutionContext context{threads};
    context.min_parallel_flops = 0;  // the thread count asked for, however small the product
    linear<float>(x, weight, y, context);
    bench::StreamYardstick yardstick(threads);
    const auto start = bench::Clock::now();
    for (auto _ : state) {
        linear<float>(x, weight, y, context);
        benchmark::DoNotOptimize(y.data());
    }
    const double seconds = bench::seconds_since(start) / static_cast<double>(state.iterations());
    const double bytes = static_cast<double>(weight.size()) * sizeof(float);
    const double bandwidth = yardstick.after();
    state.counters["weight_bytes"] = bytes;
    state.counters["GB/s"] = bytes / seconds / 1e9;
    state.counters["stream_GB/s"] = bandwidth / 1e9;
    state.counters["bandwidth_share"] = bytes / seconds / bandwidth;
    const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(weight.size());
    state.counters["vs_gemm"] = flops / seconds / 1e9 / bench::gemm_rate_equal_flops(flops, threads).mean;
}

void register_all(const bench::BenchArgs& args) {
    bench::register_stream_read();
    const std::vector<Index> batches = args.quick ? std::vector<Index>{1, 8} : std::vector<Index>{1, 2, 4, 8, 16};
    for (Index batch : batches) {
        for (int threads : {1, 2}) {
            bench::Name name("batched_decode");
            name("batch", batch)("context", 1024)("threads", threads);
            benchmark::RegisterBenchmark(name.str().c_str(),
                                         [=](benchmark::State& s) { BM_batched_decode(s, batch, 1024, threads); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->Iterations(kSteps);
        }
    }
    for (int threads : {1, 2}) {  // issue 20's target: batch 8 at >= 5x the tokens/s of batch 1
        bench::Name name("batched_paired");
        name("batch", 8)("context", 1024)("threads", threads);
        benchmark::RegisterBenchmark(name.str().c_str(),
                                     [=](benchmark::State& s) { BM_batched_paired(s, 8, 1024, threads); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(kSteps);
    }
    for (Index rows : batches) {
        for (int threads : {1, 2}) {
            bench::Name name("linear");
            name("rows", rows)("threads", threads);
            benchmark::RegisterBenchmark(name.str().c_str(), [=](benchmark::State& s) { BM_linear(s, rows, threads); })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchArgs args = bench::BenchArgs::parse(argc, argv);
    register_all(args);
    return bench::run_main(argc, argv, args);
}
