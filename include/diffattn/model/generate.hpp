// Greedy generation: continue a prompt with the most likely token, one token at a time.
//
//   with the cache:    prefill the prompt in one call into a KvCache, then one decode call per
//                      new token (the token just chosen, at the next position);
//   without the cache: every step reruns the full forward over prompt + tokens so far.
// docs/math.md §6 says both see the same logits (up to rounding), so both choose the same tokens.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/forward_state.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include <algorithm>
#include <vector>

namespace diffattn {

/// The id of the largest logit of a row: the first of the ranking of model/logit_ranking.hpp,
/// so the lowest id among equal ones, and a NaN logit never wins over a number (a row that is
/// all NaN gives 0). ShapeError for an empty row.
///   logits [V] (a row or column of a logits matrix)
template <typename Derived>
Token argmax_token(const Eigen::DenseBase<Derived>& logits) {
    return static_cast<Token>(top_logit(logits));
}

/// Throws what generate(model, a prompt of prompt_len tokens, count, use_cache) throws for its
/// sizes, before anything is allocated: ShapeError for prompt_len < 1, count < 0, prompt_len +
/// count - 1 positions past ModelConfig::max_positions, or buffers larger than
/// memory_limit_bytes() (the message names the bytes); OptionError for use_cache with a model that
/// cannot use a KV cache (an encoder, DINT global_mean). The buffers: with the cache, a KvCache of
/// prompt_len + count - 1 tokens and a ForwardState of prompt_len; without, a ForwardState of
/// prompt_len + count - 1 tokens and the sequence; and the count ids.
template <typename T>
void check_generate(const DecoderModel<T>& model, Index prompt_len, Index count, bool use_cache = true) {
    constexpr const char* function = "generate";
    require<ShapeError>(prompt_len > 0, function, ": the prompt is empty (greedy decoding needs at least one token)");
    require<ShapeError>(count >= 0, function, ": count must be >= 0, got ", count);
    if (count == 0) return;
    require<ShapeError>(prompt_len <= ModelConfig::max_positions && count - 1 <= ModelConfig::max_positions - prompt_len,
                        function, ": ", count, " tokens after a prompt of ", prompt_len, " would pass the ",
                        ModelConfig::max_positions, " positions of a sequence (ModelConfig::max_positions)");
    const Index total = prompt_len + count - 1;  // the last new token is never fed back
    const ModelConfig& config = model.config();
    const long double ids = static_cast<long double>(sizeof(Token)) * static_cast<long double>(total + count);
    if (use_cache) {
        require_memory(KvCache<T>::bytes(config, total) + ForwardState<T>::bytes(config, prompt_len) + ids, function,
                       ": ", count, " tokens after a prompt of ", prompt_len, " with a KV cache of ", total, " tokens");
        KvCache<T>::check(config, total);  // what is left to fail: OptionError for an encoder or global_mean
        ForwardState<T>::check(config, prompt_len);
    } else {
        require_memory(ForwardState<T>::bytes(config, total) + ids, function, ": ", count, " tokens after a prompt of ",
                       prompt_len, " without a KV cache (a ForwardState of ", total, " tokens)");
        ForwardState<T>::check(config, total);
    }
}

/// Greedy continuation of `prompt` (at least one token) by `count` tokens; returns the new ids:
/// `count` of them, or fewer when a token of `stop_tokens` (a checkpoint's end-of-sequence ids,
/// model/generation_config.hpp) is emitted, which is the last one returned. use_cache: prefill +
/// one decode call per token through a KvCache of prompt + count - 1 tokens; otherwise a full
/// forward over the whole sequence at every step. Attention heads run on `threads` threads.
/// Throws what check_generate throws (before allocating), and ShapeError for a bad token id.
template <typename T>
std::vector<Token> generate(const DecoderModel<T>& model, const std::vector<Token>& prompt, Index count,
                            bool use_cache = true, int threads = 1, const std::vector<Token>& stop_tokens = {}) {
    const Index prompt_len = static_cast<Index>(prompt.size());
    check_generate(model, prompt_len, count, use_cache);
    std::vector<Token> generated;
    if (count == 0) return generated;
    generated.reserve(static_cast<std::size_t>(count));
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
