// Incremental decoding with a KV cache (docs/math.md §6): feeding a sequence whole, token by token or in
// chunks gives the logits of one full forward; greedy generation with and without the cache picks
// the same tokens; capacity, reset and refusals.
//
// Tolerances. The full forward (no cache) is the reference, computed in double.
//   double: cached vs full, max |diff| <= 1e-12 m, m = max(1, max |logit|): the two paths do the
//           same arithmetic except for GEMM shapes and tile order (observed <= 7.3e-16 m).
//   float:  the docs/math.md §7 criterion lifted to the model: with e_full = max |full float - full double|
//           (the error of the plain float forward), the cached float logits must satisfy
//           max |cached float - full double| <= 2 e_full + 16 eps_float m. The absolute term (1e-6
//           in docs/math.md §7, for kernel outputs of size ~1) is scaled to logits of size m and to the
//           two-layer stack. Observed: e_full 1.7-3.2 eps m, the cached paths 1.2-2.9 eps m; a
//           path with a real error (a wrong position, a missed history row) is off by >= 1e-3.
//   golden: cached logits against the PyTorch golden files with test_golden_models' tolerances
//           (double 1e-9 m, float 64 eps_float m).
#include "../error_messages.hpp"
#include "golden_files.hpp"
#include "model_files.hpp"

#include "diffattn/core/huge_pages.hpp"
#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using model_test::cached_logits;
using model_test::golden_model_dirs;
using model_test::kEpsFloat;
using model_test::magnitude;
using model_test::max_abs_diff;
using model_test::Schedule;
using model_test::schedules;
using diffattn::test::small_config;

namespace {

struct NamedConfig {
    std::string name;
    ModelConfig config;
    bool merged = false;  // shared_diff: project through merged weights
};

/// Every attention kind and DINT mode, with and without GQA (both pairings).
std::vector<NamedConfig> seeded_configs() {
    std::vector<NamedConfig> out;
    out.push_back({"softmax", small_config(AttentionKind::softmax, 4)});
    out.push_back({"softmax_gqa", small_config(AttentionKind::softmax, 2)});
    out.push_back({"diff", small_config(AttentionKind::diff, 4)});
    out.push_back({"diff_gqa_per_head", small_config(AttentionKind::diff, 2)});
    NamedConfig per_subhead{"diff_gqa_per_subhead", small_config(AttentionKind::diff, 2)};
    per_subhead.config.diff_gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back(per_subhead);
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        for (Index kv_heads : {Index(4), Index(2)}) {
            for (DiffGqaPairing pairing : {DiffGqaPairing::per_head, DiffGqaPairing::per_subhead}) {
                if (kv_heads == 4 && pairing == DiffGqaPairing::per_subhead) continue;  // same as per_head
                NamedConfig c{std::string("dint_") + to_string(integral) + (kv_heads == 2 ? "_gqa_" : "") +
                                  (kv_heads == 2 ? to_string(pairing) : ""),
                              small_config(AttentionKind::dint, kv_heads)};
                c.config.dint_integral = integral;
                c.config.diff_gqa_pairing = pairing;
                out.push_back(c);
            }
        }
    }
    out.push_back({"shared_diff", small_config(AttentionKind::shared_diff, 4)});
    out.push_back({"shared_diff_merged", small_config(AttentionKind::shared_diff, 4), true});
    out.push_back({"diff_v2_gqa", small_config(AttentionKind::diff_v2, 2)});
    out.push_back({"gda_ratio_2_gqa", small_config(AttentionKind::gda, 2)});
    out.push_back({"gda_ratio_4_one_kv_pair", small_config(AttentionKind::gda, 1)});
    return out;
}

template <typename T>
DecoderModel<T> seeded_model(const NamedConfig& c, std::uint64_t seed = 7) {
    DecoderModel<T> model = DecoderModel<T>::seeded(c.config, seed);
    if (c.merged) model.merge_shared_diff();
    return model;
}

std::vector<Token> test_tokens(Index n, Index vocab) {
    std::vector<Token> tokens;
    for (Index i = 0; i < n; ++i) tokens.push_back(static_cast<Token>((37 * i + 11) % vocab));
    return tokens;
}

}  // namespace

TEST_CASE("cached logits match the full forward for every attention kind and DINT mode", "[model][kv_cache]") {
    // 150 tokens: past one 64-row query block and one 128-key tile of the kernels.
    for (const NamedConfig& c : seeded_configs()) {
        INFO("model " << c.name);
        const DecoderModel<double> model_d = seeded_model<double>(c);
        const DecoderModel<float> model_f = seeded_model<float>(c);
        const std::vector<Token> tokens = test_tokens(c.name.rfind("dint", 0) == 0 ? 150 : 70, c.config.vocab_size);
        const RowMatrix<double> full_d = model_d.logits(tokens);
        const RowMatrix<double> full_f = model_f.logits(tokens).cast<double>();
        const double m = magnitude(full_d);
        const double e_full = max_abs_diff(full_f, full_d);
        for (const Schedule& schedule : schedules(static_cast<Index>(tokens.size()))) {
            INFO("schedule " << schedule.name);
            const double e_double = max_abs_diff(cached_logits(model_d, tokens, schedule.chunks), full_d);
            const double e_float =
                max_abs_diff(cached_logits(model_f, tokens, schedule.chunks).cast<double>(), full_d);
            std::printf("kv %-36s %-16s T=%3d  double %.2e m  float %.2f eps m (full float %.2f eps m)\n",
                        c.name.c_str(), schedule.name, static_cast<int>(tokens.size()), e_double / m,
                        e_float / (kEpsFloat * m), e_full / (kEpsFloat * m));
            CHECK(e_double <= 1e-12 * m);
            CHECK(e_float <= 2 * e_full + 16 * kEpsFloat * m);
        }
    }
}

TEMPLATE_TEST_CASE("cached logits of the golden models match the golden files", "[model][kv_cache][golden]", double,
                   float) {
    using T = TestType;
    Index causal_models = 0;
    for (const std::filesystem::path& dir : golden_model_dirs()) {
        const std::string name = dir.filename().string();
        INFO("model " << name);
        const DecoderModel<T> model = DecoderModel<T>::load(dir);
        if (!model.config().causal) {  // encoders (incl. DINT global_mean) refuse a cache
            CHECK_THROWS_AS(model.make_cache(8), OptionError);
            continue;
        }
        ++causal_models;
        const model_test::Golden golden_file = model_test::read_golden(dir);
        const std::vector<Token>& tokens = golden_file.tokens;
        const RowMatrix<double>& golden = golden_file.logits;
        const double m = magnitude(golden);
        double worst = 0;
        for (const Schedule& schedule : schedules(static_cast<Index>(tokens.size()))) {
            INFO("schedule " << schedule.name);
            const double diff =
                max_abs_diff(cached_logits(model, tokens, schedule.chunks).template cast<double>(), golden);
            CHECK(diff <= model_test::golden_tolerance<T>(m));
            worst = std::max(worst, diff);
        }
        std::printf("kv golden %-22s %-6s T=%3d  max diff over the schedules %.3e  (tolerance %.1e)\n",
                    name.c_str(), std::is_same_v<T, double> ? "double" : "float",
                    static_cast<int>(tokens.size()), worst, model_test::golden_tolerance<T>(m));
    }
    CHECK(causal_models >= 10);
}

TEMPLATE_TEST_CASE("prefill into an empty cache is the plain forward, bit for bit", "[model][kv_cache]", double,
                   float) {
    using T = TestType;
    for (const NamedConfig& c : seeded_configs()) {
        INFO("model " << c.name);
        const DecoderModel<T> model = seeded_model<T>(c);
        const std::vector<Token> tokens = test_tokens(40, c.config.vocab_size);
        const RowMatrix<T> full = model.logits(tokens);
        CHECK(cached_logits(model, tokens, {40}) == full);
    }
}

TEMPLATE_TEST_CASE("cached logits do not depend on the thread count", "[model][kv_cache]", double, float) {
    using T = TestType;
    // The kinds whose heads keep per-head state (DINT histories) or per-head gates (diff_v2).
    for (const NamedConfig& c : seeded_configs()) {
        if (c.name.find("gqa") == std::string::npos ||
            (c.config.attention != AttentionKind::dint && c.config.attention != AttentionKind::diff_v2 &&
             c.config.attention != AttentionKind::gda)) {
            continue;
        }
        INFO("model " << c.name);
        const DecoderModel<T> model = seeded_model<T>(c);
        const std::vector<Token> tokens = test_tokens(30, c.config.vocab_size);
        const std::vector<Index> chunks = {11, 1, 1, 3, 3, 3, 1, 7};
        const RowMatrix<T> one = cached_logits(model, tokens, chunks, 1);
        CHECK(cached_logits(model, tokens, chunks, 2) == one);
    }
}

TEST_CASE("decode steps on 3 threads, each head's keys split over them, match the full forward",
          "[model][kv_cache][threads]") {
    // 4 heads on 3 threads: steps of fewer than kMinPackedRows tokens run the heads one after
    // another, each kernel folding runs of keys on every thread and merging them
    // (kernels/key_split.hpp). 300 tokens: the steps see 2 to 3 key tiles. Tolerances as in
    // "cached logits match the full forward".
    for (const NamedConfig& c : seeded_configs()) {
        INFO("model " << c.name);
        const DecoderModel<double> model_d = seeded_model<double>(c);
        const DecoderModel<float> model_f = seeded_model<float>(c);
        const std::vector<Token> tokens = test_tokens(300, c.config.vocab_size);
        std::vector<Index> chunks = {200};
        for (Index done = 200; done < 300;) {
            const Index chunk = std::min<Index>(300 - done, done % 3 == 0 ? 1 : kMinPackedRows - 1);
            chunks.push_back(chunk);
            done += chunk;
        }
        const RowMatrix<double> full_d = model_d.logits(tokens);
        const double m = magnitude(full_d);
        const double e_full = max_abs_diff(model_f.logits(tokens).cast<double>(), full_d);
        const double e_double = max_abs_diff(cached_logits(model_d, tokens, chunks, 3), full_d);
        const double e_float = max_abs_diff(cached_logits(model_f, tokens, chunks, 3).cast<double>(), full_d);
        CHECK(e_double <= 1e-12 * m);
        CHECK(e_float <= 2 * e_full + 16 * kEpsFloat * m);
    }
}

TEMPLATE_TEST_CASE("greedy generation gives the same ids with and without the cache", "[model][kv_cache][generate]",
                   double, float) {
    using T = TestType;
    std::vector<NamedConfig> configs = seeded_configs();
    // The demo model of diffattn-forward (examples/diffattn_forward.cpp).
    ModelConfig demo;
    demo.attention = AttentionKind::dint;
    demo.hidden_size = 64;
    demo.num_attention_heads = 4;
    demo.num_key_value_heads = 2;
    demo.num_hidden_layers = 2;
    demo.intermediate_size = 172;
    demo.vocab_size = 256;
    configs.push_back({"demo", demo});
    for (const NamedConfig& c : configs) {
        INFO("model " << c.name);
        const DecoderModel<T> model = seeded_model<T>(c, c.name == "demo" ? 1234 : 7);
        const std::vector<Token> prompt = test_tokens(6, c.config.vocab_size);
        const std::vector<Token> cached = generate(model, prompt, 24, true);
        const std::vector<Token> recomputed = generate(model, prompt, 24, false);
        CHECK(cached.size() == 24);
        CHECK(cached == recomputed);
        CHECK(generate(model, prompt, 1, true) == std::vector<Token>{cached.front()});
        CHECK(generate(model, prompt, 0, true).empty());
    }
}

TEST_CASE("generate: the ids are the argmax of the full forward's last row", "[model][kv_cache][generate]") {
    const NamedConfig c{"dint", small_config(AttentionKind::dint, 2)};
    const DecoderModel<double> model = seeded_model<double>(c);
    std::vector<Token> sequence = test_tokens(5, c.config.vocab_size);
    const std::vector<Token> generated = generate(model, sequence, 8, true);
    for (Token id : generated) {
        const RowMatrix<double> logits = model.logits(sequence);
        const auto last = logits.row(logits.rows() - 1);
        Index best = 0;
        last.maxCoeff(&best);
        CHECK(id == best);
        sequence.push_back(id);
    }
    CHECK_THROWS_AS(generate(model, {}, 3, true), ShapeError);
    CHECK_THROWS_AS(generate(model, {1}, -1, true), ShapeError);
    CHECK(argmax_token(Vector<double>::Constant(3, 1.0)) == 0);  // ties: the lowest id
}

TEST_CASE("a full cache refuses more tokens with a clear error and stays usable", "[model][kv_cache]") {
    const NamedConfig c{"dint", small_config(AttentionKind::dint, 2)};
    const DecoderModel<double> model = seeded_model<double>(c);
    const std::vector<Token> tokens = test_tokens(10, c.config.vocab_size);
    const RowMatrix<double> full = model.logits(tokens);
    KvCache<double> cache = model.make_cache(10);
    ForwardState<double> state = model.make_state(8);
    RowMatrix<double> logits(10, c.config.vocab_size);
    model.forward({tokens.begin(), tokens.begin() + 8}, state, logits.topRows(8), &cache);
    REQUIRE(cache.length() == 8);
    CHECK(cache.remaining() == 2);
    RowMatrix<double> unused(3, c.config.vocab_size);
    try {
        model.forward({tokens[8], tokens[9], tokens[0]}, state, unused, &cache);
        FAIL("no error for 8 + 3 tokens in a cache of 10");
    } catch (const ShapeError& e) {
        const std::string message = e.what();
        INFO(message);
        CHECK(message.find("holds 8 of at most 10 tokens") != std::string::npos);
        CHECK(message.find("3 more (11)") != std::string::npos);
        CHECK(message.find("does not grow") != std::string::npos);
    }
    CHECK(cache.length() == 8);  // the refused call changed nothing
    model.forward({tokens[8], tokens[9]}, state, logits.bottomRows(2), &cache);
    CHECK(cache.length() == 10);
    CHECK(max_abs_diff(logits, full) <= 1e-12 * magnitude(full));
    CHECK_THROWS_AS(model.forward({tokens[0]}, state, unused.topRows(1), &cache), ShapeError);

    // The state bounds the chunk, independently of the cache.
    cache.reset();
    CHECK_THROWS_WITH(model.forward(tokens, state, logits, &cache),
                      Catch::Contains("10 tokens but the ForwardState holds at most 8"));
    CHECK(cache.empty());
}

TEMPLATE_TEST_CASE("a reset cache serves a new sequence with identical logits", "[model][kv_cache]", double, float) {
    using T = TestType;
    for (const NamedConfig& c : seeded_configs()) {
        INFO("model " << c.name);
        const DecoderModel<T> model = seeded_model<T>(c);
        const std::vector<Token> a = test_tokens(20, c.config.vocab_size);
        std::vector<Token> b = test_tokens(25, c.config.vocab_size);
        std::reverse(b.begin(), b.end());
        KvCache<T> cache = model.make_cache(30);
        const std::vector<Index> chunks = {5, 1, 1, 3, 3, 3, 4};
        const RowMatrix<T> first = cached_logits(model, a, chunks, cache);
        cache.reset();
        CHECK(cache.length() == 0);
        (void)cached_logits(model, b, {25}, cache);
        cache.reset();
        CHECK(cached_logits(model, a, chunks, cache) == first);
    }
}

TEST_CASE("encoder and global_mean models refuse a KV cache", "[model][kv_cache]") {
    ModelConfig encoder = small_config(AttentionKind::diff, 4);
    encoder.causal = false;
    CHECK_THROWS_AS(KvCache<float>(encoder, 16), OptionError);
    CHECK_THROWS_WITH(KvCache<float>(encoder, 16), Catch::Contains("bidirectional encoder"));

    ModelConfig global = small_config(AttentionKind::dint, 4);
    global.dint_integral = DintIntegral::global_mean;
    global.causal = false;
    CHECK_THROWS_AS(KvCache<double>(global, 16), OptionError);
    CHECK_THROWS_WITH(KvCache<double>(global, 16), Catch::Contains("global_mean"));

    const DecoderModel<double> model = DecoderModel<double>::seeded(global, 3);
    CHECK_THROWS_AS(model.make_cache(16), OptionError);
    CHECK_THROWS_WITH(generate(model, {1, 2, 3}, 2, true), Catch::Contains("global_mean"));
    CHECK(generate(model, {1, 2, 3}, 2, false).size() == 2);  // full recompute needs no cache

    // A cache made for a decoder does not serve an encoder or another geometry.
    const DecoderModel<double> encoder_model = DecoderModel<double>::seeded(encoder, 3);
    KvCache<double> decoder_cache(small_config(AttentionKind::diff, 4), 16);
    ForwardState<double> state = encoder_model.make_state(4);
    CHECK_THROWS_AS(encoder_model.forward({1, 2}, state, &decoder_cache), OptionError);
    const DecoderModel<double> other = DecoderModel<double>::seeded(small_config(AttentionKind::diff, 2), 3);
    ForwardState<double> other_state = other.make_state(4);
    CHECK_THROWS_WITH(other.forward({1, 2}, other_state, &decoder_cache),
                      Catch::Contains("KvCache was made for another configuration"));
    CHECK_THROWS_AS(KvCache<double>(small_config(AttentionKind::diff, 4), 0), ShapeError);
}

TEST_CASE("KV cache memory: bytes and bytes per token", "[model][kv_cache]") {
    // The demo model of diffattn-forward: dint causal_softmax, D 64, H 4, Hkv 2, L 2: d = 8,
    // k_width = 2 Hkv d = 32, v_width = Hkv 2d = 32, so per token
    // L (32 + 32) 4 B + L H 4 B (A1 column sums) + d 4 B (rotary) = 512 + 32 + 32 = 576 B in float;
    // and each key map rounded up to whole blocks of 16 keys: 100 tokens hold 112 keys, 12 more
    // tokens of L k_width 4 B = 256 B of keys.
    ModelConfig demo = small_config(AttentionKind::dint, 2);
    demo.hidden_size = 64;
    demo.intermediate_size = 172;
    demo.vocab_size = 256;
    CHECK(KvCache<float>::bytes_per_token(demo) == 576);
    CHECK(KvCache<double>::bytes_per_token(demo) == 1152);
    const KvCache<float> cache(demo, 100);
    CHECK(cache.bytes_per_token() == 576);
    CHECK(cache.bytes() == 100 * 576 + 12 * 256);
    CHECK(cache.max_len() == 100);

    // causal_mean: no column sums, a fixed L H dv row sum instead.
    ModelConfig mean = demo;
    mean.dint_integral = DintIntegral::causal_mean;
    const KvCache<float> mean_cache(mean, 100);
    CHECK(mean_cache.bytes_per_token() == 576 - 32);
    CHECK(mean_cache.bytes() == 100 * (576 - 32) + 12 * 256 + 2 * 4 * 16 * 4);

    // softmax, diff, shared_diff, diff_v2, gda: keys and values and the rotary table.
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::shared_diff,
                               AttentionKind::diff_v2, AttentionKind::gda}) {
        INFO(to_string(kind));
        const ModelConfig c = small_config(kind, kind == AttentionKind::shared_diff ? 4 : 2);
        const AttentionConfig a = c.attention_config();
        const KvCache<double> k(c, 17);
        CHECK(k.bytes_per_token() == static_cast<std::size_t>(2 * (a.k_width() + a.v_width()) + a.head_dim()) * 8);
        const auto padding = static_cast<std::size_t>(15 * c.num_hidden_layers * a.k_width()) * 8;  // 17 -> 32 keys
        CHECK(k.bytes() == 17 * k.bytes_per_token() + padding);
    }
}

TEST_CASE("KV cache contents: rotated keys at their positions", "[model][kv_cache]") {
    // The keys cached token by token are the keys of the full forward (rows of layer 0 and 1).
    const NamedConfig c{"diff", small_config(AttentionKind::diff, 2)};
    const DecoderModel<double> model = seeded_model<double>(c);
    const std::vector<Token> tokens = test_tokens(12, c.config.vocab_size);
    KvCache<double> whole = model.make_cache(12), steps = model.make_cache(12);
    (void)cached_logits(model, tokens, {12}, whole);
    (void)cached_logits(model, tokens, std::vector<Index>(12, 1), steps);
    for (Index layer = 0; layer < 2; ++layer) {
        CHECK(whole.keys(layer).rows() == 12);
        CHECK((whole.keys(layer) - steps.keys(layer)).cwiseAbs().maxCoeff() < 1e-12);
        CHECK((whole.values(layer) - steps.values(layer)).cwiseAbs().maxCoeff() < 1e-12);
    }
}

TEST_CASE("KV cache copies hold the same tokens and decode on their own", "[model][kv_cache]") {
    // A copy's matrices are allocated afresh (asking for huge pages, model/kv_store.hpp) and filled
    // from the original: it must hold the same keys, values and DINT history, and decoding into it
    // must neither change the original nor differ from decoding into the original.
    for (KvPrecision precision : {KvPrecision::f32, KvPrecision::f16}) {
        INFO(to_string(precision));
        const NamedConfig c{"dint", small_config(AttentionKind::dint)};
        const DecoderModel<double> model = seeded_model<double>(c);
        const std::vector<Token> tokens = test_tokens(10, c.config.vocab_size);
        KvCache<double> original = model.make_cache(12, precision);
        (void)cached_logits(model, {tokens.begin(), tokens.begin() + 8}, {8}, original);
        KvCache<double> copy = original;
        KvCache<double> assigned = model.make_cache(12, precision);
        assigned = original;
        for (const KvCache<double>* other : {&copy, &assigned}) {
            REQUIRE(other->length() == 8);
            REQUIRE(other->precision() == precision);
            for (Index layer = 0; layer < 2; ++layer) {
                const auto& o = original;
                if (precision == KvPrecision::f32) {
                    CHECK(other->keys(layer) == o.keys(layer));
                    CHECK(other->values(layer) == o.values(layer));
                } else {
                    CHECK(other->stored_keys<Eigen::half>(layer) == o.stored_keys<Eigen::half>(layer));
                    CHECK(other->stored_values<Eigen::half>(layer) == o.stored_values<Eigen::half>(layer));
                }
            }
        }
        ForwardState<double> state = model.make_state(1, 1);
        const auto step = [&](KvCache<double>& cache) {
            RowMatrix<double> logits(2, c.config.vocab_size);
            for (Index i = 0; i < 2; ++i) model.forward({tokens[8 + i]}, state, logits.row(i), &cache);
            return logits;
        };
        const RowMatrix<double> from_copy = step(copy);
        CHECK(original.length() == 8);  // untouched by the copy's steps
        const RowMatrix<double> from_original = step(original);
        CHECK(from_copy == from_original);  // the same arithmetic on the same cached rows
        CHECK(assigned.length() == 8);
    }
}

TEST_CASE("huge-page advice covers only whole 2 MB pages inside the buffer", "[model][kv_cache]") {
    // huge_page_interior against a plain search: every 2 MB page [m, m + 2 MB) with
    // begin <= m and m + 2 MB <= begin + bytes, and no other.
    const std::uintptr_t page = kHugePageBytes;
    for (std::uintptr_t begin : {page * 7, page * 7 + 16, page * 8 - 64, page * 8 - 1, page * 8}) {
        for (std::size_t bytes : {std::size_t{0}, std::size_t{4096}, kHugePageBytes - 1, kHugePageBytes,
                                  kHugePageBytes + 48, 2 * kHugePageBytes, 5 * kHugePageBytes - 4096}) {
            INFO("begin " << begin << " bytes " << bytes);
            std::uintptr_t first = 0, end = 0;
            for (std::uintptr_t m = page * 6; m <= page * 16; m += page) {
                if (m >= begin && m + page <= begin + bytes) {
                    if (first == end) first = m;
                    end = m + page;
                }
            }
            const HugePageInterior interior = huge_page_interior(begin, bytes);
            CHECK(interior.first == first);
            CHECK(interior.end == end);
            CHECK(interior.bytes() == end - first);
        }
    }
}

// Half-precision caches (docs/math.md §6). The exact reference of a cache storing keys and values
// as f16 or bf16 is the forward on keys and values rounded to that scalar: one prefill call through
// an empty cache of the same precision (every token attends to rounded rows, its own included).
// Feeding the tokens in other chunks must give those logits within the double criterion of the f32
// test above (1e-12 m): the arithmetic is the same except for the order of sums, and a rounding
// to half of a key that differs by ~1e-16 between the two paths lands on the same half value
// except with probability ~2^-42 per entry. (In float the paths' keys differ by ~eps_float, and
// one in ~2^13 entries would round to a neighbouring half value: no exact reference there; the
// kernel tests check float on exactly rounded inputs.) The kernels themselves are checked against
// the reference on rounded keys and values in tests/kernels/test_half_kv.cpp.
TEST_CASE("half-precision caches: decode matches the forward on rounded keys and values, every kind",
          "[model][kv_cache][half_kv]") {
    for (const NamedConfig& c : seeded_configs()) {
        const DecoderModel<double> model = seeded_model<double>(c);
        const std::vector<Token> tokens = test_tokens(c.name.rfind("dint", 0) == 0 ? 150 : 70, c.config.vocab_size);
        const auto total = static_cast<Index>(tokens.size());
        const RowMatrix<double> full = model.logits(tokens);  // f32 = the model's own scalar
        const double m = magnitude(full);
        for (const KvPrecision precision : {KvPrecision::f16, KvPrecision::bf16}) {
            INFO("model " << c.name << " cache " << to_string(precision));
            KvCache<double> whole_cache = model.make_cache(total, precision);
            const RowMatrix<double> whole = cached_logits(model, tokens, {total}, whole_cache);
            const double cost = max_abs_diff(whole, full);
            std::printf("kv %-6s %-36s rounded K/V vs f32: %.2e m\n", to_string(precision), c.name.c_str(), cost / m);
            CHECK(cost > 0);  // the keys and values were rounded
            for (const Schedule& schedule : schedules(total)) {
                INFO("schedule " << schedule.name);
                KvCache<double> cache = model.make_cache(total, precision);
                CHECK(max_abs_diff(cached_logits(model, tokens, schedule.chunks, cache), whole) <= 1e-12 * m);
            }
        }
    }
}

TEST_CASE("half-precision caches store the f32 cache's keys and values rounded", "[model][kv_cache][half_kv]") {
    const NamedConfig c{"dint", small_config(AttentionKind::dint, 2)};
    const DecoderModel<double> model = seeded_model<double>(c);
    const std::vector<Token> tokens = test_tokens(12, c.config.vocab_size);
    KvCache<double> f32 = model.make_cache(12), f16 = model.make_cache(12, KvPrecision::f16),
                    bf16 = model.make_cache(12, KvPrecision::bf16);
    (void)cached_logits(model, tokens, {12}, f32);
    (void)cached_logits(model, tokens, {12}, f16);
    (void)cached_logits(model, tokens, {12}, bf16);
    CHECK(f16.precision() == KvPrecision::f16);
    // Layer 0 sees the same inputs in every cache: its stored rows are the f32 rows rounded.
    const RowMatrix<Eigen::half> keys_f16 = f32.keys(0).cast<Eigen::half>();
    const RowMatrix<Eigen::bfloat16> values_bf16 = f32.values(0).cast<Eigen::bfloat16>();
    CHECK(f16.stored_keys<Eigen::half>(0).cast<double>() == keys_f16.cast<double>());
    CHECK(bf16.stored_values<Eigen::bfloat16>(0).cast<double>() == values_bf16.cast<double>());
    // Rows in the stored scalar only: asking for another one names the precision.
    CHECK_THROWS_WITH(f16.keys(0), Catch::Contains("stores its keys and values as f16"));
    CHECK_THROWS_AS(bf16.stored_keys<Eigen::half>(0), OptionError);
}

TEST_CASE("half-precision caches: bytes, capacity and refusals as for f32", "[model][kv_cache][half_kv]") {
    // The demo model of the memory test above: per token L (32 + 32) 2 B (keys and values in half)
    // + L H 4 B (A1 column sums, float) + d 4 B (rotary) = 256 + 32 + 32 = 320 B in float, and
    // 256 + 64 + 64 = 384 B in double; and 12 tokens of L k_width 2 B = 128 B of keys that round
    // 100 up to whole blocks of 16.
    ModelConfig demo = small_config(AttentionKind::dint, 2);
    demo.hidden_size = 64;
    demo.intermediate_size = 172;
    demo.vocab_size = 256;
    for (const KvPrecision precision : {KvPrecision::f16, KvPrecision::bf16}) {
        INFO(to_string(precision));
        CHECK(KvCache<float>::bytes_per_token(demo, precision) == 320);
        CHECK(KvCache<double>::bytes_per_token(demo, precision) == 384);
        const KvCache<float> cache(demo, 100, precision);
        CHECK(cache.bytes_per_token() == 320);
        CHECK(cache.bytes() == 100 * 320 + 12 * 128);
        CHECK(static_cast<double>(KvCache<float>::bytes(demo, 100, precision)) == 100 * 320 + 12 * 128);
    }
    CHECK(KvCache<double>::bytes_per_token(demo, KvPrecision::f32) == 1152);  // f32: the model's scalar

    // The same refusals and the same service as an f32 cache.
    const NamedConfig c{"diff", small_config(AttentionKind::diff, 2)};
    const DecoderModel<float> model = seeded_model<float>(c);
    const std::vector<Token> tokens = test_tokens(10, c.config.vocab_size);
    KvCache<float> cache = model.make_cache(10, KvPrecision::bf16);
    ForwardState<float> state = model.make_state(10);
    RowMatrix<float> logits(10, c.config.vocab_size);
    model.forward(tokens, state, logits, &cache);
    CHECK(cache.length() == 10);
    CHECK_THROWS_WITH(model.forward({tokens[0]}, state, logits.topRows(1), &cache),
                      Catch::Contains("holds 10 of at most 10 tokens"));
    cache.reset();
    const RowMatrix<float> again = cached_logits(model, tokens, {4, 1, 5}, cache);
    CHECK(again.allFinite());
    const DecoderModel<float> other = seeded_model<float>({"diff4", small_config(AttentionKind::diff, 4)});
    ForwardState<float> other_state = other.make_state(4);
    cache.reset();
    CHECK_THROWS_WITH(other.forward({1, 2}, other_state, &cache),
                      Catch::Contains("KvCache was made for another configuration"));
    ModelConfig encoder = small_config(AttentionKind::diff, 4);
    encoder.causal = false;
    CHECK_THROWS_AS(KvCache<float>(encoder, 16, KvPrecision::f16), OptionError);
    CHECK_THROWS_AS(KvCache<float>(demo, 16, static_cast<KvPrecision>(7)), OptionError);
}

TEMPLATE_TEST_CASE("greedy generation runs with half-precision caches", "[model][kv_cache][half_kv][generate]",
                   double, float) {
    using T = TestType;
    const NamedConfig c{"dint", small_config(AttentionKind::dint, 2)};
    const DecoderModel<T> model = seeded_model<T>(c);
    GenerationOptions options;
    options.max_new_tokens = 6;
    for (const KvPrecision precision : {KvPrecision::f16, KvPrecision::bf16}) {
        options.kv_precision = precision;
        const std::vector<Token> ids = generate(model, {1, 2, 3}, options, [](const auto& row) {
            return argmax_token(row);
        }, [](Token) {});
        CHECK(ids.size() == 6);
    }
}

TEST_CASE("a moved-from cache holds no tokens and is refused, not read", "[model][kv_cache]") {
    // Its storage goes with the move; the count of tokens it held must go too.
    const DecoderModel<float> model = DecoderModel<float>::seeded(test::tiny_config(AttentionKind::dint, 32), 42);
    KvCache<float> cache = model.make_cache(24);
    ForwardState<float> state = model.make_state(19);
    model.forward(std::vector<Token>(19, 1), state, &cache);
    const RowMatrix<float> keys = cache.keys(1);
    KvCache<float> moved = std::move(cache);
    CHECK(moved.length() == 19);
    CHECK(moved.keys(1) == keys);
    CHECK(cache.length() == 0);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    CHECK(cache.max_len() == 0);  // NOLINT(bugprone-use-after-move)
    CHECK_ERROR(ShapeError, cache.keys(0), "KvCache: it holds no storage (it was moved from)");
    CHECK_ERROR(ShapeError, model.forward(std::vector<Token>{1}, state, &cache), "holds 0 of at most 0 tokens");
    KvCache<float> assigned = model.make_cache(4);
    assigned = std::move(moved);
    CHECK(assigned.length() == 19);
    CHECK(moved.length() == 0);  // NOLINT(bugprone-use-after-move)
    CHECK(moved.max_len() == 0);  // NOLINT(bugprone-use-after-move): not the 4 `assigned` had room for
    CHECK_ERROR(ShapeError, moved.values(0), "it holds no storage");
    CHECK_ERROR(ShapeError, model.forward(std::vector<Token>{1}, state, &moved), "holds 0 of at most 0 tokens");

    // Moved onto itself (std::swap(a, a) does that) a cache keeps its tokens and its DINT histories:
    // a defaulted move would have emptied the vector of histories and kept the count.
    KvCache<float>& same = assigned;
    assigned = std::move(same);
    CHECK(assigned.length() == 19);
    CHECK(assigned.keys(1) == keys);
    ForwardState<float> one_more = model.make_state(1);
    KvCache<float> copy = assigned;
    const RowMatrix<float> next = model.forward(std::vector<Token>{2}, one_more, &assigned);
    CHECK(next == model.forward(std::vector<Token>{2}, one_more, &copy));
}
