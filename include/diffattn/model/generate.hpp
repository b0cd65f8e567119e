// Greedy generation: continue a prompt with the most likely token, one token at a time.
//
//   with the cache:    prefill the prompt in one call into a KvCache, then one decode call per
//                      new token (the token just chosen, at the next position);
//   without the cache: every step reruns the full forward over prompt + tokens so far.
// SPEC 6 says both see the same logits (up to rounding), so both choose the same tokens.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/forward_state.hpp"
#include "diffattn/model/kv_cache.hpp"

#include <algorithm>
#include <vector>

namespace diffattn {

/// The id of the largest logit of a row (the lowest id among equal ones; NaN never wins).
///   logits [V] (a row or column of a logits matrix)
template <typename Derived>
Token argmax_token(const Eigen::DenseBase<Derived>& logits) {
    Index best = 0;
    for (Index i = 1; i < logits.size(); ++i) {
        if (logits(i) > logits(best) || (logits(best) != logits(best) && logits(i) == logits(i))) best = i;
    }
    return static_cast<Token>(best);
}

/// Greedy continuation of `prompt` (at least one token) by `count` tokens; returns the new ids:
/// `count` of them, or fewer when a token of `stop_tokens` (a checkpoint's end-of-sequence ids,
/// model/generation_config.hpp) is emitted, which is the last one returned. use_cache: prefill +
/// one decode call per token through a KvCache of prompt + count - 1 tokens; otherwise a full
/// forward over the whole sequence at every step. Attention heads run on `threads` threads.
/// Throws ShapeError for an empty prompt, a bad token id or count < 0, and OptionError for
/// use_cache with a model that cannot use a KV cache (an encoder, DINT global_mean).
template <typename T>
std::vector<Token> generate(const DecoderModel<T>& model, const std::vector<Token>& prompt, Index count,
                            bool use_cache = true, int threads = 1, const std::vector<Token>& stop_tokens = {}) {
    constexpr const char* function = "generate";
    require<ShapeError>(!prompt.empty(), function, ": the prompt is empty (greedy decoding needs at least one token)");
    require<ShapeError>(count >= 0, function, ": count must be >= 0, got ", count);
    std::vector<Token> generated;
    if (count == 0) return generated;
    generated.reserve(static_cast<std::size_t>(count));
    const Index prompt_len = static_cast<Index>(prompt.size());
    const Index total = prompt_len + count - 1;  // the last new token is never fed back
    // True once `count` tokens are out or the last one is a stop token.
    const auto done = [&] {
        return static_cast<Index>(generated.size()) == count ||
               std::find(stop_tokens.begin(), stop_tokens.end(), generated.back()) != stop_tokens.end();
    };

    if (use_cache) {
        KvCache<T> cache = model.make_cache(total);
        ForwardState<T> state = model.make_state(prompt_len, threads);  // the prefill is the largest call
        const ConstMatrixRef<T> prefill = model.forward(prompt, state, &cache);  // [prompt x V]
        std::vector<Token> next{argmax_token(prefill.row(prompt_len - 1))};
        generated.push_back(next.front());
        while (!done()) {
            const ConstMatrixRef<T> decode = model.forward(next, state, &cache);  // [1 x V]
            next.front() = argmax_token(decode.row(0));
            generated.push_back(next.front());
        }
        return generated;
    }

    ForwardState<T> state = model.make_state(total, threads);
    std::vector<Token> sequence = prompt;
    sequence.reserve(static_cast<std::size_t>(total));
    while (true) {
        const ConstMatrixRef<T> logits = model.forward(sequence, state);  // full recompute: [sequence x V]
        generated.push_back(argmax_token(logits.row(logits.rows() - 1)));
        if (done()) return generated;
        sequence.push_back(generated.back());
    }
}

}  // namespace diffattn
