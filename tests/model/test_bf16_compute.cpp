// A model with BF16 products (ForwardState::set_compute, docs/math.md §7.1): the compute reaches
// the heads of a prefill (its logits change), a decode step of one token multiplies in float
// whatever the state says, and generation takes the mode from GenerationOptions. (The kernels'
// accuracy is tests/kernels/test_bf16_products.cpp's; the models' logit differences are in
// docs/model.md.)
#include "model_files.hpp"

#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace diffattn;
using diffattn::test::kCachedKinds;
using diffattn::test::small_config;

namespace {

std::vector<Token> bf16_prompt_tokens(Index n, Index vocab) {
    std::vector<Token> tokens;
    for (Index i = 0; i < n; ++i) tokens.push_back(static_cast<Token>((7 * i + 3) % vocab));
    return tokens;
}

}  // namespace

TEST_CASE("models with BF16 products: the prefill's heads take them, a one-token decode step stays in float",
          "[model][bf16]") {
    for (const auto& cached : kCachedKinds) {
        ModelConfig config = small_config(cached.kind, cached.integral);
        INFO(to_string(cached.kind) << " " << to_string(cached.integral));
        const DecoderModel<float> model = DecoderModel<float>::seeded(config, 7);
        const std::vector<Token> prompt = bf16_prompt_tokens(3 * kQueryTile + 5, config.vocab_size);
        const Index n = static_cast<Index>(prompt.size());
        for (Compute compute : {Compute::bf16, Compute::bf16_widened}) {
            INFO(to_string(compute));
            ForwardState<float> f32 = model.make_state(n, 2), bf16 = model.make_state(n, 2);
            bf16.set_compute(compute);
            CHECK(bf16.context().compute == compute);
            const RowMatrix<float> plain = model.forward(prompt, f32);
            const RowMatrix<float> rounded = model.forward(prompt, bf16);
            CHECK(rounded.allFinite());
            CHECK(rounded != plain);  // the heads' products changed
            // The same prefill in both caches, then one token each: a decode step of one row
            // multiplies in float whatever the state's compute.
            KvCache<float> cache1 = model.make_cache(n + 1), cache2 = model.make_cache(n + 1);
            model.forward(prompt, bf16, &cache1);
            model.forward(prompt, bf16, &cache2);
            const RowMatrix<float> step_bf16 = model.forward({5}, bf16, &cache1);
            const RowMatrix<float> step_f32 = model.forward({5}, f32, &cache2);
            CHECK(step_bf16 == step_f32);
        }
    }
    // Generation: the options' compute reaches its state (the prompt is a prefill of 9 tokens).
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::dint), 3);
    GenerationOptions options;
    options.max_new_tokens = 4;
    options.compute = Compute::bf16;
    const std::vector<Token> generated = generate(
        model, bf16_prompt_tokens(9, 64), options, [](const auto& row) { return argmax_token(row); }, [](Token) {});
    CHECK(generated.size() == 4);
}
