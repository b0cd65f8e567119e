// Batched decoding (docs/math.md §6, DecoderModel::forward_batch): one step over several sequences,
// each with its own KV cache, length and position, sequences joining and leaving between steps.
//
// Reference: for every sequence at every step, the last row of the plain full forward (no cache)
// of everything that sequence has seen, computed in double. Tolerances as test_kv_cache.cpp's:
//   double: max |batched - full| <= 1e-12 m, m = max(1, max |logit|);
//   float:  max |batched float - full double| <= 2 e_full + 16 eps_float m, e_full the error of the
//           plain float forward of the same sequence against the double one.
// A step that fed a sequence another's position, cache or history would be off by >= 1e-3 m.
#include "golden_files.hpp"
#include "small_configs.hpp"

#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace diffattn;
using diffattn::test::small_config;
using model_test::kEpsFloat;
using model_test::magnitude;
using model_test::max_abs_diff;

namespace {

struct Case {
    const char* name;
    ModelConfig config;
};

/// Every attention kind and DINT causal mode, with GQA where the kind allows it.
std::vector<Case> cases() {
    return {{"softmax", small_config(AttentionKind::softmax)},
            {"diff", small_config(AttentionKind::diff)},
            {"dint causal_softmax", small_config(AttentionKind::dint, DintIntegral::causal_softmax)},
            {"dint causal_mean", small_config(AttentionKind::dint, DintIntegral::causal_mean)},
            {"shared_diff", small_config(AttentionKind::shared_diff)},
            {"diff_v2", small_config(AttentionKind::diff_v2)}};
}

/// A sequence being generated: what it has seen and its cache.
template <typename T>
struct Sequence {
    std::vector<Token> tokens;
    std::unique_ptr<KvCache<T>> cache;
};

/// The last logits row of the plain forward of `tokens` in double, and the error of the plain
/// float forward against it.
struct Reference {
    RowMatrix<double> row;
    double float_error;
};

Reference reference(const DecoderModel<double>& model_d, const DecoderModel<float>& model_f,
                    const std::vector<Token>& tokens) {
    const RowMatrix<double> full_d = model_d.logits(tokens).bottomRows(1);
    const RowMatrix<double> full_f = model_f.logits(tokens).cast<double>().bottomRows(1);
    return {full_d, max_abs_diff(full_f, full_d)};
}

/// The next token a sequence is fed: any fixed rule works, the reference sees the same tokens.
Token next_token(std::size_t seen, std::size_t sequence, Index vocab) {
    return static_cast<Token>((13 * seen + 5 * sequence + 2) % static_cast<std::size_t>(vocab));
}

/// Runs a continuous-batching schedule on `threads` threads: sequences 0-2 (prompts of 5, 1 and 12
/// tokens) start; sequence 1 leaves after step 2; sequence 3 (a prompt of 40 tokens) joins at step
/// 3; the batch order is reversed on odd steps. Every batched row is checked against the reference.
template <typename T>
void check_schedule(const Case& c, const DecoderModel<T>& model, const DecoderModel<double>& model_d,
                    const DecoderModel<float>& model_f, int threads) {
    const Index vocab = c.config.vocab_size;
    const std::vector<Index> prompt_lengths = {5, 1, 12, 40};
    std::vector<Sequence<T>> sequences(prompt_lengths.size());
    ForwardState<T> state = model.make_state(40, threads);
    state.set_min_parallel_flops(0);  // `threads` threads even for one-token steps
    const auto join = [&](std::size_t s) {
        for (Index i = 0; i < prompt_lengths[s]; ++i) {
            sequences[s].tokens.push_back(static_cast<Token>((31 * i + 7 * static_cast<Index>(s) + 3) % vocab));
        }
        sequences[s].cache = std::make_unique<KvCache<T>>(model.make_cache(200));
        model.forward(sequences[s].tokens, state, sequences[s].cache.get());  // prefill
    };
    for (std::size_t s = 0; s < 3; ++s) join(s);
    std::vector<std::size_t> active = {0, 1, 2};
    double worst = 0;
    for (int step = 0; step < 8; ++step) {
        if (step == 3) {
            active.erase(std::find(active.begin(), active.end(), std::size_t(1)));
            join(3);
            active.push_back(3);
        }
        std::vector<std::size_t> order = active;
        if (step % 2 == 1) std::reverse(order.begin(), order.end());
        std::vector<Token> tokens;
        std::vector<KvCache<T>*> caches;
        for (std::size_t s : order) {
            tokens.push_back(next_token(sequences[s].tokens.size(), s, vocab));
            caches.push_back(sequences[s].cache.get());
        }
        RowMatrix<T> logits(static_cast<Index>(order.size()), vocab);
        model.forward_batch(tokens, caches, state, logits);
        for (std::size_t b = 0; b < order.size(); ++b) {
            Sequence<T>& sequence = sequences[order[b]];
            sequence.tokens.push_back(tokens[b]);
            INFO(c.name << ": step " << step << ", sequence " << order[b] << " (" << sequence.tokens.size()
                        << " tokens), " << threads << " threads");
            REQUIRE(sequence.cache->length() == static_cast<Index>(sequence.tokens.size()));
            const Reference ref = reference(model_d, model_f, sequence.tokens);
            const double m = magnitude(ref.row);
            const double error = max_abs_diff(logits.row(static_cast<Index>(b)).template cast<double>(), ref.row);
            if (std::is_same_v<T, double>) {
                CHECK(error <= 1e-12 * m);
                worst = std::max(worst, error / m);
            } else {
                CHECK(error <= 2 * ref.float_error + 16 * kEpsFloat * m);
                worst = std::max(worst, error / (kEpsFloat * m));
            }
        }
    }
    std::printf("batched %-20s %-6s %d threads: worst %.2e %s\n", c.name, std::is_same_v<T, double> ? "double" : "float",
                threads, worst, std::is_same_v<T, double> ? "m" : "eps m");
}

}  // namespace

TEST_CASE("batched decode steps match each sequence's full forward, as sequences join and leave",
          "[model][kv_cache][batch]") {
    for (const Case& c : cases()) {
        const DecoderModel<double> model_d = DecoderModel<double>::seeded(c.config, 7);
        const DecoderModel<float> model_f = DecoderModel<float>::seeded(c.config, 7);
        for (int threads : {1, 2, 3}) {
            check_schedule(c, model_d, model_d, model_f, threads);
            check_schedule(c, model_f, model_d, model_f, threads);
        }
    }
}

TEST_CASE("a refused batched step names the problem and changes no cache", "[model][kv_cache][batch]") {
    const ModelConfig config = small_config(AttentionKind::dint, DintIntegral::causal_softmax);
    const DecoderModel<double> model = DecoderModel<double>::seeded(config, 7);
    ForwardState<double> state = model.make_state(8);
    KvCache<double> a = model.make_cache(10), b = model.make_cache(10), full = model.make_cache(3);
    model.forward({1, 2, 3}, state, &a);
    model.forward({4, 5}, state, &b);
    model.forward({6, 7, 8}, state, &full);
    const RowMatrix<double> keys_a = a.keys(0), keys_b = b.keys(0);
    RowMatrix<double> logits(2, config.vocab_size);
    const auto refused = [&](const std::vector<Token>& tokens, const std::vector<KvCache<double>*>& caches,
                             const std::string& words) {
        RowMatrix<double> out(static_cast<Index>(tokens.size()), config.vocab_size);
        try {
            model.forward_batch(tokens, caches, state, out);
            FAIL("not refused: " << words);
        } catch (const ShapeError& e) {
            const std::string message = e.what();
            INFO(message);
            CHECK(message.find("DecoderModel::forward_batch") != std::string::npos);
            CHECK(message.find(words) != std::string::npos);
        }
        CHECK(a.length() == 3);
        CHECK(b.length() == 2);
        CHECK(full.length() == 3);
        CHECK(a.keys(0) == keys_a);
        CHECK(b.keys(0) == keys_b);
    };
    refused({1, 2}, {&a}, "2 tokens but 1 caches");
    refused({1, 2}, {&a, nullptr}, "cache 1 is null");
    refused({1, 2}, {&a, &a}, "sequences 0 and 1 of the batch use the same KV cache");
    refused({1, 2, 3}, {&a, &b, &full}, "holds 3 of at most 3 tokens");
    refused({1, 99}, {&a, &b}, "token 1 is 99");
    ForwardState<double> small = model.make_state(1);
    RowMatrix<double> out(2, config.vocab_size);
    CHECK_THROWS_AS(model.forward_batch({1, 2}, {&a, &b}, small, out), ShapeError);
    // The caches still serve: the step goes through and matches the single-sequence decode.
    model.forward_batch({9, 10}, {&a, &b}, state, logits);
    const RowMatrix<double> expected = model.logits({1, 2, 3, 9}).bottomRows(1);
    CHECK(max_abs_diff(logits.topRows(1), expected) <= 1e-12 * magnitude(expected));
}

TEST_CASE("on one thread a batched step gives each sequence its single-sequence step, bit for bit, in "
          "every cache precision", "[model][kv_cache][batch]") {
    // Below detail::kFewRowsLinear rows every projection through linear() is one dot product per
    // output in a fixed order, whatever the number of rows, and each head runs the same kernel on the same rows: so a batch
    // of B sequences on one thread must reproduce B single-sequence decode steps exactly. The
    // half-precision single-sequence steps are themselves checked against a reference in
    // test_kv_cache.cpp.
    for (const Case& c : cases()) {
        for (const KvPrecision precision : {KvPrecision::f32, KvPrecision::f16, KvPrecision::bf16}) {
            INFO(c.name << ", " << to_string(precision) << " cache");
            DecoderModel<float> model = DecoderModel<float>::seeded(c.config, 7);
            // Shared DIFF through its merged weights: the factored projection is a product of
            // several GEMMs whose blocking depends on the rows (the first test covers it, to §7).
            model.merge_shared_diff();
            ForwardState<float> state = model.make_state(16);
            std::vector<KvCache<float>> batched, alone;
            for (Index s = 0; s < 3; ++s) {
                std::vector<Token> prompt;
                for (Index i = 0; i < 4 + 5 * s; ++i) prompt.push_back(static_cast<Token>((17 * i + s) % 64));
                for (auto* caches : {&batched, &alone}) {
                    caches->push_back(model.make_cache(40, precision));
                    model.forward(prompt, state, &caches->back());
                }
            }
            std::vector<KvCache<float>*> pointers = {&batched[0], &batched[1], &batched[2]};
            RowMatrix<float> logits(3, c.config.vocab_size);
            for (int step = 0; step < 5; ++step) {
                const std::vector<Token> tokens = {Token(step), Token(10 + step), Token(20 + step)};
                model.forward_batch(tokens, pointers, state, logits);
                for (std::size_t b = 0; b < 3; ++b) {
                    const RowMatrix<float> single = model.forward({tokens[b]}, state, &alone[b]);
                    CHECK((logits.row(static_cast<Index>(b)).array() == single.row(0).array()).all());
                }
            }
        }
    }
}

TEST_CASE("a batch refuses caches of different precisions", "[model][kv_cache][batch]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::diff), 7);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> f32 = model.make_cache(8), f16 = model.make_cache(8, KvPrecision::f16);
    RowMatrix<float> logits(2, 64);
    try {
        model.forward_batch({1, 2}, {&f32, &f16}, state, logits);
        FAIL("not refused");
    } catch (const ShapeError& e) {
        CHECK(std::string(e.what()).find("cache 1 stores its keys and values as f16 but cache 0 as f32") !=
              std::string::npos);
    }
    CHECK(f32.length() == 0);
    CHECK(f16.length() == 0);
}
