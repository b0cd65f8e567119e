// Side by side in one binary: ggml's CPU flash attention (ggml_flash_attn_ext, the kernel
// llama.cpp's decode runs) and diffattn's kernel on the same decode shape, next to a streaming
// read of memory (the bandwidth yardstick). Not part of the project's build:
// bench/peers/ggml/run.sh builds it against a ggml checkout in a scratch folder
// (docs/benchmarks.md, "Decode against ggml").
//
// Shape (issue 20): one query row, S keys (default 8192), head dim 128, 16 heads (no GQA), no
// mask (every key visible, as in a decode step), K and V in f32 or f16.
//
//   stream_read/threads:T                the yardstick: stream_yardstick.hpp's vectorised sum over a
//                                        512 MB buffer, T threads (as bench_decode's)
//   ggml_decode/kv:<f32|f16>/threads:T   ggml_flash_attn_ext, graph planned once, a persistent
//                                        ggml threadpool of T threads
//   diffattn_decode/kv:<f32|f16>/threads:T
//                                        diffattn's softmax kernel per head, heads over the threads,
//                                        K and V head-major like a KvCache (docs/kv_cache.md); f16:
//                                        the kernel a half-precision KvCache's heads call
// Counters: bytes (what one call reads: K and V, or the buffer), GB/s = bytes / mean time per
// call, and share = that rate over bench::stream_bandwidth of the same thread count (the best of
// 3 streaming reads, the roofline bench_decode uses).
#include "../../bench_common.hpp"

#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/head_blocks.hpp"

#include <benchmark/benchmark.h>

#include <ggml-cpu.h>
#include <ggml.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t kHeadDim = 128;
constexpr int64_t kHeads = 16;
int64_t g_keys = 8192;

/// Times every iteration of `state` running `call` and sets the counters bytes and GB/s (bytes
/// one call reads / the mean time per call). Returns the rate in bytes/s.
template <typename Call>
double run_timed(benchmark::State& state, double bytes, Call&& call) {
    double seconds = 0;
    for (auto _ : state) seconds += bench::time_call(call);
    const double rate = bytes * static_cast<double>(state.iterations()) / seconds;
    state.counters["bytes"] = bytes;
    state.counters["GB/s"] = rate * 1e-9;
    return rate;
}

/// run_timed for a kernel on `threads` threads, with its share of the streaming-read bandwidth.
template <typename Call>
void run_kernel(benchmark::State& state, double bytes, int threads, Call&& call) {
    const double rate = run_timed(state, bytes, call);
    state.counters["share"] = rate / bench::stream_bandwidth(threads);
}

void stream_read(benchmark::State& state, int threads) {
    bench::stream_sum(threads);  // pages and thread team warm
    double sink = 0;
    run_timed(state, static_cast<double>(bench::kStreamBytes), [&] { sink += bench::stream_sum(threads); });
    benchmark::DoNotOptimize(sink);
}

void ggml_decode(benchmark::State& state, bool half, int threads) {
    const ggml_type kv_type = half ? GGML_TYPE_F16 : GGML_TYPE_F32;
    const std::size_t kv_elems = static_cast<std::size_t>(kHeadDim * g_keys * kHeads);
    ggml_init_params params{};
    params.mem_size = 2 * kv_elems * sizeof(float) + (std::size_t(64) << 20);
    params.no_alloc = false;
    ggml_context* ctx = ggml_init(params);
    ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, kHeadDim, 1, kHeads, 1);
    ggml_tensor* k = ggml_new_tensor_4d(ctx, kv_type, kHeadDim, g_keys, kHeads, 1);
    ggml_tensor* v = ggml_new_tensor_4d(ctx, kv_type, kHeadDim, g_keys, kHeads, 1);
    const bench::Matrix qv = bench::random_matrix(1, kHeadDim * kHeads, 1),
                        kv = bench::random_matrix(g_keys, kHeadDim * kHeads, 2),
                        vv = bench::random_matrix(g_keys, kHeadDim * kHeads, 3);
    std::memcpy(q->data, qv.data(), static_cast<std::size_t>(qv.size()) * sizeof(float));
    if (half) {
        ggml_fp32_to_fp16_row(kv.data(), static_cast<ggml_fp16_t*>(k->data), static_cast<int64_t>(kv_elems));
        ggml_fp32_to_fp16_row(vv.data(), static_cast<ggml_fp16_t*>(v->data), static_cast<int64_t>(kv_elems));
    } else {
        std::memcpy(k->data, kv.data(), kv_elems * sizeof(float));
        std::memcpy(v->data, vv.data(), kv_elems * sizeof(float));
    }
    ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f / std::sqrt(float(kHeadDim)), 0.0f, 0.0f);
    ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
    ggml_threadpool* pool = ggml_threadpool_new(&tp);
    ggml_cplan plan = ggml_graph_plan(graph, threads, pool);
    std::vector<std::uint8_t> work(plan.work_size);
    plan.work_data = work.data();
    run_kernel(state, 2.0 * static_cast<double>(kv_elems) * (half ? 2 : 4), threads, [&] {
        ggml_graph_compute(graph, &plan);
        benchmark::ClobberMemory();
    });
    ggml_threadpool_free(pool);
    ggml_free(ctx);
}

template <typename S>
void diffattn_decode(benchmark::State& state, int threads) {
    using bench::Index;
    using Stored = diffattn::RowMatrix<S>;
    const Index d = kHeadDim, heads = kHeads, keys = g_keys;
    // Laid out like a KvCache: head h's values are the rows [h S, (h + 1) S); its keys are one run
    // of S keys in blocks of 16, entry by entry (kernels/key_rows.hpp).
    const bench::Matrix q = bench::random_matrix(1, d * heads, 1);
    const Stored k = bench::random_matrix(heads * keys, d, 2).cast<S>(), v = bench::random_matrix(heads * keys, d, 3).cast<S>();
    diffattn::Vector<S> key_store(heads * diffattn::detail::whole_key_blocks(keys) * d);
    const auto key_blocks = diffattn::HeadBlocks<S>::blocked_keys(key_store.data(), heads, d, keys);
    for (Index h = 0; h < heads; ++h) {
        diffattn::HeadBlocks<S>::blocked_keys(key_store.data() + h * key_blocks.head_stride, 1, d, keys)
            .write_rows(0, k.middleRows(h * keys, keys));
    }
    bench::Matrix out(1, d * heads);
    std::vector<diffattn::AttentionWorkspace<float>> ws(static_cast<std::size_t>(heads));
    diffattn::AttentionOptions options;
    options.mask = diffattn::MaskKind::none;
    run_kernel(state, 2.0 * static_cast<double>(keys * d * heads) * sizeof(S), threads, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (Index h = 0; h < heads; ++h) {
            diffattn::detail::softmax_attention<float, S>(q.middleCols(h * d, d), key_blocks.as_const().keys(h, keys),
                                                          v.middleRows(h * keys, keys), out.middleCols(h * d, d),
                                                          options, &ws[static_cast<std::size_t>(h)]);
        }
        benchmark::ClobberMemory();
    });
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--keys=", 7) == 0) g_keys = std::atoll(argv[i] + 7);
    }
    ggml_cpu_init();
    const auto add = [](const std::string& name, auto fn) {
        benchmark::RegisterBenchmark(name.c_str(), fn)->Unit(benchmark::kMillisecond)->UseRealTime();
    };
    for (int t : {1, 2}) {
        add("stream_read/threads:" + std::to_string(t), [t](benchmark::State& s) { stream_read(s, t); });
    }
    for (int t : {1, 2}) {
        const std::string threads = "/threads:" + std::to_string(t);
        add("ggml_decode/kv:f32" + threads, [t](benchmark::State& s) { ggml_decode(s, false, t); });
        add("diffattn_decode/kv:f32" + threads, [t](benchmark::State& s) { diffattn_decode<float>(s, t); });
        add("ggml_decode/kv:f16" + threads, [t](benchmark::State& s) { ggml_decode(s, true, t); });
        add("diffattn_decode/kv:f16" + threads, [t](benchmark::State& s) { diffattn_decode<Eigen::half>(s, t); });
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
