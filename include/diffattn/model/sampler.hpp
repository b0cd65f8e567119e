// Choosing the next token from one position's logits: greedy, or sampled with a temperature,
// top-k and top-p, repeatably from a seed.
//
// The semantics are those of Hugging Face `generate(do_sample=True)`, whose warpers run in this
// order (transformers, generation/logits_process.py: TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper, applied in that order by GenerationMixin._get_logits_processor):
//   1. temperature: logits / temperature;
//   2. top-k: keep the k first logits of the ranking (model/logit_ranking.hpp);
//   3. top-p: over the softmax of what top-k kept, keep the smallest set of most probable tokens
//      whose probability adds up to top_p or more (HF removes a token when the tokens less
//      probable than it, itself included, add up to <= 1 - top_p), never fewer than one;
//   4. draw from the softmax of what is kept.
// Where HF leaves room: temperature 0 means greedy (HF rejects 0; llama.cpp and vLLM read it as
// greedy), and greedy is exactly argmax_token, so an all-NaN row still gives token 0 there;
// top-k keeps exactly k tokens, ties by the lower id (HF keeps every token tied with the k-th);
// the softmax is computed in double whatever the logits' type; a NaN logit has probability 0;
// +infinity logits share all the probability equally (the limit of the softmax); a row with
// nothing to draw from (every logit NaN or -infinity) is an Error, not a silent token.
//
// Repeatability: one std::mt19937_64 per Sampler, seeded with SamplingOptions::seed (its output
// sequence is fixed by the C++ standard, [rand.predef]), and one 64-bit draw per sampled token
// turned into a double in [0, 1) here (the top 53 bits times 2^-53), not by
// std::uniform_real_distribution, whose algorithm each standard library chooses. The draw u picks
// the first kept token whose running sum of weights passes u * (sum of the kept weights), the
// kept tokens taken in ranking order when top-k or top-p ranked them, in id order otherwise.
// Every sum runs in an order the options fix (id order, or ranking order after top-k; top-p's
// total before it cuts), never in an order a standard library's sort chooses.
// So a seed gives the same tokens with libstdc++ and libc++ (std::exp aside, which may differ in
// the last bit between C libraries; that moves a token only if u lands within that bit of a
// boundary).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace diffattn {

/// How to choose each next token. The defaults are greedy decoding. An aggregate:
/// `SamplingOptions{temperature, top_k, top_p, seed}`.
struct SamplingOptions {
    /// Divides the logits before the softmax (> 0), or 0: greedy, the largest logit (argmax_token).
    /// Finite and >= 0.
    double temperature = 0.0;
    /// Keep only the top_k most likely tokens (>= 1; more than the vocabulary keeps all), 0: off.
    Index top_k = 0;
    /// Keep the smallest set of most likely tokens whose probability reaches top_p, in (0, 1];
    /// 1: off.
    double top_p = 1.0;
    /// Seed of the random engine: the same seed, options and logits give the same tokens.
    std::uint64_t seed = std::mt19937_64::default_seed;

    /// True for greedy decoding: top_k and top_p then change nothing (both always keep the
    /// largest logit) and no random number is drawn.
    bool greedy() const { return temperature == 0.0; }
};

/// Throws OptionError naming the option and its value unless every option is in its range.
inline void check_sampling_options(const SamplingOptions& options) {
    constexpr const char* function = "SamplingOptions";
    require<OptionError>(std::isfinite(options.temperature) && options.temperature >= 0.0, function,
                         ": temperature must be finite and >= 0 (0 = greedy), got ", options.temperature);
    require<OptionError>(options.top_k >= 0, function, ": top_k must be >= 0 (0 = off), got ", options.top_k);
    require<OptionError>(options.top_p > 0.0 && options.top_p <= 1.0, function,
                         ": top_p must be in (0, 1] (1 = off), got ", options.top_p);
}

/// A double in [0, 1) from the top 53 bits of one 64-bit draw: every value k 2^-53 equally likely.
inline double unit_interval_from_bits(std::uint64_t bits) {
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

/// Chooses token ids from logits rows, as SamplingOptions says. Owns its random engine and its
/// scratch (sized once for the vocabulary: sample() allocates nothing), so it is not shared
/// between threads: one Sampler per sequence being generated.
class Sampler {
public:
    /// Throws OptionError for bad options (check_sampling_options), ShapeError for vocab_size < 1.
    Sampler(const SamplingOptions& options, Index vocab_size)
        : options_(checked(options)), vocab_size_(vocab_size), engine_(options.seed) {
        require<ShapeError>(vocab_size >= 1, "Sampler: vocab_size must be >= 1, got ", vocab_size);
        if (!options_.greedy()) {
            candidates_.resize(static_cast<std::size_t>(vocab_size));
            weights_.resize(static_cast<std::size_t>(vocab_size));
        }
    }

    const SamplingOptions& options() const { return options_; }
    Index vocab_size() const { return vocab_size_; }

    /// The next token id for `logits` (a row or column of a logits matrix, float or double).
    /// Greedy: argmax_token's choice, no draw. Otherwise one draw from the engine; NaN logits are
    /// never chosen. ShapeError unless logits has vocab_size() entries; Error when sampling a row
    /// whose logits are all NaN or -infinity.
    ///   logits [V]
    template <typename Derived>
    Index sample(const Eigen::DenseBase<Derived>& logits) {
        require<ShapeError>(logits.size() == vocab_size_, "Sampler::sample: logits has ", logits.size(),
                            " entries but the vocabulary has ", vocab_size_);
        if (options_.greedy()) return top_logit(logits);

        const auto ranks_before = [&](Index a, Index b) { return logit_ranks_before(logits(a), a, logits(b), b); };
        const auto first = candidates_.begin();
        auto last = candidates_.end();  // the kept candidates are [first, last)
        std::iota(first, last, Index(0));
        bool ranked = false;  // [first, last) in ranking order (else in id order)

        // Top-k first: dividing by the temperature keeps the order, so the k first logits are the
        // k first scaled ones. Exactly k, ties by the lower id.
        if (options_.top_k > 0 && options_.top_k < vocab_size_) {
            last = first + static_cast<std::ptrdiff_t>(options_.top_k);
            std::partial_sort(first, last, candidates_.end(), ranks_before);
            ranked = true;
        }

        // Temperature and the softmax's weights, in double: exp((x - max) / t) <= 1 cannot
        // overflow, and a tiny t sends the others to 0 rather than x / t to infinity.
        double max_logit = -std::numeric_limits<double>::infinity();
        for (auto it = first; it != last; ++it) {
            const double x = static_cast<double>(logits(*it));
            if (x > max_logit) max_logit = x;  // false for NaN
        }
        require(max_logit > -std::numeric_limits<double>::infinity(),
                "Sampler::sample: every logit is NaN or -infinity, so there is no distribution to sample from");
        const bool infinite = std::isinf(max_logit);  // +infinity: those tokens share everything
        for (auto it = first; it != last; ++it) {
            const double x = static_cast<double>(logits(*it));
            double w = 0.0;
            if (infinite) {
                w = x == max_logit ? 1.0 : 0.0;
            } else if (!std::isnan(x)) {
                w = std::exp((x - max_logit) / options_.temperature);
            }
            weights_[static_cast<std::size_t>(*it)] = w;
        }
        const auto weight = [&](Index id) { return weights_[static_cast<std::size_t>(id)]; };

        // Top-p over what top-k kept, most probable first: a token stays while the tokens before
        // it hold less than top_p of their total (so the first always stays). The ranking grows a
        // chunk at a time (select the next chunk, sort it), because the kept tokens are usually a
        // small part of the vocabulary, and sorting all of it would cost most of the call.
        if (options_.top_p < 1.0) {
            const double threshold = options_.top_p * kept_weight(first, last);
            auto sorted_end = ranked ? last : first;  // [first, sorted_end) in ranking order
            std::ptrdiff_t chunk = 64;
            double before = 0.0;
            auto it = first;
            for (; it != last; ++it) {
                if (it == sorted_end) {
                    const auto chunk_end = last - sorted_end > 2 * chunk ? sorted_end + chunk : last;
                    if (chunk_end != last) std::nth_element(sorted_end, chunk_end, last, ranks_before);
                    std::sort(sorted_end, chunk_end, ranks_before);
                    sorted_end = chunk_end;
                    chunk *= 2;
                }
                if (before >= threshold || weight(*it) == 0.0) break;  // zero: NaN, or exp underflow
                before += weight(*it);
            }
            last = it;
        }

        // One draw: the first kept token whose running sum of weights passes u * total.
        const double target = unit_interval_from_bits(engine_()) * kept_weight(first, last);
        double running = 0.0;
        Index chosen = -1;
        for (auto it = first; it != last; ++it) {
            if (weight(*it) == 0.0) continue;
            chosen = *it;
            running += weight(*it);
            if (running > target) break;
        }
        return chosen;  // the last token of positive weight if rounding left running <= target
    }

private:
    static const SamplingOptions& checked(const SamplingOptions& options) {
        check_sampling_options(options);
        return options;
    }

    /// The sum of the weights of candidates [first, last), in their order.
    double kept_weight(std::vector<Index>::const_iterator first, std::vector<Index>::const_iterator last) const {
        double total = 0.0;
        for (auto it = first; it != last; ++it) total += weights_[static_cast<std::size_t>(*it)];
        return total;
    }

    SamplingOptions options_;
    Index vocab_size_;
    std::mt19937_64 engine_;
    std::vector<Index> candidates_;  // [V] token ids still in play, a prefix of them kept
    std::vector<double> weights_;    // [V] softmax weights exp((x - max) / t), by token id
};

}  // namespace diffattn
