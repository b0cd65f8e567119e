// tokenizer.json regular expressions are written for Oniguruma (what Hugging Face tokenizers
// compiles them with, in its default syntax); diffattn runs them with PCRE2 (docs/tokenizer.md,
// "Regular expressions", lists what follows with the evidence: tools/compare_regex_engines.cpp runs
// both). The two agree on the syntax these patterns use (alternation, classes, \p{..}, (?i:..),
// lookaround, {m,n}) but not on every construct: this translation maps the ones whose meaning
// differs, and refuses those it does not map, instead of matching something else silently.
//
//   \s \S   Oniguruma: U+0009..U+000D, U+0085 and the Z categories. PCRE2's \s (UCP) also
//           matches U+180E, so they are rewritten as that exact set.
//   \w \W   Oniguruma: the L, M, N and Pc categories (PCRE2's lacks M and Pc): rewritten.
//   \v      Oniguruma: the vertical tab alone (PCRE2: every vertical space): \x{0B}.
//   (?m)    Oniguruma: "." also matches a newline, PCRE2's (?s): rewritten, also in (?m: and (?-m).
//   {,n}    Oniguruma: {0,n} (PCRE2 10.42: the literal text): rewritten.
//   \uHHHH  Oniguruma: the code point (PCRE2: an error): \x{HHHH}.
//   refused ^ and $ (line anchors in Oniguruma, subject anchors in PCRE2), \b \B (they use \w),
//           \h \H (hex digits / horizontal space), \Q (no quoting in Oniguruma), \K, \G, \O, \y \Y,
//           backreferences and calls (\1-\9 \k \g: Oniguruma numbers groups otherwise when any is
//           named), \p without braces, nested classes and && (set operations in Oniguruma), POSIX
//           classes ([:alpha:] is Alphabetic in Oniguruma, \p{L} in PCRE2), \S or \W inside a class,
//           {n}? (optional in Oniguruma, lazy in PCRE2) and {..}+ (repeated / possessive), the
//           options other than i and m ((?s) does not compile in Oniguruma, (?x) is not mapped),
//           other (?.. groups (absent, conditional, ...), and under (?i): a non-ASCII character or
//           the letters ss, st, ff, fi, fl side by side, which Oniguruma also matches as one
//           character (U+00DF, U+FB00..U+FB06) and PCRE2 does not.
// A pattern that can match the empty string is refused by the pre-tokenizer (pre_tokenizer.hpp),
// checked on `consuming`: the pattern with each lookaround as an empty group, because PCRE2's lower
// bound on a match's length counts a lookaround's text as if consumed.
#pragma once

#include "diffattn/core/error.hpp"

#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace diffattn::text {

/// A tokenizer.json pattern in PCRE2 (UTF + UCP) syntax, and its consuming part for the
/// empty-match check.
struct TranslatedPattern {
    std::string pcre2;      ///< matches what the Oniguruma pattern matches
    std::string consuming;  ///< pcre2 with every lookaround an empty group: its matches' lengths bound pcre2's
};

/// The translation of Oniguruma pattern `pattern`. `source` names the pattern in a ConfigError
/// (e.g. "tokenizer.json \"x\": pre_tokenizer.pattern.Regex").
inline TranslatedPattern translate_oniguruma_pattern(std::string_view pattern, const std::string& source) {
    static constexpr std::string_view space_items = "\\t-\\r\\x{85}\\p{Z}";
    static constexpr std::string_view word_items = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
    const auto refuse = [&](std::size_t pos, const char* what) {
        throw ConfigError(diffattn::detail::concat(
            source, ": the regex uses ", what, " at offset ", pos,
            ", which diffattn does not translate from Oniguruma to PCRE2; pattern: ", pattern));
    };
    struct Group {
        bool caseless_before;  // (?i) state to restore at its ')'
        bool lookaround;
    };
    TranslatedPattern t;
    std::vector<Group> groups;
    int lookarounds = 0;     // open lookarounds: their text goes to t.pcre2 only
    bool caseless = false;   // under (?i)
    char previous = 0;       // the ASCII letter before, lower case, under (?i); 0: none
    const auto emit = [&](std::string_view text) {
        t.pcre2 += text;
        if (lookarounds == 0) t.consuming += text;
    };
    // An ASCII letter under (?i): refused where it and the one before spell a multi-character fold.
    const auto letter = [&](std::size_t pos, char c) {
        const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const std::string pair{previous, lower};
        if (caseless && (pair == "ss" || pair == "st" || pair == "ff" || pair == "fi" || pair == "fl")) {
            refuse(pos, "(?i) over the letters ss, st, ff, fi or fl side by side");
        }
        previous = caseless ? lower : 0;
    };
    const auto set = [&](std::string_view items, bool in_class, bool negated) {
        if (!in_class) emit(negated ? "[^" : "[");
        emit(items);
        if (!in_class) emit("]");
    };
    bool in_class = false;
    for (std::size_t pos = 0; pos < pattern.size(); ++pos) {
        const char c = pattern[pos];
        const bool is_ascii = (static_cast<unsigned char>(c) & 0x80) == 0;
        if (!is_ascii && caseless) refuse(pos, "a non-ASCII character under (?i)");
        if (c == '\\' && pos + 1 < pattern.size()) {
            const char e = pattern[pos + 1];
            const char before = previous;
            previous = 0;
            if (e == 's' || e == 'S' || e == 'w' || e == 'W') {
                const bool negated = e == 'S' || e == 'W';
                if (negated && in_class) refuse(pos, "\\S or \\W inside a character class");
                set(e == 's' || e == 'S' ? space_items : word_items, in_class, negated);
                ++pos;
                continue;
            }
            if (e == 'v') {
                emit("\\x{0B}");
                ++pos;
                continue;
            }
            if (e == 'b' || e == 'B') refuse(pos, "\\b or \\B");
            if (e == 'h' || e == 'H') refuse(pos, "\\h or \\H");
            if (e == 'Q') refuse(pos, "\\Q");
            if (e == 'K' || e == 'G' || e == 'O' || e == 'y' || e == 'Y') refuse(pos, "\\K, \\G, \\O, \\y or \\Y");
            if ((e >= '1' && e <= '9') || e == 'k' || e == 'g') refuse(pos, "a backreference or subexpression call");
            std::size_t end = pos + 2;
            if (e == 'u') {
                const std::string_view hex = pattern.substr(end, 4);
                if (hex.size() != 4 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
                    refuse(pos, "\\u without four hex digits");
                }
                if (caseless && hex.compare("0080") >= 0) refuse(pos, "a non-ASCII character under (?i)");
                emit("\\x{" + std::string(hex) + "}");
                pos = end + 3;
                continue;
            }
            if ((e == 'p' || e == 'P') && (end >= pattern.size() || pattern[end] != '{')) {
                refuse(pos, "\\p or \\P without braces");
            }
            // Copy the escape whole: \p{..}, \x{..} keep their braces, a multi-byte character its bytes.
            if ((e == 'p' || e == 'P' || e == 'x') && end < pattern.size() && pattern[end] == '{') {
                const std::size_t close = pattern.find('}', end);
                end = close == std::string_view::npos ? pattern.size() : close + 1;
            } else if (e == 'x') {
                while (end < pattern.size() && end < pos + 4 &&
                       std::isxdigit(static_cast<unsigned char>(pattern[end]))) {
                    ++end;
                }
            } else {
                const bool ascii_escape = (static_cast<unsigned char>(e) & 0x80) == 0;
                if (caseless && !ascii_escape) refuse(pos, "a non-ASCII character under (?i)");
                while (end < pattern.size() && (static_cast<unsigned char>(pattern[end]) & 0xC0) == 0x80) ++end;
            }
            if (e == 'x' && caseless) {  // a character by its number: a letter like any other
                const std::string digits(pattern.substr(pos + 2, end - pos - 2));  // "HH" or "{H...}"
                const std::size_t skip = digits.rfind('{', 0) == 0 ? 1 : 0;
                const unsigned long value = std::strtoul(digits.c_str() + skip, nullptr, 16);
                if (value >= 0x80) refuse(pos, "a non-ASCII character under (?i)");
                previous = before;
                if (!in_class && std::isalpha(static_cast<int>(value))) letter(pos, static_cast<char>(value));
            }
            emit(pattern.substr(pos, end - pos));
            pos = end - 1;
            continue;
        }
        if (in_class) {
            if (c == '[') {
                if (pos + 1 < pattern.size() && pattern[pos + 1] == ':') refuse(pos, "a POSIX class such as [:alpha:]");
                refuse(pos, "a nested character class");
            }
            if (c == '&' && pos + 1 < pattern.size() && pattern[pos + 1] == '&') {
                refuse(pos, "the class intersection &&");
            }
            if (c == ']') in_class = false;
            emit(std::string_view(&c, 1));
            continue;
        }
        if (c == '^' || c == '$') refuse(pos, "the anchor ^ or $");
        if (std::isalpha(static_cast<unsigned char>(c)) && is_ascii) {
            letter(pos, c);
            emit(std::string_view(&c, 1));
            continue;
        }
        if (c == '[') {
            previous = 0;
            emit("[");
            in_class = true;
            // A ']' right after '[' or '[^' is a literal, not the end of the class.
            if (pos + 1 < pattern.size() && pattern[pos + 1] == '^') emit(pattern.substr(++pos, 1));
            if (pos + 1 < pattern.size() && pattern[pos + 1] == ']') emit(pattern.substr(++pos, 1));
            continue;
        }
        if (c == '{') {  // an interval {n}, {n,}, {n,m} or {,m}; anything else is the literal '{' in both
            const std::size_t close = pattern.find('}', pos);
            const std::string_view body =
                close == std::string_view::npos ? std::string_view() : pattern.substr(pos + 1, close - pos - 1);
            const std::size_t comma = body.find(',');
            const bool digits = !body.empty() && body.find_first_not_of("0123456789,") == std::string_view::npos &&
                                body.find(',', comma + 1) == std::string_view::npos && body != ",";
            if (digits) {
                const char after = close + 1 < pattern.size() ? pattern[close + 1] : '\0';
                if (after == '+') refuse(pos, "an interval followed by +");
                if (after == '?' && comma == std::string_view::npos) refuse(pos, "an interval {n} followed by ?");
                emit(comma == 0 ? "{0" + std::string(body) + "}" : "{" + std::string(body) + "}");
                pos = close;
                continue;
            }
        }
        if (c == '(' && pos + 1 < pattern.size() && pattern[pos + 1] == '?') {
            const std::string_view rest = pattern.substr(pos + 2);
            if (rest.substr(0, 1) == ":" || rest.substr(0, 1) == ">") {  // transparent to a run of letters
                groups.push_back({caseless, false});
                emit(pattern.substr(pos, 3));
                pos += 2;
                continue;
            }
            const bool behind = rest.substr(0, 2) == "<=" || rest.substr(0, 2) == "<!";
            if (behind || rest.substr(0, 1) == "=" || rest.substr(0, 1) == "!") {
                previous = 0;
                groups.push_back({caseless, true});
                const std::size_t length = behind ? 4 : 3;
                if (lookarounds++ == 0) t.consuming += "(?:)";
                t.pcre2 += pattern.substr(pos, length);
                pos += length - 1;
                continue;
            }
            if (rest.substr(0, 1) == "<" || rest.substr(0, 2) == "P<" || rest.substr(0, 1) == "'") {  // a named group
                const std::size_t close = rest.find(rest[0] == '\'' ? '\'' : '>', 1);
                if (close == std::string_view::npos) refuse(pos, "an unterminated group name");
                previous = 0;
                groups.push_back({caseless, false});
                emit(pattern.substr(pos, close + 3));
                pos += close + 2;
                continue;
            }
            // Options: (?imx-imx) for the rest of the group, (?imx-imx:...) for the group.
            std::size_t end = 0;
            bool on = true, turn_caseless = caseless;
            std::string options;
            for (; end < rest.size() && rest[end] != ')' && rest[end] != ':'; ++end) {
                const char o = rest[end];
                if (o == '-') {
                    on = false;
                } else if (o == 'i') {
                    turn_caseless = on;
                } else if (o != 'm') {
                    refuse(pos, o == 's' ? "the option (?s) (not an Oniguruma option)"
                                         : "a group (?.. other than (?: (?> (?= (?! (?<= (?<! (?<name> and the "
                                           "options i and m");
                }
                options += o == 'm' ? 's' : o;
            }
            if (end == rest.size()) refuse(pos, "an unterminated group");
            previous = 0;
            emit("(?" + options + rest[end]);
            if (rest[end] == ':') {
                groups.push_back({caseless, false});
            }
            caseless = turn_caseless;
            pos += 2 + end;
            continue;
        }
        if (c == '(') {
            previous = 0;
            groups.push_back({caseless, false});
        } else if (c == ')') {
            if (!groups.empty()) {
                const Group group = groups.back();
                groups.pop_back();
                caseless = group.caseless_before;
                if (group.lookaround) {
                    t.pcre2 += ')';
                    --lookarounds;
                    continue;
                }
            }
        } else if (c != '*' && c != '+' && c != '?') {  // quantifiers keep the run (a conservative check)
            previous = 0;
        }
        emit(std::string_view(&c, 1));
    }
    return t;
}

/// The PCRE2 (UTF + UCP) pattern that matches what Oniguruma pattern `pattern` matches.
inline std::string pcre2_pattern_from_oniguruma(std::string_view pattern, const std::string& source) {
    return translate_oniguruma_pattern(pattern, source).pcre2;
}

}  // namespace diffattn::text
