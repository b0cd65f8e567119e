// One const DecoderModel shared by several std::threads, each with its own ForwardState (and
// KvCache), must give exactly the logits of a single thread. Part of the normal suite; the `tsan`
// preset builds this executable alone with -fsanitize=thread (OpenMP off, since libgomp / libomp
// are not TSan-instrumented) and scripts/test-sanitizers.sh runs it, so a data race on shared
// model state (mutable scratch, lazily built tables, static buffers) fails CI.
#include "../model/model_files.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace diffattn;
using diffattn::test::small_config;

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 3;  // forwards per thread and sequence

struct Case {
    std::string name;
    ModelConfig config;
    bool merged = false;  // shared_diff: merged projections
};

std::vector<Case> cases() {
    std::vector<Case> out;
    out.push_back({"softmax", small_config(AttentionKind::softmax)});
    out.push_back({"diff", small_config(AttentionKind::diff)});
    Case per_subhead{"diff_per_subhead", small_config(AttentionKind::diff)};
    per_subhead.config.diff_gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back(per_subhead);
    out.push_back({"dint_causal_softmax", small_config(AttentionKind::dint)});
    Case mean{"dint_causal_mean", small_config(AttentionKind::dint)};
    mean.config.dint_integral = DintIntegral::causal_mean;
    out.push_back(mean);
    Case encoder{"dint_global_mean_encoder", small_config(AttentionKind::dint)};
    encoder.config.dint_integral = DintIntegral::global_mean;
    encoder.config.causal = false;
    out.push_back(encoder);
    out.push_back({"shared_diff", small_config(AttentionKind::shared_diff)});
    out.push_back({"shared_diff_merged", small_config(AttentionKind::shared_diff), true});
    out.push_back({"diff_v2", small_config(AttentionKind::diff_v2)});
    return out;
}

/// A different token sequence per (thread, round): lengths 9 .. 40, ids spread over the vocabulary.
std::vector<Token> sequence(int thread, int round, Index vocab) {
    const Index n = 9 + (7 * thread + 5 * round) % 32;
    std::vector<Token> tokens;
    for (Index i = 0; i < n; ++i) {
        tokens.push_back(static_cast<Token>((13 * thread + 29 * round + 37 * i + i * i) % vocab));
    }
    return tokens;
}

/// Starts `count` threads running body(t) at (nearly) the same moment, joins them.
template <typename Body>
void run_together(int count, Body body) {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < count; ++t) {
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < count) std::this_thread::yield();
            body(t);
        });
    }
    for (std::thread& thread : threads) thread.join();
}

double max_abs_diff(const RowMatrix<float>& a, const RowMatrix<float>& b) {
    if (a.rows() != b.rows() || a.cols() != b.cols()) return 1e30;
    if (a.size() == 0) return 0;
    return (a - b).cwiseAbs().maxCoeff();
}

/// Expected (single-threaded) and concurrent logits of every thread's sequences for `model`;
/// with_cache: prefill the first half of each sequence into a per-thread KvCache, then decode the
/// rest one token at a time (the logits of the last token are compared).
void check_shared(const DecoderModel<float>& model, bool with_cache, int state_threads) {
    const Index vocab = model.config().vocab_size;
    const auto run_one = [&](const std::vector<Token>& tokens, ForwardState<float>& state,
                             KvCache<float>* cache) -> RowMatrix<float> {
        if (cache == nullptr) return model.forward(tokens, state);
        cache->reset();
        const std::size_t half = tokens.size() / 2;
        model.forward(std::vector<Token>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(half)), state,
                      cache);
        RowMatrix<float> last;
        for (std::size_t i = half; i < tokens.size(); ++i) last = model.forward({tokens[i]}, state, cache);
        return last;
    };

    // Single-threaded results, one state for all.
    std::vector<std::vector<RowMatrix<float>>> expected(kThreads);
    {
        ForwardState<float> state = model.make_state(48, state_threads);
        std::optional<KvCache<float>> cache;  // encoders cannot make one
        if (with_cache) cache.emplace(model.make_cache(48));
        for (int t = 0; t < kThreads; ++t) {
            for (int r = 0; r < kRounds; ++r) {
                expected[t].push_back(run_one(sequence(t, r, vocab), state, cache ? &*cache : nullptr));
            }
        }
    }

    std::vector<std::vector<RowMatrix<float>>> got(kThreads, std::vector<RowMatrix<float>>(kRounds));
    std::vector<std::string> failures(kThreads);
    run_together(kThreads, [&](int t) {
        try {
            ForwardState<float> state = model.make_state(48, state_threads);
            if (with_cache) {
                KvCache<float> cache = model.make_cache(48);
                for (int r = 0; r < kRounds; ++r) got[t][r] = run_one(sequence(t, r, vocab), state, &cache);
            } else {
                for (int r = 0; r < kRounds; ++r) got[t][r] = run_one(sequence(t, r, vocab), state, nullptr);
            }
        } catch (const std::exception& e) {
            failures[t] = e.what();  // Catch2 assertions are not thread-safe: report after join
        }
    });
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t);
        CHECK(failures[t].empty());
        for (int r = 0; r < kRounds; ++r) {
            INFO("round " << r);
            CHECK(max_abs_diff(got[t][r], expected[t][r]) == 0.0);
        }
    }
}

}  // namespace

TEST_CASE("one model, several threads: the same logits as one thread, for every attention kind",
          "[concurrency][model]") {
    for (const Case& c : cases()) {
        INFO(c.name);
        DecoderModel<float> model = DecoderModel<float>::seeded(c.config, 11);
        if (c.merged) model.merge_shared_diff();
        const DecoderModel<float>& shared = model;
        check_shared(shared, false, 1);
    }
}

TEST_CASE("one model, several threads, each with its own KV cache: prefill + decode as one thread",
          "[concurrency][model][kv_cache]") {
    for (const Case& c : cases()) {
        if (!c.config.causal) continue;  // encoders take no cache
        INFO(c.name);
        DecoderModel<float> model = DecoderModel<float>::seeded(c.config, 12);
        if (c.merged) model.merge_shared_diff();
        check_shared(model, true, 1);
    }
}

TEST_CASE("one model, several threads whose states also run heads on 2 threads (OpenMP when built with it)",
          "[concurrency][model]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::dint), 13);
    check_shared(model, false, 2);
    check_shared(model, true, 2);
}

TEST_CASE("a model loaded from a directory is shared the same way", "[concurrency][model][files]") {
    const std::filesystem::path dir = std::filesystem::path(DIFFATTN_TEST_DATA_DIR) / "models" / "dint_causal_softmax";
    REQUIRE(std::filesystem::is_directory(dir));
    const DecoderModel<float> model = DecoderModel<float>::load(dir);
    check_shared(model, false, 1);
    check_shared(model, true, 1);
}
