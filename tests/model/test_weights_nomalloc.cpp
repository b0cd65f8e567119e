// Built into test_nomalloc (EIGEN_RUNTIME_NO_MALLOC): a model whose weights are stored as bf16,
// q8_0 or q4_0 (docs/math.md §10) allocates nothing once its ForwardState and KvCache exist: a
// prefill decodes its weights into the state's panels (WeightPanels), a decode step reads the
// stored blocks directly, a batched step likewise.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "small_configs.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace diffattn;

using diffattn_nomalloc::without_malloc;

TEMPLATE_TEST_CASE("a model of stored weights prefills and decodes without allocating", "[model][weights][nomalloc]",
                   float, double) {
    using T = TestType;
    for (WeightFormat format : {WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0}) {
        INFO(to_string(format));
        ModelConfig config = test::small_config(AttentionKind::diff);
        config.hidden_size = 64;
        const DecoderModel<T> model = DecoderModel<T>::seeded(config, 1, format);
        std::vector<Token> prompt;
        for (Token t = 0; t < 20; ++t) prompt.push_back((7 * t + 3) % 64);
        const std::vector<Token> next = {5};
        KvCache<T> cache = model.make_cache(64), other = model.make_cache(64);
        ForwardState<T> state = model.make_state(20, 2);
        RowMatrix<T> logits(20, 64);
        model.forward(prompt, state, logits, &cache);  // first use: sizes the kernel workspaces
        cache.reset();
        model.forward(prompt, state, logits, &other);
        const std::vector<Token> pair = {1, 2};
        const std::vector<KvCache<T>*> caches = {&cache, &other};
        CHECK(without_malloc([&] {
            model.forward(prompt, state, logits, &cache);                    // prefill: the panels
            model.forward(next, state, logits.topRows(1), &cache);           // decode: the stored blocks
            model.forward_batch(pair, caches, state, logits.topRows(2));   // a batched step
        }) == 0);
    }
}

// ... and with BF16 products (docs/math.md §10.1): the prefill's projections round their rows in
// the panels' operand room, which set_compute gives the state, and its heads pack their tiles in
// the kernel workspaces; every path this CPU runs, f32 and bf16 weights.
TEST_CASE("a model with BF16 products prefills without allocating", "[model][weights][bf16][nomalloc]") {
    std::vector<Compute> computes = bf16_paths_here();
    computes.push_back(Compute::bf16);
    for (WeightFormat format : {WeightFormat::f32, WeightFormat::bf16}) {
        for (Compute compute : computes) {
            INFO(to_string(format) << ", " << to_string(compute));
            ModelConfig config = test::small_config(AttentionKind::dint);
            config.hidden_size = 64;
            const DecoderModel<float> model = DecoderModel<float>::seeded(config, 2, format);
            std::vector<Token> prompt;
            for (Token t = 0; t < 20; ++t) prompt.push_back((5 * t + 1) % 64);
            KvCache<float> cache = model.make_cache(64);
            ForwardState<float> state = model.make_state(20, 2);
            state.set_compute(compute);
            RowMatrix<float> logits(20, 64);
            model.forward(prompt, state, logits, &cache);  // first use: sizes the kernel workspaces
            cache.reset();
            CHECK(without_malloc([&] { model.forward(prompt, state, logits, &cache); }) == 0);
        }
    }
}
