// The pre-tokenizer: splits a run of text (between added tokens) into the words that BPE merges
// within (docs/tokenizer.md). Two step kinds, applied in order to every piece, as tokenizer.json's
// pre_tokenizer (or a Sequence of them) lists them:
//
//   Split(Regex, behavior Isolated, invert false)   each match is a piece, and so is each gap
//                                                   between matches (Llama 3)
//   ByteLevel(add_prefix_space, use_regex)          prefixes a piece that does not start with ' '
//                                                   with one; with use_regex, splits it like
//                                                   Split(GPT-2's pattern); last in the sequence
//
// Pieces stay raw UTF-8 bytes: the vocabulary is keyed by the bytes its tokens stand for
// (byte_level.hpp), so ByteLevel's byte -> character mapping is never materialised.
#pragma once

#include "diffattn/text/oniguruma_pattern.hpp"
#include "diffattn/text/pcre2_regex.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace diffattn::text {

/// GPT-2's pre-tokenizer pattern, which ByteLevel(use_regex: true) splits with.
inline constexpr std::string_view gpt2_pre_tokenizer_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// One pre-tokenizer step: a regex split (`regex` set), a prefix space, or both (ByteLevel).
struct PreTokenizerStep {
    std::shared_ptr<const Pcre2Regex> regex;  ///< Isolated split by this pattern, if set
    bool add_prefix_space = false;            ///< ByteLevel's add_prefix_space (before the split)
    bool is_byte_level = false;               ///< a ByteLevel step (the reader wants one, last)

    /// Split(Regex `oniguruma_pattern`, Isolated). ConfigError naming `source` for a pattern that
    /// does not translate or compile, or that can match the empty string.
    static PreTokenizerStep split(std::string_view oniguruma_pattern, const std::string& source) {
        const TranslatedPattern translated = translate_oniguruma_pattern(oniguruma_pattern, source);
        auto regex = std::make_shared<const Pcre2Regex>(translated.pcre2, source);
        // PCRE2's bound on a match's length counts a lookaround's text (`(?=a)|b`): the consuming
        // part, each lookaround an empty group, bounds it truly (oniguruma_pattern.hpp).
        require<ConfigError>(!regex->can_match_empty() && !Pcre2Regex(translated.consuming, source).can_match_empty(),
                             source, ": the regex can match the empty string, which diffattn does not support; pattern: ",
                             oniguruma_pattern);
        PreTokenizerStep step;
        step.regex = std::move(regex);
        return step;
    }

    /// ByteLevel(add_prefix_space, use_regex).
    static PreTokenizerStep byte_level(bool add_prefix_space, bool use_regex) {
        PreTokenizerStep step;
        if (use_regex) step = split(gpt2_pre_tokenizer_pattern, "the ByteLevel pre-tokenizer's GPT-2 pattern");
        step.add_prefix_space = add_prefix_space;
        step.is_byte_level = true;
        return step;
    }
};

class PreTokenizer {
public:
    PreTokenizer() = default;
    explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

    /// Splits `text` (valid UTF-8) into pieces, replacing `pieces`. No piece is empty. The matches of
    /// every step share one MatchBudget for the text: an Error when its regexes backtrack too much.
    void split(std::string_view text, std::vector<std::string>& pieces) const {
        MatchBudget budget(text.size());
        pieces.clear();
        if (!text.empty()) pieces.emplace_back(text);
        std::vector<std::string> next;
        for (const PreTokenizerStep& step : steps_) {
            next.clear();
            for (std::string& piece : pieces) {
                if (step.add_prefix_space && piece.front() != ' ') piece.insert(piece.begin(), ' ');
                if (!step.regex) {
                    next.push_back(std::move(piece));
                    continue;
                }
                std::size_t gap = 0;  // Isolated: the gaps between matches are pieces too
                const char* what = "Tokenizer::encode: pre-tokenizer";
                step.regex->for_each_match(piece, what, budget, [&](std::size_t b, std::size_t e) {
                    if (b > gap) next.emplace_back(piece, gap, b - gap);
                    next.emplace_back(piece, b, e - b);
                    gap = e;
                });
                if (gap < piece.size()) next.emplace_back(piece, gap, piece.size() - gap);
            }
            pieces.swap(next);
        }
    }

private:
    std::vector<PreTokenizerStep> steps_;
};

}  // namespace diffattn::text
