// The limits of a tokenizer.json and its tokenizer_config.json: bytes, nesting and counts, checked
// before anything is built from them (the JSON tree's nodes cost tens of bytes each, each Split
// compiles a regex), about ten times what real tokenizers need. docs/tokenizer.md, "Limits".
#pragma once

#include "diffattn/io/detail/strict_json.hpp"

#include <cstddef>
#include <cstdint>

namespace diffattn::text {

/// Largest tokenizer.json Tokenizer::load reads, in bytes: four times Gemma 3's (about 33 MB, the
/// largest we know; Llama 3's is about 9 MB), and about what the count limits below allow.
inline constexpr std::uintmax_t max_tokenizer_json_bytes = std::uintmax_t(128) << 20;

/// Deepest JSON nesting accepted in tokenizer.json and tokenizer_config.json (real files nest a few
/// levels). Deeper input is rejected while parsing, so no recursive walk meets a pathological depth.
inline constexpr int max_tokenizer_json_depth = 32;

/// Count limits of tokenizer.json text, checked in the linear pass before the DOM is built (its
/// nodes cost tens of bytes each): about ten times what real tokenizers need (Llama 3: 128,256
/// tokens, about 280,000 merges, 256 added tokens; Gemma 3: 262,144 tokens).
inline constexpr std::size_t max_tokenizer_vocab = std::size_t(1) << 21;         ///< model.vocab
inline constexpr std::size_t max_tokenizer_merges = std::size_t(1) << 22;        ///< model.merges
inline constexpr std::size_t max_tokenizer_added_tokens = std::size_t(1) << 16;  ///< added_tokens
/// Members of every other array or object (the top level included): real ones hold a few.
inline constexpr std::size_t max_tokenizer_json_members = 4096;
/// JSON values in the whole file: room for every limit above at once (merges as [a, b] pairs),
/// while nested small arrays cannot multiply past it.
inline constexpr std::size_t max_tokenizer_json_values = std::size_t(1) << 24;
/// Pre-tokenizer steps after Sequences are flattened (Llama 3 has 2): each Split compiles a regex.
inline constexpr std::size_t max_tokenizer_pre_tokenizer_steps = 64;
/// Special-token ids the post-processor's template puts around the text (Llama 3 puts 1).
inline constexpr std::size_t max_tokenizer_template_ids = 64;

/// The JsonLimits of tokenizer.json text (Tokenizer::from_json_text, Tokenizer::load).
inline diffattn::detail::JsonLimits tokenizer_json_limits() {
    diffattn::detail::JsonLimits limits;
    limits.max_depth = max_tokenizer_json_depth;
    limits.max_array_size = max_tokenizer_json_members;
    limits.max_object_members = max_tokenizer_json_members;
    limits.max_top_level_keys = max_tokenizer_json_members;
    limits.max_values = max_tokenizer_json_values;
    limits.large_containers = {{"model.vocab", max_tokenizer_vocab},
                               {"model.merges", max_tokenizer_merges},
                               {"added_tokens", max_tokenizer_added_tokens}};
    return limits;
}

}  // namespace diffattn::text
