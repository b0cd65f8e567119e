// UTF-8 handling (utf8.hpp) and the streaming decoder (streaming_decoder.hpp): the classifier on
// the well-formedness table of the Unicode Standard (table 3-7), U+FFFD for each maximal subpart
// (the Standard's example, table 3-8), and token-by-token decoding of characters split over
// several byte tokens, which emits only complete characters and adds up to decode().
#include "text_test_support.hpp"

#include "diffattn/text/streaming_decoder.hpp"
#include "diffattn/text/utf8.hpp"

#include <catch2/catch.hpp>

#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace diffattn::text;

namespace {

/// The id of the byte token of `byte` (byte_level.hpp).
std::int32_t byte_token(const Tokenizer& tokenizer, unsigned char byte) {
    const std::optional<std::int32_t> id = tokenizer.token_to_id(byte_level_encode(std::string(1, static_cast<char>(byte))));
    REQUIRE(id.has_value());
    return *id;
}

}  // namespace

TEST_CASE("utf8_step: well-formed, truncated and ill-formed sequences (Unicode table 3-7)") {
    struct Case {
        const char* bytes;
        Utf8Step::Kind kind;
        std::size_t length;
    };
    const Case cases[] = {
        {"a", Utf8Step::complete, 1},
        {"\xC3\xA9", Utf8Step::complete, 2},          // é
        {"\xE2\x82\xAC", Utf8Step::complete, 3},      // €
        {"\xF0\x9F\x98\x80", Utf8Step::complete, 4},  // 😀
        {"\xF4\x8F\xBF\xBF", Utf8Step::complete, 4},  // U+10FFFF
        {"\xC3", Utf8Step::incomplete, 1},
        {"\xF0\x9F\x98", Utf8Step::incomplete, 3},
        {"\xC3" "A", Utf8Step::invalid, 1},
        {"\xF0\x9F\x98" "A", Utf8Step::invalid, 3},
        {"\x80", Utf8Step::invalid, 1},               // a continuation byte
        {"\xC0\xAF", Utf8Step::invalid, 1},           // overlong '/'
        {"\xC1\xBF", Utf8Step::invalid, 1},
        {"\xE0\x80\xAF", Utf8Step::invalid, 1},       // overlong
        {"\xED\xA0\x80", Utf8Step::invalid, 1},       // a surrogate
        {"\xF0\x80\x80\xAF", Utf8Step::invalid, 1},   // overlong
        {"\xF4\x90\x80\x80", Utf8Step::invalid, 1},   // above U+10FFFF
        {"\xF5\x80\x80\x80", Utf8Step::invalid, 1},
        {"\xFF", Utf8Step::invalid, 1},
    };
    for (const Case& c : cases) {
        INFO("bytes: " << nlohmann::json(std::string(c.bytes)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        const Utf8Step step = utf8_step(c.bytes, 0);
        CHECK(step.kind == c.kind);
        CHECK(step.length == c.length);
    }
    CHECK(first_invalid_utf8("plain") == std::string_view::npos);
    CHECK(first_invalid_utf8("") == std::string_view::npos);
    CHECK(first_invalid_utf8("ab\xC3\xA9\xFF") == 4);
    CHECK(first_invalid_utf8("ab\xF0\x9F\x98") == 2);  // truncated at the end
}

TEST_CASE("append_utf8_lossy: one U+FFFD per maximal subpart (Unicode table 3-8)") {
    // The Standard's example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
    std::string out;
    CHECK(append_utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", true, out) == 13);
    CHECK(out == "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");

    // Not final: a truncated character at the end waits; final: it becomes U+FFFD.
    out.clear();
    CHECK(append_utf8_lossy("ok\xF0\x9F", false, out) == 2);
    CHECK(out == "ok");
    CHECK(append_utf8_lossy("ok\xF0\x9F", true, out) == 4);
    CHECK(out == "okok\xEF\xBF\xBD");
}

TEST_CASE("StreamingDecoder: a character split over byte tokens comes out whole, once complete") {
    const Tokenizer tokenizer = text_test::golden_tokenizer("tiny_llama3");
    StreamingDecoder stream(tokenizer);
    // 😀 = F0 9F 98 80 as four byte tokens.
    const std::vector<std::int32_t> ids = {byte_token(tokenizer, 0xF0), byte_token(tokenizer, 0x9F),
                                           byte_token(tokenizer, 0x98), byte_token(tokenizer, 0x80)};
    CHECK(stream.push(ids[0]).empty());
    CHECK(stream.push(ids[1]).empty());
    CHECK(stream.push(ids[2]).empty());
    CHECK(stream.pending_bytes() == 3);
    CHECK(stream.push(ids[3]) == "\xF0\x9F\x98\x80");
    CHECK(stream.pending_bytes() == 0);

    // A lead byte followed by 'a': the lead can no longer be completed and becomes U+FFFD.
    CHECK(stream.push(byte_token(tokenizer, 0xE2)).empty());
    CHECK(stream.push(byte_token(tokenizer, 'a')) == "\xEF\xBF\xBD" "a");
    // A truncated character at the end of the stream.
    CHECK(stream.push(byte_token(tokenizer, 0xE2)).empty());
    CHECK(stream.push(byte_token(tokenizer, 0x82)).empty());
    CHECK(stream.finish() == "\xEF\xBF\xBD");
    CHECK(stream.finish().empty());

    // Special tokens: their content, or nothing when skipped.
    const std::int32_t eot = *tokenizer.token_to_id("<|eot_id|>");
    CHECK(stream.push(eot) == "<|eot_id|>");
    StreamingDecoder skipping(tokenizer, true);
    CHECK(skipping.push(eot).empty());

    // An unknown id is an Error and leaves the pending bytes alone.
    CHECK(stream.push(ids[0]).empty());
    CHECK_THROWS_AS(stream.push(tokenizer.vocab_size()), diffattn::Error);
    CHECK_THROWS_AS(stream.push(-1), diffattn::Error);
    CHECK(stream.pending_bytes() == 1);
}

TEST_CASE("StreamingDecoder: pushes add up to decode(), and each is valid UTF-8") {
    const Tokenizer tokenizer = text_test::golden_tokenizer("tiny_llama3");
    std::size_t waited = 0;  // pushes that had to hold back an incomplete character
    for (const nlohmann::json& c : text_test::goldens().at("cases")) {
        const std::vector<std::int32_t> ids = tokenizer.encode(c.at("text").get<std::string>(), true);
        StreamingDecoder stream(tokenizer);
        std::string streamed;
        for (const std::int32_t id : ids) {
            const std::string piece = stream.push(id);
            CHECK(first_invalid_utf8(piece) == std::string_view::npos);
            waited += stream.pending_bytes() > 0 ? 1 : 0;
            streamed += piece;
        }
        streamed += stream.finish();
        CHECK(streamed == tokenizer.decode(ids));
    }
    CHECK(waited > 20);  // the corpus splits many characters over tokens

    // Random byte tokens: mostly invalid UTF-8, replaced the same way in both.
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<std::int32_t> ids;
        for (int i = 0; i < 12; ++i) ids.push_back(byte_token(tokenizer, static_cast<unsigned char>(byte(rng))));
        StreamingDecoder stream(tokenizer);
        std::string streamed;
        for (const std::int32_t id : ids) streamed += stream.push(id);
        streamed += stream.finish();
        CHECK(streamed == tokenizer.decode(ids));
        CHECK(first_invalid_utf8(streamed) == std::string_view::npos);
    }
}
