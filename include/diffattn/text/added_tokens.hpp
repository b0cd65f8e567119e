// Added tokens (tokenizer.json "added_tokens": special ones like <|eot_id|> and plain ones) are
// found in the raw text before it is pre-tokenized, and become their own id (docs/tokenizer.md).
// The matching follows Hugging Face tokenizers (tokenizer/added_vocabulary.rs):
//
//  - two passes: tokens with normalized false are matched in the whole text; tokens with
//    normalized true then in the pieces between those (with no normalizer, the only kind diffattn
//    accepts, they match the same raw text, but the order of the passes still decides overlaps);
//  - in a pass, the leftmost match wins, and the longest of the tokens that match there;
//  - single_word: a match with a word character (Unicode \w: Alphabetic, M, Nd, Pc,
//    Join_Control) right before or after it is skipped, and the search goes on after it;
//  - lstrip / rstrip: the token also takes the whitespace (Unicode White_Space) before / after it,
//    which then produces no token (lstrip stops at the end of the previous match).
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/text/pcre2_regex.hpp"
#include "diffattn/text/utf8.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace diffattn::text {

/// One entry of tokenizer.json's added_tokens.
struct AddedToken {
    std::string content;
    std::int32_t id = 0;
    bool special = false;      ///< skipped by decode(..., skip_special_tokens = true)
    bool single_word = false;  ///< only matches as a whole word
    bool lstrip = false;       ///< takes the whitespace before it
    bool rstrip = false;       ///< takes the whitespace after it
    bool normalized = true;    ///< matched in the second pass (Hugging Face's default: true)
};

/// Unicode White_Space (PropList.txt), the whitespace lstrip / rstrip take.
inline bool is_white_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

class AddedTokens {
public:
    AddedTokens() = default;

    /// ConfigError, prefixed with `source`, for an empty content or a content listed twice.
    AddedTokens(std::vector<AddedToken> tokens, const std::string& source)
        : tokens_(std::make_shared<std::vector<AddedToken>>(std::move(tokens))) {
        std::unordered_set<std::string_view> seen;
        bool single_word = false;
        for (std::size_t i = 0; i < tokens_->size(); ++i) {
            const AddedToken& t = (*tokens_)[i];
            require<ConfigError>(!t.content.empty(), source, ": added_tokens[", i, "] (id ", t.id, ") has an empty content");
            require<ConfigError>(seen.insert(t.content).second, source, ": added_tokens[", i, "]: the content \"",
                                 t.content, "\" is listed twice");
            Pass& pass = t.normalized ? normalized_ : raw_;
            pass[static_cast<unsigned char>(t.content.front())].push_back(static_cast<std::uint32_t>(i));
            single_word = single_word || t.single_word;
        }
        // Longest first within a bucket, so the first hit at a position is the longest one.
        for (Pass* pass : {&raw_, &normalized_}) {
            for (auto& bucket : *pass) {
                std::stable_sort(bucket.begin(), bucket.end(), [&](std::uint32_t a, std::uint32_t b) {
                    return (*tokens_)[a].content.size() > (*tokens_)[b].content.size();
                });
            }
        }
        if (single_word) {
            word_char_ = std::make_shared<const Pcre2Regex>(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])",
                                                            "the single_word check's word-character class");
        }
    }

    const std::vector<AddedToken>& tokens() const {
        static const std::vector<AddedToken> none;
        return tokens_ ? *tokens_ : none;
    }

    /// Splits `text` (valid UTF-8) into runs of plain text, passed to on_text(std::string_view),
    /// and added tokens, passed to on_token(const AddedToken&), in text order.
    template <typename OnText, typename OnToken>
    void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
        split_pass(raw_, text, [&](std::string_view run) { split_pass(normalized_, run, on_text, on_token); },
                   on_token);
    }

private:
    using Pass = std::array<std::vector<std::uint32_t>, 256>;  // token indices by first byte

    template <typename OnText, typename OnToken>
    void split_pass(const Pass& pass, std::string_view s, OnText&& on_text, OnToken&& on_token) const {
        std::size_t start_offset = 0;  // the end of the previous match
        std::size_t pos = 0;           // where the search goes on
        while (pos < s.size()) {
            std::size_t start = s.size();
            const AddedToken* token = nullptr;
            for (std::size_t p = pos; p < s.size() && token == nullptr; ++p) {
                for (const std::uint32_t i : pass[static_cast<unsigned char>(s[p])]) {
                    const AddedToken& t = (*tokens_)[i];
                    if (s.compare(p, t.content.size(), t.content) == 0) {
                        token = &t;
                        start = p;
                        break;
                    }
                }
            }
            if (token == nullptr) break;
            std::size_t stop = start + token->content.size();
            pos = stop;
            if (token->single_word && (is_word_char_before(s, start) || is_word_char_at(s, stop))) continue;
            if (token->lstrip) {
                std::size_t b = start;
                while (b > start_offset) {
                    const std::size_t prev = previous_code_point_start(s, b);
                    std::size_t at = prev;
                    if (!is_white_space(next_code_point(s, at))) break;
                    b = prev;
                }
                start = b;
            }
            if (token->rstrip) {
                for (std::size_t at = stop; at < s.size();) {
                    if (!is_white_space(next_code_point(s, at))) break;
                    stop = at;
                }
                pos = stop;
            }
            if (start > start_offset) on_text(s.substr(start_offset, start - start_offset));
            on_token(*token);
            start_offset = stop;
        }
        if (start_offset < s.size()) on_text(s.substr(start_offset));
    }

    bool is_word_char_at(std::string_view s, std::size_t pos) const {
        return pos < s.size() && word_char_->matches_at(s, pos);
    }
    bool is_word_char_before(std::string_view s, std::size_t pos) const {
        return pos > 0 && word_char_->matches_at(s, previous_code_point_start(s, pos));
    }

    std::shared_ptr<const std::vector<AddedToken>> tokens_;
    Pass raw_, normalized_;
    std::shared_ptr<const Pcre2Regex> word_char_;  // only when a token is single_word
};

}  // namespace diffattn::text
