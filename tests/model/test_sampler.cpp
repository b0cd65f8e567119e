// The token sampler (model/sampler.hpp): greedy is argmax_token; temperature, top-k and top-p
// give the probabilities Hugging Face's warpers give (checked against probabilities written out
// here by the plain formula, over 200,000 draws); a seed gives a fixed sequence (checked against
// tools/sampler_reference.py, which computes it without the C++ code); bad options and bad
// logits are errors.
#include "../error_messages.hpp"

#include "diffattn/model/logit_ranking.hpp"
#include "diffattn/model/sampler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace diffattn;

namespace {

constexpr double kSamplerNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSamplerInf = std::numeric_limits<double>::infinity();

/// The logits of tools/sampler_reference.py (multiples of 1/8: exact in float and double).
/// Ranking: 2 and 4 (2.0), 0 (1.5), 9 (1.0), 3 (0.75), 7 (0.125), 1 (-0.25), 5 (-1), 8 (-inf), 6 (NaN).
template <typename T>
Vector<T> sampler_reference_logits() {
    Vector<double> logits(10);
    logits << 1.5, -0.25, 2.0, 0.75, 2.0, -1.0, kSamplerNaN, 0.125, -kSamplerInf, 1.0;
    return logits.cast<T>();
}

/// Logits in [-2, 2] in steps of 1/4 (many ties), every `nan_every`-th one NaN (0: none), from a
/// seeded engine of the test's own.
Vector<float> sampler_random_logits(Index size, unsigned seed, Index nan_every) {
    std::mt19937 engine(seed);
    Vector<float> logits(size);
    for (Index i = 0; i < size; ++i) {
        logits(i) = static_cast<float>(static_cast<int>(engine() % 17) - 8) * 0.25f;
        if (nan_every > 0 && i % nan_every == nan_every - 1) logits(i) = std::numeric_limits<float>::quiet_NaN();
    }
    return logits;
}

/// The largest logit, the lowest id among equal ones, NaN skipped: a plain loop.
Index sampler_plain_argmax(const Vector<float>& logits) {
    Index best = -1;
    for (Index i = 0; i < logits.size(); ++i) {
        if (!std::isnan(logits(i)) && (best < 0 || logits(i) > logits(best))) best = i;
    }
    return best;
}

/// Exact probabilities of tokens `kept` (others 0): exp(x / t) normalised over `kept`.
std::vector<double> sampler_softmax_over(const std::vector<double>& logits, double temperature,
                                         const std::vector<Index>& kept) {
    std::vector<double> p(logits.size(), 0.0);
    double total = 0.0;
    for (Index id : kept) total += std::exp(logits[static_cast<std::size_t>(id)] / temperature);
    for (Index id : kept) p[static_cast<std::size_t>(id)] = std::exp(logits[static_cast<std::size_t>(id)] / temperature) / total;
    return p;
}

/// Checks that `kept` (most probable first) is top-p's set within `pool` for `p`: the tokens
/// before the last hold less than top_p of the pool's probability, all of them top_p or more.
void sampler_check_top_p_set(const std::vector<double>& logits, double temperature, const std::vector<Index>& pool,
                             const std::vector<Index>& kept, double top_p) {
    const std::vector<double> prob = sampler_softmax_over(logits, temperature, pool);
    double before_last = 0.0;
    for (std::size_t j = 0; j + 1 < kept.size(); ++j) before_last += prob[static_cast<std::size_t>(kept[j])];
    const double all = before_last + prob[static_cast<std::size_t>(kept.back())];
    INFO("top_p " << top_p << ": the kept tokens before the last hold " << before_last << ", all " << all);
    REQUIRE(before_last < top_p);
    REQUIRE(all >= top_p);
}

// Critical values of the chi-square distribution with df = 1 .. 9 degrees of freedom that a
// correct sampler exceeds with probability 1e-6 (scipy.stats.chi2.isf(1e-6, df)). With 200,000
// draws an error of 0.01 in a probability near 0.3 adds about 67, so such errors are caught.
constexpr double kChiSquare1e6[] = {23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70, 44.81};
constexpr int kSamplerDraws = 200000;

/// Draws kSamplerDraws tokens and checks their counts against `expected`: exactly 0 where the
/// probability is 0, a chi-square statistic (df = bins - 1) under the 1e-6 critical value elsewhere.
template <typename T>
void sampler_check_distribution(const SamplingOptions& options, const Vector<T>& logits,
                                const std::vector<double>& expected) {
    Sampler sampler(options, logits.size());
    std::vector<long> counts(expected.size(), 0);
    for (int draw = 0; draw < kSamplerDraws; ++draw) ++counts[static_cast<std::size_t>(sampler.sample(logits))];
    double chi_square = 0.0;
    int bins = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("token " << i << ": " << counts[i] << " draws, expected probability " << expected[i]);
        if (expected[i] == 0.0) {
            CHECK(counts[i] == 0);
            continue;
        }
        const double e = expected[i] * kSamplerDraws;
        chi_square += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
        ++bins;
    }
    REQUIRE(bins >= 1);
    INFO("chi-square " << chi_square << " over " << bins << " bins");
    if (bins >= 2) CHECK(chi_square < kChiSquare1e6[bins - 2]);  // one bin: every draw is it, checked above
}

}  // namespace

TEST_CASE("sampling options: the defaults are greedy, bad values are OptionErrors", "[model][sampler]") {
    const SamplingOptions defaults;
    CHECK(defaults.greedy());
    CHECK(defaults.top_k == 0);
    CHECK(defaults.top_p == 1.0);
    CHECK(defaults.seed == 5489u);
    CHECK_NOTHROW(check_sampling_options(defaults));
    CHECK_NOTHROW(check_sampling_options(SamplingOptions{0.8, 40, 0.95, 1}));
    CHECK_NOTHROW(check_sampling_options(SamplingOptions{1e-300, 1, 1e-300, 0}));
    CHECK_ERROR(OptionError, check_sampling_options(SamplingOptions{-0.5, 0, 1.0, 1}),
                "SamplingOptions: temperature must be finite and >= 0", "got -0.5");
    CHECK_ERROR(OptionError, check_sampling_options(SamplingOptions{kSamplerNaN, 0, 1.0, 1}), "temperature", "got nan");
    CHECK_ERROR(OptionError, check_sampling_options(SamplingOptions{kSamplerInf, 0, 1.0, 1}), "temperature", "got inf");
    CHECK_ERROR(OptionError, check_sampling_options(SamplingOptions{1.0, -3, 1.0, 1}),
                "SamplingOptions: top_k must be >= 0", "got -3");
    for (double top_p : {0.0, -0.1, 1.5, kSamplerNaN, kSamplerInf}) {
        INFO("top_p " << top_p);
        CHECK_ERROR(OptionError, check_sampling_options(SamplingOptions{1.0, 0, top_p, 1}),
                    "SamplingOptions: top_p must be in (0, 1]");
    }
    // The Sampler checks them too, and its vocabulary.
    CHECK_ERROR(OptionError, Sampler(SamplingOptions{1.0, 0, 0.0, 1}, 10), "top_p", "got 0");
    CHECK_ERROR(ShapeError, Sampler(SamplingOptions{}, 0), "Sampler: vocab_size must be >= 1, got 0");
}

TEST_CASE("sampler: logits of the wrong size are a ShapeError", "[model][sampler]") {
    for (double temperature : {0.0, 1.0}) {
        Sampler sampler(SamplingOptions{temperature, 0, 1.0, 1}, 10);
        CHECK_ERROR(ShapeError, sampler.sample(Vector<float>::Zero(9)),
                    "Sampler::sample: logits has 9 entries but the vocabulary has 10");
        CHECK_ERROR(ShapeError, sampler.sample(RowMatrix<double>::Zero(2, 11).row(1)), "11 entries");
    }
}

TEST_CASE("sampler: temperature 0, top_k 1 and a tiny top_p are all greedy", "[model][sampler]") {
    Sampler greedy(SamplingOptions{}, 300);
    Sampler top_k_1(SamplingOptions{1.0, 1, 1.0, 3}, 300);
    Sampler hot_top_k_1(SamplingOptions{5.0, 1, 1.0, 4}, 300);
    Sampler tiny_top_p(SamplingOptions{1.0, 0, 1e-9, 5}, 300);
    Sampler both(SamplingOptions{0.3, 1, 1e-9, 6}, 300);
    for (unsigned seed = 0; seed < 200; ++seed) {
        const Vector<float> logits = sampler_random_logits(300, seed, seed % 2 == 0 ? 0 : 7);
        const Index expected = sampler_plain_argmax(logits);
        INFO("logits seed " << seed << ": argmax " << expected);
        CHECK(greedy.sample(logits) == expected);
        CHECK(top_k_1.sample(logits) == expected);
        CHECK(hot_top_k_1.sample(logits) == expected);
        CHECK(tiny_top_p.sample(logits) == expected);
        CHECK(both.sample(logits) == expected);
        CHECK(greedy.sample(logits.cast<double>()) == expected);
    }
    // Greedy is argmax_token to the letter: an all-NaN row gives 0 (docs/errors.md).
    CHECK(greedy.sample(Vector<float>::Constant(300, std::numeric_limits<float>::quiet_NaN())) == 0);
}

TEST_CASE("sampler: the same seed repeats a sequence, another seed does not", "[model][sampler]") {
    // 100 tokens over 64 near-uniform choices (temperature 4 over logits in [-2, 2]): two seeds
    // agree at a given step with probability about 1/50, on all 100 practically never.
    const Vector<float> logits = sampler_random_logits(64, 11, 0);
    for (const SamplingOptions& base : {SamplingOptions{4.0, 0, 1.0, 0}, SamplingOptions{4.0, 40, 0.9, 0}}) {
        const auto run = [&](std::uint64_t seed) {
            SamplingOptions options = base;
            options.seed = seed;
            Sampler sampler(options, 64);
            std::vector<Index> tokens;
            for (int i = 0; i < 100; ++i) tokens.push_back(sampler.sample(logits));
            return tokens;
        };
        CHECK(run(17) == run(17));
        CHECK(run(17) != run(18));
        CHECK(run(0) != run(1));
    }
}

TEST_CASE("sampler: fixed seeds give the tokens of tools/sampler_reference.py", "[model][sampler]") {
    // The engine first: std::mt19937_64's outputs are fixed by the C++ standard, which gives the
    // 10000th for the default seed; the first five are what the script's transcription of the
    // standard's definition prints (it checks the 10000th itself).
    std::mt19937_64 engine(5489u);
    const std::uint64_t first[] = {14514284786278117030u, 4620546740167642908u, 13109570281517897720u,
                                   17462938647148434322u, 355488278567739596u};
    for (std::uint64_t expected : first) CHECK(engine() == expected);
    engine.discard(9994);
    CHECK(engine() == 9981545732273789042u);

    struct Case {
        SamplingOptions options;
        std::vector<Index> tokens;  // printed by /usr/bin/python3 tools/sampler_reference.py
    };
    const Case cases[] = {
        {SamplingOptions{0.7, 0, 1.0, 42}, {4, 4, 4, 0, 7, 0, 4, 2, 2, 2, 0, 3, 4, 4, 4, 9, 4, 2, 0, 0, 4, 0, 2, 0}},
        {SamplingOptions{1.3, 4, 1.0, 7}, {0, 9, 2, 9, 2, 2, 0, 9, 2, 0, 0, 4, 4, 2, 0, 2, 9, 9, 9, 2, 4, 2, 2, 2}},
        {SamplingOptions{1.0, 0, 0.8, 123}, {2, 4, 9, 0, 2, 2, 9, 2, 0, 4, 2, 4, 2, 4, 4, 9, 0, 4, 2, 0, 2, 0, 2, 2}},
        {SamplingOptions{0.9, 6, 0.7, 2024}, {4, 0, 2, 2, 2, 2, 0, 4, 2, 4, 4, 4, 0, 4, 2, 2, 2, 0, 4, 4, 0, 4, 2, 0}},
    };
    for (const Case& c : cases) {
        INFO("temperature " << c.options.temperature << ", top_k " << c.options.top_k << ", top_p " << c.options.top_p
                            << ", seed " << c.options.seed);
        Sampler in_float(c.options, 10), in_double(c.options, 10);
        std::vector<Index> from_float, from_double;
        for (std::size_t i = 0; i < c.tokens.size(); ++i) {
            from_float.push_back(in_float.sample(sampler_reference_logits<float>()));
            from_double.push_back(in_double.sample(sampler_reference_logits<double>()));
        }
        CHECK(from_float == c.tokens);
        CHECK(from_double == c.tokens);
    }
}

TEST_CASE("sampler: large vocabularies match a plain full-sort reference", "[model][sampler]") {
    // top-p ranks the vocabulary a chunk at a time; here the kept set spans many chunks. The
    // reference ranks everything with std::sort and follows the documented procedure step by
    // step, with its own engine and the documented 53-bit draw.
    const auto reference = [](const Vector<float>& logits, const SamplingOptions& o, std::mt19937_64& engine) {
        const Index v = logits.size();
        std::vector<Index> order(static_cast<std::size_t>(v));
        for (Index i = 0; i < v; ++i) order[static_cast<std::size_t>(i)] = i;
        std::vector<Index> ranking = order;
        std::sort(ranking.begin(), ranking.end(),
                  [&](Index a, Index b) { return logit_ranks_before(logits(a), a, logits(b), b); });
        std::vector<Index> kept = o.top_k > 0 && o.top_k < v
                                      ? std::vector<Index>(ranking.begin(), ranking.begin() + o.top_k)
                                      : order;
        double top = -kSamplerInf;
        for (Index id : kept) {
            if (!std::isnan(logits(id))) top = std::max(top, static_cast<double>(logits(id)));
        }
        std::vector<double> w(static_cast<std::size_t>(v), 0.0);
        for (Index id : kept) {
            if (!std::isnan(logits(id))) w[static_cast<std::size_t>(id)] = std::exp((logits(id) - top) / o.temperature);
        }
        if (o.top_p < 1.0) {
            double total = 0.0;
            for (Index id : kept) total += w[static_cast<std::size_t>(id)];
            const std::vector<Index> ranked = o.top_k > 0 && o.top_k < v ? kept : ranking;
            double before = 0.0;
            std::size_t cut = 0;
            while (cut < ranked.size() && before < o.top_p * total && w[static_cast<std::size_t>(ranked[cut])] > 0.0) {
                before += w[static_cast<std::size_t>(ranked[cut++])];
            }
            kept.assign(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(cut));
        }
        double total = 0.0;
        for (Index id : kept) total += w[static_cast<std::size_t>(id)];
        const double target = static_cast<double>(engine() >> 11) * 0x1.0p-53 * total;
        double running = 0.0;
        Index chosen = -1;
        for (Index id : kept) {
            if (w[static_cast<std::size_t>(id)] == 0.0) continue;
            chosen = id;
            running += w[static_cast<std::size_t>(id)];
            if (running > target) break;
        }
        return chosen;
    };
    struct Case {
        double temperature;
        Index top_k;
        double top_p;
    };
    for (const Case& c : {Case{3.0, 0, 0.97}, Case{1.0, 0, 0.9}, Case{0.2, 0, 0.6}, Case{2.0, 1000, 0.95},
                          Case{2.0, 100, 1.0}, Case{1.5, 0, 1.0}}) {
        for (unsigned seed : {1u, 2u}) {
            INFO("temperature " << c.temperature << ", top_k " << c.top_k << ", top_p " << c.top_p << ", seed " << seed);
            const SamplingOptions options = SamplingOptions{c.temperature, c.top_k, c.top_p, seed};
            Sampler sampler(options, 3000);
            std::mt19937_64 engine(seed);
            for (unsigned step = 0; step < 20; ++step) {
                const Vector<float> logits = sampler_random_logits(3000, 100 * seed + step, step % 3 == 0 ? 11 : 0);
                CHECK(sampler.sample(logits) == reference(logits, options, engine));
            }
        }
    }
}

TEST_CASE("sampler: draws follow the temperature softmax", "[model][sampler][statistics]") {
    // Every finite logit in play; the NaN (6) and -inf (8) tokens never drawn.
    const std::vector<double> x = {1.5, -0.25, 2.0, 0.75, 2.0, -1.0, kSamplerNaN, 0.125, -kSamplerInf, 1.0};
    const std::vector<double> expected = sampler_softmax_over(x, 0.7, {0, 1, 2, 3, 4, 5, 7, 9});
    sampler_check_distribution(SamplingOptions{0.7, 0, 1.0, 31}, sampler_reference_logits<float>(), expected);
    sampler_check_distribution(SamplingOptions{1.0, 0, 1.0, 32}, sampler_reference_logits<double>(),
                               sampler_softmax_over(x, 1.0, {0, 1, 2, 3, 4, 5, 7, 9}));
}

TEST_CASE("sampler: top-k keeps exactly k tokens, ties by the lower id", "[model][sampler][statistics]") {
    const std::vector<double> x = {1.5, -0.25, 2.0, 0.75, 2.0, -1.0, kSamplerNaN, 0.125, -kSamplerInf, 1.0};
    // The three largest: 2 and 4 (2.0), then 0 (1.5).
    sampler_check_distribution(SamplingOptions{1.5, 3, 1.0, 41}, sampler_reference_logits<float>(),
                               sampler_softmax_over(x, 1.5, {2, 4, 0}));
    // Three of {3, 2, 3, 2, 1}: 1 and 3 (3), then 2 of the tied 2 and 4 (the lower id), never 4.
    const std::vector<double> tied = {1.0, 3.0, 2.0, 3.0, 2.0};
    const Vector<double> tied_logits = Eigen::Map<const Vector<double>>(tied.data(), 5);
    sampler_check_distribution(SamplingOptions{1.0, 3, 1.0, 42}, tied_logits, sampler_softmax_over(tied, 1.0, {1, 3, 2}));
    // k past the vocabulary keeps everything.
    sampler_check_distribution(SamplingOptions{1.0, 50, 1.0, 43}, tied_logits,
                               sampler_softmax_over(tied, 1.0, {0, 1, 2, 3, 4}));
}

TEST_CASE("sampler: top-p keeps the smallest most probable set reaching top_p", "[model][sampler][statistics]") {
    const std::vector<double> x = {1.5, -0.25, 2.0, 0.75, 2.0, -1.0, kSamplerNaN, 0.125, -kSamplerInf, 1.0};
    const std::vector<Index> finite = {2, 4, 0, 9, 3, 7, 1, 5};  // by probability, ties by id
    // t = 2, top_p = 0.85: 2, 4, 0, 9, 3, 7 (they hold 0.85 only with 7: 0.807 without it).
    const std::vector<Index> kept = {2, 4, 0, 9, 3, 7};
    sampler_check_top_p_set(x, 2.0, finite, kept, 0.85);
    sampler_check_distribution(SamplingOptions{2.0, 0, 0.85, 51}, sampler_reference_logits<float>(),
                               sampler_softmax_over(x, 2.0, kept));
    // t = 1, top_p = 0.5: 2 and 4 (0.280 each): the tie does not cut the set at the lower id.
    sampler_check_top_p_set(x, 1.0, finite, {2, 4}, 0.5);
    sampler_check_distribution(SamplingOptions{1.0, 0, 0.5, 52}, sampler_reference_logits<double>(),
                               sampler_softmax_over(x, 1.0, {2, 4}));
    // All three: t = 0.9, top-k 6 leaves 2, 4, 0, 9, 3, 7; top-p 0.7 over their softmax keeps 2, 4, 0.
    const std::vector<Index> top_6 = {2, 4, 0, 9, 3, 7};
    sampler_check_top_p_set(x, 0.9, top_6, {2, 4, 0}, 0.7);
    sampler_check_distribution(SamplingOptions{0.9, 6, 0.7, 53}, sampler_reference_logits<float>(),
                               sampler_softmax_over(x, 0.9, {2, 4, 0}));
}

TEST_CASE("sampler: infinite and NaN logits", "[model][sampler][nan]") {
    // +infinity tokens share all the probability (the softmax's limit); NaN and the rest get none.
    Vector<double> logits(5);
    logits << kSamplerInf, 0.0, kSamplerInf, kSamplerNaN, -kSamplerInf;
    sampler_check_distribution(SamplingOptions{1.0, 0, 1.0, 61}, logits, {0.5, 0.0, 0.5, 0.0, 0.0});
    // top_k 2 keeps both (ties by id: 0, 2); top_p 0.3 then keeps the first alone.
    sampler_check_distribution(SamplingOptions{0.5, 2, 0.3, 62}, logits, {1.0, 0.0, 0.0, 0.0, 0.0});
    // Nothing to draw from: every logit NaN or -infinity.
    Sampler sampler(SamplingOptions{1.0, 0, 1.0, 63}, 3);
    const Vector<double> none = (Vector<double>(3) << kSamplerNaN, -kSamplerInf, kSamplerNaN).finished();
    CHECK_ERROR(Error, sampler.sample(none), "Sampler::sample: every logit is NaN or -infinity");
    CHECK_ERROR(Error, sampler.sample(Vector<float>::Constant(3, std::numeric_limits<float>::quiet_NaN())),
                "no distribution to sample from");
    // With one number among NaNs, that number is the only possible token.
    const Vector<double> one = (Vector<double>(3) << kSamplerNaN, -4.0, kSamplerNaN).finished();
    for (int i = 0; i < 100; ++i) CHECK(sampler.sample(one) == 1);
}
