// The pre-tokenizer (pre_tokenizer.hpp) and the Oniguruma -> PCRE2 pattern translation
// (oniguruma_pattern.hpp). The expected pieces follow from the patterns' Oniguruma semantics,
// worked out by hand in the comments.
#include "text_test_support.hpp"

#include "diffattn/text/oniguruma_pattern.hpp"
#include "diffattn/text/pre_tokenizer.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace diffattn::text;
using Pieces = std::vector<std::string>;

namespace {

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Pieces pieces_of(const PreTokenizer& pre, const std::string& text) {
    Pieces pieces;
    pre.split(text, pieces);
    return pieces;
}

PreTokenizer llama3_pre_tokenizer() {
    return PreTokenizer({PreTokenizerStep::split(kLlama3Pattern, "test"), PreTokenizerStep::byte_level(false, false)});
}

std::string translated(const std::string& pattern) { return pcre2_pattern_from_oniguruma(pattern, "test"); }

}  // namespace

TEST_CASE("oniguruma pattern: \\s and \\w become Oniguruma's sets, other escapes stay") {
    CHECK(translated(R"(\s+)") == R"([\t-\r\x{85}\p{Z}]+)");
    CHECK(translated(R"(\S)") == R"([^\t-\r\x{85}\p{Z}])");
    CHECK(translated(R"([^\s\p{L}\p{N}]+)") == R"([^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)");
    CHECK(translated(R"(\w\W)") == R"([\p{L}\p{M}\p{N}\p{Pc}][^\p{L}\p{M}\p{N}\p{Pc}])");
    CHECK(translated(R"(\\s)") == R"(\\s)");  // an escaped backslash, then a literal s
    CHECK(translated(R"(\p{L}\x{85}\$\.[]a][^]a])") == R"(\p{L}\x{85}\$\.[]a][^]a])");
    CHECK(translated("(?i:'s)|\xC3\xA9\\\xC3\xA9") == "(?i:'s)|\xC3\xA9\\\xC3\xA9");
    // Constructs whose meaning differs and that are not translated are refused.
    for (const char* refused : {"^a", "a$", "\\bword", "\\Bx", "\\h", "\\H", "\\Qa\\E", "[a[b]]", "[a&&b]", "[\\S]",
                                "[\\W]"}) {
        INFO("pattern " << refused);
        CHECK_THROWS_AS(translated(refused), diffattn::ConfigError);
    }
}

TEST_CASE("oniguruma pattern: constructs that mean otherwise in PCRE2 are translated or refused") {
    // Each as Oniguruma 6.9.8 matches it (tools/compare_regex_engines.cpp compares the two engines).
    CHECK(translated(R"(\v|[^\v]+)") == R"(\x{0B}|[^\x{0B}]+)");  // the vertical tab alone
    CHECK(translated("(?m).+") == "(?s).+");                        // "." also matches a newline
    CHECK(translated("(?im:.)(?-m).") == "(?is:.)(?-s).");
    CHECK(translated("b{,2}c{1,}d{2}e{1,2}?") == "b{0,2}c{1,}d{2}e{1,2}?");
    CHECK(translated(R"(\u00e9)") == R"(\x{00e9})");
    CHECK(translated("x{|a{,}") == "x{|a{,}");  // not intervals: literal text in both
    // (?i) over letters that no multi-character case fold spells, or over classes: as PCRE2 does it.
    CHECK(translated("(?i:'s|'t|'re|'ve|'m|'ll|'d)") == "(?i:'s|'t|'re|'ve|'m|'ll|'d)");
    CHECK(translated("(?i)s[s]|s(s)|(?-i)ss|st") == "(?i)s[s]|s(s)|(?-i)ss|st");
    for (const char* refused :
         {"(?s).", "(?x)a b", "(?~a)", "(?(1)a)", "[[:alpha:]]", "[[:digit:]]", "a{2}+", "a{1,2}+", "a{2}?", "\\K",
          "a\\Ga", "\\O", "\\y", "(a)\\1", "(?<n>a)\\k<n>", "\\g<1>", "\\pL", "\\u12", "(?i:ss)", "(?i)s(?:t)",
          "(?i)\\x{46}f", "(?i:fi)", "(?i)FL", "(?i)\xC3\x9F", "(?i)[\xC3\xA9]", "(?i)\\x{e9}", "(?i)\\u00e9"}) {
        INFO("pattern " << refused);
        CHECK_THROWS_AS(translated(refused), diffattn::ConfigError);
    }
}

TEST_CASE("pre-tokenizer: \\v and (?m) split as Oniguruma splits") {
    // Oniguruma's \v is the vertical tab alone, so [^\v]+ takes ".\n" whole (Hugging Face: one
    // piece); its (?m) lets "." take the newline.
    const PreTokenizer vertical({PreTokenizerStep::split(R"(\v|[^\v]+)", "test")});
    CHECK(pieces_of(vertical, ".\n") == Pieces{".\n"});
    CHECK(pieces_of(vertical, "a\x0B" "b") == Pieces{"a", "\x0B", "b"});
    const PreTokenizer dotall({PreTokenizerStep::split("(?m).{1,3}", "test")});
    CHECK(pieces_of(dotall, "a\nbcd") == Pieces{"a\nb", "cd"});
}

TEST_CASE("pre-tokenizer: a pattern that can match the empty string is refused when read") {
    // A lookaround or \K matches no text of its own; PCRE2's own bound on the length of a match
    // counts a lookahead's text, so the check is made on the pattern without its lookarounds.
    for (const char* empty : {"(?=a)|b", "(?<=a)|b", "(?!a)", "b|(?<!a)", "a\\K|.", "a*", "(?:(?=a))+|b", "b?(?=c)"}) {
        INFO("pattern " << empty);
        CHECK_THROWS_WITH(PreTokenizerStep::split(empty, "test"),
                          Catch::Contains("test: the regex") &&
                              (Catch::Contains("can match the empty string") || Catch::Contains("\\K")));
    }
    const PreTokenizer ahead({PreTokenizerStep::split("(?=a)a|b(?!c)", "test")});
    CHECK(pieces_of(ahead, "abbc") == Pieces{"a", "b", "bc"});  // text between matches is a piece
}

TEST_CASE("pre-tokenizer: Llama 3's pattern (letters, 1-3 digits, contractions, whitespace runs)") {
    const PreTokenizer pre = llama3_pre_tokenizer();
    // "\n\n  x": \s*[\r\n]+ takes "\n\n"; of the two spaces, \s+(?!\S) takes the first (the
    // second must not be followed by non-space), and the second goes with "x".
    CHECK(pieces_of(pre, "Hello world's 12345 test\n\n  x") ==
          Pieces{"Hello", " world", "'s", " ", "123", "45", " test", "\n\n", " ", " x"});
    CHECK(pieces_of(pre, "I'M HERE, they'RE") == Pieces{"I", "'M", " HERE", ",", " they", "'RE"});
    CHECK(pieces_of(pre, "trailing   ") == Pieces{"trailing", "   "});
    CHECK(pieces_of(pre, "a\t\tb") == Pieces{"a", "\t", "\tb"});
    CHECK(pieces_of(pre, "...!?\n") == Pieces{"...!?\n"});
    CHECK(pieces_of(pre, "").empty());
    // U+180E is not whitespace in Oniguruma (nor in Unicode since 6.3), unlike PCRE2's own \s:
    // " \u180E" is a space + punctuation piece.
    CHECK(pieces_of(pre, "x \xE1\xA0\x8Eword") == Pieces{"x", " \xE1\xA0\x8E", "word"});
    // U+0085 (NEL) is whitespace in Oniguruma.
    CHECK(pieces_of(pre, "a\xC2\x85\xC2\x85" "b") == Pieces{"a", "\xC2\x85", "\xC2\x85" "b"});
    // (?i:'s) folds case with Unicode: U+017F (long s) matches 's' in Oniguruma and PCRE2 alike.
    CHECK(pieces_of(pre, "it'\xC5\xBFt") == Pieces{"it", "'\xC5\xBF", "t"});
}

TEST_CASE("pre-tokenizer: ByteLevel with GPT-2's pattern and the prefix space") {
    const PreTokenizer gpt2({PreTokenizerStep::byte_level(false, true)});
    CHECK(pieces_of(gpt2, "Hello world's  12345!!") == Pieces{"Hello", " world", "'s", " ", " 12345", "!!"});
    CHECK(pieces_of(gpt2, "a\xC2\x85\xC2\x85" "b") == Pieces{"a", "\xC2\x85", "\xC2\x85", "b"});
    const PreTokenizer prefixed({PreTokenizerStep::byte_level(true, true)});
    CHECK(pieces_of(prefixed, "Hello world") == Pieces{" Hello", " world"});
    CHECK(pieces_of(prefixed, " Hello") == Pieces{" Hello"});
    const PreTokenizer prefix_only({PreTokenizerStep::byte_level(true, false)});
    CHECK(pieces_of(prefix_only, "Hello world") == Pieces{" Hello world"});
}

TEST_CASE("pre-tokenizer: Split with a String pattern splits on the literal text") {
    nlohmann::json j = text_test::with_merges(text_test::byte_tokenizer_json(), {"a .", "a. b"});
    const nlohmann::json split = {
        {"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"}, {"invert", false}};
    const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({split, byte_level})}};
    // Pieces "xa", ".", "bx": the merges cannot reach across them ("." is literal, not any character).
    CHECK(diffattn::text::Tokenizer::from_json(j).encode("xa.bx") ==
          std::vector<std::int32_t>{'x', 'a', '.', 'b', 'x'});
    j["pre_tokenizer"]["pretokenizers"].erase(0);
    CHECK(diffattn::text::Tokenizer::from_json(j).encode("xa.bx") ==
          std::vector<std::int32_t>{'x', *diffattn::text::Tokenizer::from_json(j).token_to_id("a.b"), 'x'});
}

TEST_CASE("pre-tokenizer: long runs (JIT stack, backtracking) split without error") {
    const PreTokenizer pre = llama3_pre_tokenizer();
    const std::string letters(200000, 'a');
    CHECK(pieces_of(pre, letters) == Pieces{letters});
    const std::string spaces(200000, ' ');
    CHECK(pieces_of(pre, spaces + "x") == Pieces{spaces.substr(1), " x"});
    std::string mixed;
    for (int i = 0; i < 20000; ++i) mixed += "ab  12\t\n";
    std::size_t total = 0;
    for (const std::string& piece : pieces_of(pre, mixed)) total += piece.size();
    CHECK(total == mixed.size());
}

TEST_CASE("pre-tokenizer: the regexes of every step and piece share the text's matching budget") {
    // Step 1 cuts 20 000 "a" into pieces of 1000; step 2 backtracks over the rest of its piece at
    // every match: about 1000^2 / 2 steps a piece, within what a piece of 1000 bytes alone would
    // get, but 20 times that is over the text's 2^20 + 256 x 20 000.
    const PreTokenizer pre({PreTokenizerStep::split("a{1000}", "test"), PreTokenizerStep::split("(?:a|b)*c|.", "test")});
    CHECK(pieces_of(pre, std::string(1000, 'a')).size() == 1000);
    CHECK_THROWS_WITH(pieces_of(pre, std::string(20000, 'a')),
                      Catch::Contains("matching steps on a text of 20000 bytes (256 a byte), at byte ") &&
                          Catch::Contains("of a piece of 1000: it backtracks over much of the text at each match"));
}
