// Generation: continue a prompt one token at a time, greedily (the most likely token) or with a
// token chooser such as a Sampler (model/sampler.hpp).
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
/// prompt_len + count - 1 tokens (storing keys and values in `kv_precision`) and a ForwardState of
/// prompt_len; without, a ForwardState of prompt_len + count - 1 tokens and the sequence; and the
/// count ids.
template <typename T>
void check_generate(const DecoderModel<T>& model, Index prompt_len, Index count, bool use_cache = true,
                    KvPrecision kv_precision = KvPrecision::f32) {
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
        require_memory(KvCache<T>::bytes(config, total, kv_precision) + ForwardState<T>::bytes(config, prompt_len) +
                           ids,
                       function, ": ", count, " tokens after a prompt of ", prompt_len, " with a KV cache of ", total,
                       " tokens");
        KvCache<T>::check(config, total, kv_precision);  // what is left to fail: OptionError for an encoder or global_mean
        ForwardState<T>::check(config, prompt_len);
    } else {
        require_memory(ForwardState<T>::bytes(config, total) + ids, function, ": ", count, " tokens after a prompt of ",
                       prompt_len, " without a KV cache (a ForwardState of ", total, " tokens)");
        ForwardState<T>::check(config, total);
    }
}

/// How generate() runs: at most `max_new_tokens` new tokens; a token of `stop_tokens` (a
/// checkpoint's end-of-sequence ids, model/generation_config.hpp) ends the continuation and is the
/// last one returned. use_cache: prefill + one decode call per token through a KvCache of prompt +
/// max_new_tokens - 1 tokens; otherwise a full forward over the whole sequence at every step.
/// Attention heads run on `threads` threads; the prefill's heads and projections multiply with
/// `compute`'s products (the decode steps, of one row, in T whatever it says: docs/math.md §7.1, §10.1).
struct GenerationOptions {
    Index max_new_tokens = 0;
    bool use_cache = true;
    KvPrecision kv_precision = KvPrecision::f32;  ///< the cache's stored scalar (f32: the model's T)
    int threads = 1;
    Compute compute = Compute::scalar;  ///< ForwardState::set_compute
    std::vector<Token> stop_tokens;
};

/// The continuation of `prompt` (at least one token): after each step `choose(row)` picks the next
/// id from the last logits row (a ConstRowRef-like Eigen row of V logits; argmax_token for greedy
/// decoding, or a Sampler, model/sampler.hpp), and `on_token(id)` sees it at once, before the next
/// step runs (to print text as it is produced). Returns the new ids. Throws what check_generate
/// throws (before allocating), ShapeError for a bad token id, and what `choose` throws.
template <typename T, typename Choose, typename OnToken>
std::vector<Token> generate(const DecoderModel<T>& model, const std::vector<Token>& prompt,
                            const GenerationOptions& options, Choose&& choose, OnToken&& on_token) {
    const Index prompt_len = static_cast<Index>(prompt.size());
    const Index count = options.max_new_tokens;
    check_generate(model, prompt_len, count, options.use_cache, options.kv_precision);
    detail::resolve_products<T>("generate", options.compute);  // before allocating
    std::vector<Token> generated;
    if (count == 0) return generated;
    generated.reserve(static_cast<std::size_t>(count));
    const Index total = prompt_len + count - 1;  // the last new token is never fed back
    // Takes the token chosen from `row`; true once `count` tokens are out or it is a stop token.
    const auto take = [&](const auto& row) {
        const Token next = static_cast<Token>(choose(row));
        generated.push_back(next);
        on_token(next);
        return static_cast<Index>(generated.size()) == count ||
               std::find(options.stop_tokens.begin(), options.stop_tokens.end(), next) != options.stop_tokens.end();
    };

    if (options.use_cache) {
        KvCache<T> cache = model.make_cache(total, options.kv_precision);
        ForwardState<T> state = model.make_state(prompt_len, options.threads);  // the prefill is the largest call
        state.set_compute(options.compute);
        const ConstMatrixRef<T> prefill = model.forward(prompt, state, &cache);    // [prompt x V]
        if (take(prefill.row(prompt_len - 1))) return generated;
        std::vector<Token> next{generated.back()};
        while (true) {
            const ConstMatrixRef<T> decode = model.forward(next, state, &cache);  // [1 x V]
            if (take(decode.row(0))) return generated;
            next.front() = generated.back();
        }
    }

    ForwardState<T> state = model.make_state(total, options.threads);
    state.set_compute(options.compute);
    std::vector<Token> sequence = prompt;
    sequence.reserve(static_cast<std::size_t>(total));
    while (true) {
        const ConstMatrixRef<T> logits = model.forward(sequence, state);  // full recompute: [sequence x V]
        if (take(logits.row(logits.rows() - 1))) return generated;
        sequence.push_back(generated.back());
    }
}

/// Greedy continuation of `prompt` by `count` tokens (argmax_token at every step; fewer when a
/// token of `stop_tokens` comes first, GenerationOptions). Returns the new ids.
template <typename T>
std::vector<Token> generate(const DecoderModel<T>& model, const std::vector<Token>& prompt, Index count,
                            bool use_cache = true, int threads = 1, const std::vector<Token>& stop_tokens = {}) {
    GenerationOptions options;
    options.max_new_tokens = count;
    options.use_cache = use_cache;
    options.threads = threads;
    options.stop_tokens = stop_tokens;
    return generate(
        model, prompt, options, [](const auto& row) { return argmax_token(row); }, [](Token) {});
}

}  // namespace diffattn
