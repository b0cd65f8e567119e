// Built alone with EIGEN_RUNTIME_NO_MALLOC: once a ForwardState exists, a model forward of every
// attention kind allocates nothing through Eigen (all activations and kernel workspaces live in
// the state, sized once for max_len).
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/decoder_model.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace diffattn;

using diffattn_nomalloc::without_malloc;

TEMPLATE_TEST_CASE("model forward allocates nothing after the state is made", "[model][nomalloc]", float, double) {
    using T = TestType;
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                               AttentionKind::shared_diff, AttentionKind::diff_v2}) {
        for (bool merged : {false, true}) {
            if (merged && kind != AttentionKind::shared_diff) continue;
            INFO(to_string(kind) << (merged ? " merged" : ""));
            ModelConfig c;
            c.attention = kind;
            c.hidden_size = 32;
            c.num_attention_heads = 4;
            c.num_key_value_heads = kind == AttentionKind::shared_diff ? 4 : 2;
            c.num_hidden_layers = 2;
            c.intermediate_size = 48;
            c.vocab_size = 64;
            c.shared_diff_rank = 2;
            c.head_dim = 6;
            DecoderModel<T> model = DecoderModel<T>::seeded(c, 1);
            if (merged) model.merge_shared_diff();
            std::vector<Token> tokens;
            for (Token t = 0; t < 40; ++t) tokens.push_back((7 * t + 3) % 64);
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
