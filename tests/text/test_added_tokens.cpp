// Added tokens (added_tokens.hpp) on a vocabulary of the 256 byte tokens alone (id = byte value,
// no merges), so the expected ids are the bytes of the text around the added tokens' ids. The
// rules are Hugging Face tokenizers' (tokenizer/added_vocabulary.rs); the JavaScript reference of
// the golden tests does not implement single_word nor the two-pass order, hence these cases.
#include "text_test_support.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using diffattn::text::Tokenizer;
using json = nlohmann::json;

namespace {

using Ids = std::vector<std::int32_t>;

/// The byte tokenizer with `added` tokens (ids from 256 in order).
Tokenizer with_added(std::initializer_list<json> added) {
    json j = text_test::byte_tokenizer_json();
    std::int32_t id = 256;
    for (json token : added) {
        token["id"] = id++;
        if (!token.contains("normalized")) token["normalized"] = false;
        j["added_tokens"].push_back(token);
    }
    return Tokenizer::from_json(j, "added tokens test");
}

/// `ids` with the bytes of `text` appended.
Ids bytes_then(Ids ids, const std::string& text) {
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
}
Ids bytes_of(const std::string& text) { return bytes_then({}, text); }
Ids join(Ids a, const Ids& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_CASE("added tokens: the leftmost match wins, then the longest") {
    const Tokenizer t = with_added({{{"content", "<a>"}}, {{"content", "<a>b"}}, {{"content", "a>"}}});
    // At offset 1 both "<a>" and "<a>b" match: the longer; "a>" would match later only.
    CHECK(t.encode("x<a>by") == join(join(bytes_of("x"), {257}), bytes_of("y")));
    CHECK(t.encode("<a>") == Ids{256});
    CHECK(t.encode("a><a>") == Ids{258, 256});
    CHECK(t.encode("<<a>") == join(bytes_of("<"), {256}));
    // Added tokens are found with or without add_special_tokens; the rest is plain text.
    CHECK(t.encode("<a", false) == bytes_of("<a"));
}

TEST_CASE("added tokens: normalized ones are looked for after the others, between them") {
    // "<a>" (normalized false) is found first, so "x<a" (normalized true) no longer matches
    // "x<a>" although it starts further left; in "x<ay" it does.
    const Tokenizer t = with_added({{{"content", "<a>"}}, {{"content", "x<a"}, {"normalized", true}}});
    CHECK(t.encode("x<a>") == join(bytes_of("x"), {256}));
    CHECK(t.encode("x<ay") == join({257}, bytes_of("y")));
    CHECK(t.encode("x<ax<a>") == join({257}, join(bytes_of("x"), {256})));
}

TEST_CASE("added tokens: single_word matches only between non-word characters") {
    const Tokenizer t = with_added({{{"content", "ab"}, {"single_word", true}}});
    CHECK(t.encode("ab") == Ids{256});
    CHECK(t.encode("ab cd") == join({256}, bytes_of(" cd")));
    CHECK(t.encode("(ab)") == join(join(bytes_of("("), {256}), bytes_of(")")));
    CHECK(t.encode("xab") == bytes_of("xab"));          // a letter before
    CHECK(t.encode("ab1") == bytes_of("ab1"));          // a digit after
    CHECK(t.encode("ab_") == bytes_of("ab_"));          // connector punctuation is a word character
    CHECK(t.encode("\xC3\xA9" "ab") == bytes_of("\xC3\xA9" "ab"));  // é: alphabetic
    CHECK(t.encode("ab\xCC\x81") == bytes_of("ab\xCC\x81"));        // a combining mark after
    // A skipped match is passed over as a whole: the search goes on after it.
    CHECK(t.encode("abab ab") == join(bytes_of("abab "), {256}));
}

TEST_CASE("added tokens: lstrip and rstrip take the whitespace beside the token") {
    const Tokenizer t = with_added({{{"content", "<m>"}, {"lstrip", true}}, {{"content", "<n>"}, {"rstrip", true}}});
    CHECK(t.encode("a  \t<m>b") == join(join(bytes_of("a"), {256}), bytes_of("b")));
    CHECK(t.encode("a<m> b") == join(join(bytes_of("a"), {256}), bytes_of(" b")));  // lstrip only
    CHECK(t.encode("a\xE3\x80\x80<m>") == join(bytes_of("a"), {256}));               // U+3000 is whitespace
    CHECK(t.encode("<n>\n \t b") == join({257}, bytes_of("b")));
    CHECK(t.encode("x <n> y") == join(join(bytes_of("x "), {257}), bytes_of("y")));   // rstrip only
    // lstrip stops where the previous token ended (the rstrip of <n> took the spaces already).
    CHECK(t.encode("<n>  <m>") == Ids{257, 256});
    CHECK(t.encode("<m>  <m>") == Ids{256, 256});
    // Only whitespace: a zero-width space (U+200B) is not.
    CHECK(t.encode("a\xE2\x80\x8B<m>") == join(bytes_of("a\xE2\x80\x8B"), {256}));
}

TEST_CASE("added tokens: special ones are skipped by decode(skip_special_tokens)") {
    const Tokenizer t = with_added({{{"content", "<s>"}, {"special", true}}, {{"content", "<plain>"}}});
    const Ids ids = t.encode("a<s>b<plain>c");
    CHECK(ids == join(join(join(join(bytes_of("a"), {256}), bytes_of("b")), {257}), bytes_of("c")));
    CHECK(t.decode(ids) == "a<s>b<plain>c");
    CHECK(t.decode(ids, true) == "ab<plain>c");
    CHECK(t.is_special(256));
    CHECK_FALSE(t.is_special(257));
    CHECK_FALSE(t.is_special(97));
    CHECK(t.id_to_token(256) == "<s>");
    CHECK(t.token_to_id("<plain>") == 257);
    CHECK(t.vocab_size() == 258);
}

TEST_CASE("added tokens: content outside the byte-level alphabet decodes as written; inside it, as bytes") {
    // Hugging Face's ByteLevel decoder: a token all of whose characters are byte-level characters
    // is decoded as the bytes they stand for ("Ġ" -> ' '), even an added one; others as written.
    const Tokenizer t = with_added({{{"content", "<sp ace>"}}, {{"content", "\xC4\xA0x"}}});
    CHECK(t.decode({256}) == "<sp ace>");  // ' ' is not a byte-level character
    CHECK(t.decode({257}) == " x");        // "Ġx"
    CHECK(t.encode("<sp ace>\xC4\xA0x") == Ids{256, 257});
}
