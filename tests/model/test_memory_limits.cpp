// Sizes the machine cannot hold are refused before anything is allocated: a ForwardState, a
// KvCache or a generation asking for more bytes than the machine's physical memory
// (core/memory_limit.hpp) is a ShapeError naming the bytes, not std::bad_alloc or
// std::length_error from inside, and lengths past ModelConfig::max_positions are refused too.
#include "model_files.hpp"

#include "diffattn/model/generate.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using Catch::Matchers::Contains;

namespace {

/// The ShapeError message of `action`, or "no error" (any other exception escapes and fails the test).
template <typename Action>
std::string shape_error_of(Action&& action) {
    try {
        action();
    } catch (const ShapeError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("a state, a cache or a generation too large for the machine is a ShapeError", "[model][memory]") {
    const ModelConfig config = test::small_config(AttentionKind::dint);
    const DecoderModel<float> model(config);
    const Index huge = Index(1) << 40;  // 2^40 tokens: terabytes of buffers for any model
    CHECK_THAT(shape_error_of([&] { model.make_state(huge); }),
               Contains("ForwardState") && Contains("1099511627776") && Contains("bytes"));
    CHECK_THAT(shape_error_of([&] { model.make_cache(huge); }),
               Contains("KvCache") && Contains("1099511627776") && Contains("bytes"));
    CHECK_THAT(shape_error_of([&] { generate(model, {1, 2, 3}, huge, true); }),
               Contains("generate") && Contains("1099511627776"));
    CHECK_THAT(shape_error_of([&] { generate(model, {1, 2, 3}, huge, false); }),
               Contains("generate") && Contains("1099511627776"));
    // Past the positions the rotary table is validated for, whatever the memory.
    CHECK_THAT(shape_error_of([&] { model.make_state(Index(1) << 31); }), Contains("at most 2147483647"));
    CHECK_THAT(shape_error_of([&] { model.make_cache(Index(1) << 31); }), Contains("at most 2147483647"));
    CHECK_THAT(shape_error_of([&] { generate(model, {1}, Index(1) << 31, true); }), Contains("2147483647"));
    // Normal sizes still work.
    CHECK(model.make_state(4096).max_len() == 4096);
    CHECK(model.make_cache(4096).max_len() == 4096);
    CHECK(generate(model, {1, 2, 3}, 4, true).size() == 4);
}

TEST_CASE("a huge generation without a cache is refused before the first step", "[model][memory]") {
    // The no-cache path recomputes the full forward over prompt + count tokens: the logits of a
    // 131072-token vocabulary alone take 1e6 x 131072 x 8 bytes (1 TB) for a million tokens.
    const ModelConfig config = test::tiny_config(AttentionKind::diff, 1 << 17);
    const DecoderModel<double> model(config);
    CHECK_THAT(shape_error_of([&] { generate(model, {1, 2}, 1000000, false); }),
               Contains("generate") && Contains("1000000") && Contains("bytes"));
}

TEST_CASE("the bytes a state and a cache are checked for are the bytes they hold", "[model][memory]") {
    for (const auto& [kind, integral] : test::kCachedKinds) {
        const ModelConfig config = test::small_config(kind, integral);
        INFO(to_string(kind) << " " << to_string(integral));
        const Index n = 37;
        // The state: every buffer that grows with max_len, counted from the objects themselves.
        const ForwardState<double> state(config, n);
        const AttentionScratch<double>& a = state.layer.attention;
        const Index scalars = state.x.size() + state.normed.size() + state.logits.size() +
                              state.layer.normed.size() + state.layer.branch.size() + state.layer.mlp.gate.size() +
                              state.layer.mlp.up.size() + a.q.size() + a.k.size() + a.v.size() + a.heads.size() +
                              a.second.size() + a.lambda_gate.size() + a.shared_base.size() + a.shared_xa.size() +
                              a.rotary.max_positions() * a.rotary.head_dim();
        CHECK(ForwardState<double>::bytes(config, n) == static_cast<long double>(scalars * sizeof(double)));
        CHECK(ForwardState<float>::bytes_per_token(config) * 2 == ForwardState<double>::bytes_per_token(config));
        const KvCache<float> cache(config, n);
        CHECK(KvCache<float>::bytes(config, n) == static_cast<long double>(cache.bytes()));
    }
}

TEST_CASE("the memory limit is the physical memory", "[model][memory]") {
    const long double limit = memory_limit_bytes();
    CHECK(limit > 0);
    CHECK(limit <= static_cast<long double>(std::numeric_limits<std::ptrdiff_t>::max()));
    CHECK_THROWS_WITH(require_memory(limit + 1, "a test buffer"),
                      Contains("a test buffer would take") && Contains("bytes of physical memory"));
    CHECK_NOTHROW(require_memory(limit, "a test buffer"));
}

TEST_CASE("check_generate throws what generate throws, before it allocates", "[model][memory][generate]") {
    const DecoderModel<float> model(test::small_config(AttentionKind::dint));
    CHECK_NOTHROW(check_generate(model, 3, 0));
    CHECK_NOTHROW(check_generate(model, 3, 1000));
    CHECK_THROWS_AS(check_generate(model, 0, 3), ShapeError);
    CHECK_THROWS_AS(check_generate(model, 3, -1), ShapeError);
    CHECK_THROWS_WITH(check_generate(model, 3, Index(1) << 40, false), Contains("1099511627776"));
    ModelConfig encoder = test::small_config(AttentionKind::diff);
    encoder.causal = false;
    const DecoderModel<float> encoder_model(encoder);
    CHECK_THROWS_AS(check_generate(encoder_model, 3, 4, true), OptionError);
    CHECK_NOTHROW(check_generate(encoder_model, 3, 4, false));
}
