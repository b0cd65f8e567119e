// Built alone with EIGEN_RUNTIME_NO_MALLOC: with a KvCache and a ForwardState made (and the state
// used once with a cache of this length, which sizes its kernel workspaces for the context),
// prefill and decode of every attention kind and DINT mode allocate nothing through Eigen.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace diffattn;

using diffattn_nomalloc::without_malloc;

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
        INFO(to_string(k.kind) << " " << to_string(k.integral));
        ModelConfig c;
        c.attention = k.kind;
        c.dint_integral = k.integral;
        c.hidden_size = 32;
        c.num_attention_heads = 4;
        c.num_key_value_heads = k.kind == AttentionKind::shared_diff ? 4 : 2;
        c.num_hidden_layers = 2;
        c.intermediate_size = 48;
        c.vocab_size = 64;
        c.shared_diff_rank = 2;
        c.head_dim = 6;
        const DecoderModel<T> model = DecoderModel<T>::seeded(c, 1);
        std::vector<Token> prompt;
        for (Token t = 0; t < 20; ++t) prompt.push_back((7 * t + 3) % 64);
        const std::vector<Token> next = {5};
        KvCache<T> cache = model.make_cache(200);  // decoding goes past one key tile (128)
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
