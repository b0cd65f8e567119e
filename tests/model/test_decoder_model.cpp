// The decoder model: parameter counts, causality, the encoder stack, thread-count independence,
// concurrent use of one const model, argument checks, Shared DIFF merging.
#include "model_files.hpp"

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using namespace diffattn;

namespace {

using diffattn::test::small_config;

const AttentionKind kKinds[] = {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                                AttentionKind::shared_diff, AttentionKind::diff_v2};

std::vector<Token> tokens_of(Index n, Index vocab, unsigned seed) {
    std::vector<Token> t;
    for (Index i = 0; i < n; ++i) t.push_back(static_cast<Token>((seed + 37 * i + i * i) % vocab));
    return t;
}

}  // namespace

TEST_CASE("model parameter count equals its tensors", "[model][parameters]") {
    for (AttentionKind kind : kKinds) {
        for (bool tied : {false, true}) {
            INFO(to_string(kind) << (tied ? " tied" : ""));
            ModelConfig c = small_config(kind);
            c.tie_word_embeddings = tied;
            DecoderModel<float> model(c);
            CHECK(model.parameters().parameter_count() == model.parameter_count());
            const Index D = 32, V = 64, F = 48;
            CHECK(model.parameter_count() ==
                  V * D * (tied ? 1 : 2) + 2 * (c.attention_config().parameter_count() + 2 * D + 3 * D * F) + D);
        }
    }
}

TEMPLATE_TEST_CASE("causal models: a prefix's logits do not see later tokens; encoders do", "[model]", double) {
    using T = TestType;
    for (AttentionKind kind : kKinds) {
        for (bool causal : {true, false}) {
            INFO(to_string(kind) << (causal ? " causal" : " encoder"));
            ModelConfig c = small_config(kind);
            c.causal = causal;
            const DecoderModel<T> model = DecoderModel<T>::seeded(c, 7);
            std::vector<Token> tokens = tokens_of(20, 64, 3);
            const RowMatrix<T> full = model.logits(tokens);
            tokens.back() = (tokens.back() + 1) % 64;
            const RowMatrix<T> changed = model.logits(tokens);
            const double prefix_change = (full.topRows(19) - changed.topRows(19)).cwiseAbs().maxCoeff();
            if (causal) {
                CHECK(prefix_change < 1e-12);
            } else {
                CHECK(prefix_change > 1e-6);
            }
        }
    }
}

TEMPLATE_TEST_CASE("logits are identical for 1 and 2 threads", "[model][threads]", float, double) {
    using T = TestType;
    for (AttentionKind kind : kKinds) {
        INFO(to_string(kind));
        const DecoderModel<T> model = DecoderModel<T>::seeded(small_config(kind), 5);
        const std::vector<Token> tokens = tokens_of(70, 64, 1);
        ForwardState<T> one = model.make_state(70, 1), two = model.make_state(70, 2);
        two.context.min_parallel_flops = 0;  // 2 threads even for this small model
        const RowMatrix<T> a = model.forward(tokens, one);
        const RowMatrix<T> b = model.forward(tokens, two);
        CHECK((a - b).cwiseAbs().maxCoeff() == T(0));
    }
}

TEST_CASE("one const model serves several threads, each with its own ForwardState", "[model][threads]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::dint), 9);
    const std::vector<Token> a = tokens_of(40, 64, 1), b = tokens_of(25, 64, 2);
    const RowMatrix<float> expected_a = model.logits(a), expected_b = model.logits(b);
    RowMatrix<float> got_a, got_b;
    std::thread first([&] {
        ForwardState<float> state = model.make_state(40);
        for (int i = 0; i < 5; ++i) got_a = model.forward(a, state);
    });
    std::thread second([&] {
        ForwardState<float> state = model.make_state(40);
        for (int i = 0; i < 5; ++i) got_b = model.forward(b, state);
    });
    first.join();
    second.join();
    CHECK((got_a - expected_a).cwiseAbs().maxCoeff() == 0.0f);
    CHECK((got_b - expected_b).cwiseAbs().maxCoeff() == 0.0f);
}

TEST_CASE("forward checks tokens, lengths and the state", "[model][errors]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::diff), 1);
    ForwardState<float> state = model.make_state(8);
    CHECK_THROWS_WITH(model.forward({1, 2, 64}, state), Catch::Contains("token 2 is 64"));
    CHECK_THROWS_AS(model.forward({1, -1}, state), ShapeError);
    CHECK_THROWS_AS(model.forward(tokens_of(9, 64, 0), state), ShapeError);
    ForwardState<float> other = DecoderModel<float>(small_config(AttentionKind::softmax)).make_state(8);
    CHECK_THROWS_AS(model.forward({1, 2}, other), ShapeError);
    RowMatrix<float> wrong(2, 63);
    CHECK_THROWS_AS(model.forward({1, 2}, state, wrong), ShapeError);
    CHECK(model.forward({}, state).rows() == 0);
    // A state is reusable with shorter and longer (<= max_len) inputs.
    const RowMatrix<float> four = model.forward({1, 2, 3, 4}, state);
    model.forward(tokens_of(8, 64, 5), state);
    CHECK((model.forward({1, 2, 3, 4}, state) - four).cwiseAbs().maxCoeff() == 0.0f);
}

TEST_CASE("a state of a model with another rope_theta is refused", "[model][errors]") {
    ModelConfig c = small_config(AttentionKind::diff);
    const DecoderModel<float> model = DecoderModel<float>::seeded(c, 1);
    c.rope_theta = 500000.0;  // the same buffer widths, but the state's rotary table holds other angles
    ForwardState<float> other = DecoderModel<float>(c).make_state(8);
    CHECK_THROWS_WITH(model.forward({1, 2, 3}, other),
                      Catch::Contains("the ForwardState was made for another configuration"));
}

TEST_CASE("a causal model with dint global_mean is a ConfigError; an encoder is fine", "[model][errors]") {
    ModelConfig c = small_config(AttentionKind::dint);
    c.dint_integral = DintIntegral::global_mean;
    CHECK_THROWS_AS(DecoderModel<double>(c), ConfigError);
    c.causal = false;
    const DecoderModel<double> encoder = DecoderModel<double>::seeded(c, 3);
    CHECK(encoder.logits(tokens_of(10, 64, 0)).allFinite());
}

TEMPLATE_TEST_CASE("Shared DIFF model: merged projections give the same logits", "[model][shared_diff]", float,
                   double) {
    using T = TestType;
    DecoderModel<T> model = DecoderModel<T>::seeded(small_config(AttentionKind::shared_diff), 4);
    const std::vector<Token> tokens = tokens_of(30, 64, 4);
    const RowMatrix<T> factored = model.logits(tokens);
    model.merge_shared_diff();
    const RowMatrix<T> merged = model.logits(tokens);
    const double scale = std::max<double>(1.0, factored.cwiseAbs().maxCoeff());
    CHECK((merged - factored).cwiseAbs().maxCoeff() / scale < 64 * std::numeric_limits<T>::epsilon());
    CHECK((merged - factored).cwiseAbs().maxCoeff() / scale > 0);  // really a different computation path
}
