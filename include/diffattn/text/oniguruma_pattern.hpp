// tokenizer.json regular expressions are written for Oniguruma (what Hugging Face tokenizers
// compiles them with); diffattn runs them with PCRE2 (docs/tokenizer.md). The two agree on the
// syntax these patterns use (alternation, classes, \p{..}, (?i:..), lookahead, {m,n}) but not on
// every escape: this translation maps the ones whose Unicode meaning differs, and refuses
// the constructs whose meaning it does not map, instead of matching something else silently.
//
//   \s \S   Oniguruma: U+0009..U+000D, U+0085 and the Z categories. PCRE2's \s (UCP) also
//           matches U+180E, so they are rewritten as that exact set.
//   \w \W   Oniguruma: the L, M, N and Pc categories (PCRE2's lacks M and Pc): rewritten.
//   refused ^ and $ outside a class (line anchors in Oniguruma, subject anchors in PCRE2),
//           \b \B (they use \w), \h \H (hex digits in Oniguruma, horizontal space in PCRE2),
//           \Q (no quoting in Oniguruma), nested classes and && (set operations in Oniguruma),
//           \S or \W inside a class (no complement inside a PCRE2 class).
#pragma once

#include "diffattn/core/error.hpp"

#include <string>
#include <string_view>

namespace diffattn::text {

/// The PCRE2 (UTF + UCP) pattern that matches what Oniguruma pattern `pattern` matches. `source`
/// names the pattern in a ConfigError (e.g. "tokenizer.json \"x\": pre_tokenizer.pattern.Regex").
inline std::string pcre2_pattern_from_oniguruma(std::string_view pattern, const std::string& source) {
    static constexpr std::string_view space_items = "\\t-\\r\\x{85}\\p{Z}";
    static constexpr std::string_view word_items = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
    const auto refuse = [&](std::size_t pos, const char* what) {
        throw ConfigError(diffattn::detail::concat(source, ": the regex uses ", what, " at offset ", pos,
                                         ", which diffattn does not translate from Oniguruma to PCRE2; pattern: ",
                                         pattern));
    };
    // The set `items` as a class of its own outside a class, as class items inside one.
    const auto set = [](std::string& out, std::string_view items, bool in_class, bool negated) {
        if (!in_class) out += negated ? "[^" : "[";
        out += items;
        if (!in_class) out += ']';
    };
    std::string out;
    out.reserve(pattern.size() + 32);
    bool in_class = false;
    for (std::size_t pos = 0; pos < pattern.size(); ++pos) {
        const char c = pattern[pos];
        if (c == '\\' && pos + 1 < pattern.size()) {
            const char e = pattern[pos + 1];
            if (e == 's' || e == 'S' || e == 'w' || e == 'W') {
                const bool negated = e == 'S' || e == 'W';
                if (negated && in_class) refuse(pos, "\\S or \\W inside a character class");
                set(out, e == 's' || e == 'S' ? space_items : word_items, in_class, negated);
                ++pos;
                continue;
            }
            if (e == 'b' || e == 'B') refuse(pos, "\\b or \\B");
            if (e == 'h' || e == 'H') refuse(pos, "\\h or \\H");
            if (e == 'Q') refuse(pos, "\\Q");
            // Copy the escape whole: \p{..}, \x{..} keep their braces, a multi-byte character its bytes.
            std::size_t end = pos + 2;
            if ((e == 'p' || e == 'P' || e == 'x') && end < pattern.size() && pattern[end] == '{') {
                const std::size_t close = pattern.find('}', end);
                end = close == std::string_view::npos ? pattern.size() : close + 1;
            } else {
                while (end < pattern.size() && (static_cast<unsigned char>(pattern[end]) & 0xC0) == 0x80) ++end;
            }
            out.append(pattern.substr(pos, end - pos));
            pos = end - 1;
            continue;
        }
        if (!in_class) {
            if (c == '^' || c == '$') refuse(pos, "the anchor ^ or $");
            out += c;
            if (c == '[') {
                in_class = true;
                // A ']' right after '[' or '[^' is a literal, not the end of the class.
                if (pos + 1 < pattern.size() && pattern[pos + 1] == '^') out += pattern[++pos];
                if (pos + 1 < pattern.size() && pattern[pos + 1] == ']') out += pattern[++pos];
            }
            continue;
        }
        if (c == '[') {
            const std::size_t close = pattern.find(":]", pos);
            if (pos + 1 >= pattern.size() || pattern[pos + 1] != ':' || close == std::string_view::npos) {
                refuse(pos, "a nested character class");
            }
            out.append(pattern.substr(pos, close + 2 - pos));  // a POSIX class, [:alpha:]
            pos = close + 1;
            continue;
        }
        if (c == '&' && pos + 1 < pattern.size() && pattern[pos + 1] == '&') refuse(pos, "the class intersection &&");
        if (c == ']') in_class = false;
        out += c;
    }
    return out;
}

}  // namespace diffattn::text
