// Built into test_nomalloc (EIGEN_RUNTIME_NO_MALLOC):
//  - once a ForwardState exists, a model forward of every attention kind allocates nothing through
//    Eigen (all activations and kernel workspaces live in the state, sized once for max_len);
//  - with a KvCache and a ForwardState made (and the state used once with a cache of this length,
//    which sizes its kernel workspaces for the context), prefill and decode of every attention kind
//    and DINT mode allocate nothing through Eigen.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "small_configs.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace diffattn;

using diffattn::test::small_config;
using diffattn_nomalloc::without_malloc;

namespace {

std::vector<Token> test_tokens(Token count) {
    std::vector<Token> tokens;
    for (Token t = 0; t < count; ++t) tokens.push_back((7 * t + 3) % 64);
    return tokens;
}

}  // namespace

TEMPLATE_TEST_CASE("model forward allocates nothing after the state is made", "[model][nomalloc]", float, double) {
    using T = TestType;
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                               AttentionKind::shared_diff, AttentionKind::diff_v2}) {
        for (bool merged : {false, true}) {
            if (merged && kind != AttentionKind::shared_diff) continue;
            INFO(to_string(kind) << (merged ? " merged" : ""));
            DecoderModel<T> model = DecoderModel<T>::seeded(small_config(kind), 1);
            if (merged) model.merge_shared_diff();
            std::vector<Token> tokens = test_tokens(40);
            ForwardState<T> state = model.make_state(70, 2);
            RowMatrix<T> logits(40, 64);
            RowMatrix<T> expected = model.logits(tokens);
            CHECK(without_malloc([&] {
                model.forward(tokens, state, logits);
                tokens.resize(20);
                model.forward(tokens, state, logits.topRows(20));  // shorter call, same state
            }) == 0);
            CHECK((logits.topRows(20) - expected.topRows(20)).cwiseAbs().maxCoeff() < 1e-5);
        }
    }
}

TEMPLATE_TEST_CASE("cached prefill and decode allocate nothing", "[model][kv_cache][nomalloc]", float, double) {
    using T = TestType;
    struct Case {
        AttentionKind kind;
        DintIntegral integral;
    };
    for (const Case& k : {Case{AttentionKind::softmax, DintIntegral::causal_softmax},
                          Case{AttentionKind::diff, DintIntegral::causal_softmax},
                          Case{AttentionKind::dint, DintIntegral::causal_softmax},
                          Case{AttentionKind::dint, DintIntegral::causal_mean},
                          Case{AttentionKind::shared_diff, DintIntegral::causal_softmax},
                          Case{AttentionKind::diff_v2, DintIntegral::causal_softmax}}) {
      // Every stored precision: a half-precision cache converts its tiles in the kernels' scratch.
      for (const KvPrecision precision : {KvPrecision::f32, KvPrecision::f16, KvPrecision::bf16}) {
        INFO(to_string(k.kind) << " " << to_string(k.integral) << " cache " << to_string(precision));
        const DecoderModel<T> model = DecoderModel<T>::seeded(small_config(k.kind, k.integral), 1);
        const std::vector<Token> prompt = test_tokens(20);
        const std::vector<Token> next = {5};
        KvCache<T> cache = model.make_cache(200, precision);  // decoding goes past one key tile (128)
        // Two threads (two kernel workspaces) for DINT, whose column sums need the context-long
        // workspace; one elsewhere (a parallel region per layer and token is slow on a busy machine).
        ForwardState<T> state = model.make_state(20, k.kind == AttentionKind::dint ? 2 : 1);
        RowMatrix<T> logits(20, 64);
        model.forward(prompt, state, logits, &cache);  // first use: sizes the workspaces for 200 keys
        cache.reset();
        CHECK(without_malloc([&] {
            model.forward(prompt, state, logits, &cache);                            // prefill
            for (int i = 0; i < 120; ++i) model.forward(next, state, logits.topRows(1), &cache);  // decode to 140 keys
            cache.reset();
            model.forward(prompt, state, logits, &cache);  // reuse
        }) == 0);
        CHECK(cache.length() == 20);
      }
    }
}

TEMPLATE_TEST_CASE("decode steps whose heads split their keys over 3 threads allocate nothing",
                   "[model][kv_cache][nomalloc][threads]", float, double) {
    // 4 heads on 3 threads: a one-token step runs the heads one after another, each kernel over
    // its keys on all 3 threads (detail::split_heads_over_keys), through the first workspace.
    using T = TestType;
    for (const auto& [kind, integral] : test::kCachedKinds) {
        INFO(to_string(kind) << " " << to_string(integral));
        const DecoderModel<T> model = DecoderModel<T>::seeded(small_config(kind, integral), 1);
        const std::vector<Token> prompt = test_tokens(20);
        const std::vector<Token> next = {5};
        KvCache<T> cache = model.make_cache(400);  // decoding goes past two key tiles (128)
        ForwardState<T> state = model.make_state(20, 3);
        state.set_min_parallel_flops(0);  // 3 threads even for one-token steps
        RowMatrix<T> logits(20, 64);
        model.forward(prompt, state, logits, &cache);  // first use: starts the team, sizes the workspaces
        model.forward(next, state, logits.topRows(1), &cache);
        cache.reset();
        CHECK(without_malloc([&] {
            model.forward(prompt, state, logits, &cache);
            for (int i = 0; i < 300; ++i) model.forward(next, state, logits.topRows(1), &cache);
        }) == 0);
        CHECK(cache.length() == 320);
        CHECK(logits.topRows(1).allFinite());
    }
}

TEMPLATE_TEST_CASE("batched decode steps allocate nothing", "[model][kv_cache][nomalloc][batch]", float, double) {
    // 4 sequences of different lengths decoded together (DecoderModel::forward_batch): the views of
    // their caches are made per layer on the stack.
    using T = TestType;
    for (const auto& [kind, integral] : test::kCachedKinds) {
        INFO(to_string(kind) << " " << to_string(integral));
        const DecoderModel<T> model = DecoderModel<T>::seeded(small_config(kind, integral), 1);
        ForwardState<T> state = model.make_state(20, 2);
        std::vector<KvCache<T>> caches;
        for (int s = 0; s < 4; ++s) caches.push_back(model.make_cache(300));
        std::vector<KvCache<T>*> batch;
        for (KvCache<T>& cache : caches) batch.push_back(&cache);
        const std::vector<Token> next = {5, 6, 7, 8};
        RowMatrix<T> logits(4, 64);
        for (int s = 0; s < 4; ++s) model.forward(test_tokens(5 + 5 * s), state, &caches[static_cast<std::size_t>(s)]);
        model.forward_batch(next, batch, state, logits);  // first use: sizes the workspaces for 300 keys
        CHECK(without_malloc([&] {
            for (int i = 0; i < 150; ++i) model.forward_batch(next, batch, state, logits);  // past a key tile
        }) == 0);
        CHECK(caches[3].length() == 20 + 151);
        CHECK(logits.allFinite());
    }
}
