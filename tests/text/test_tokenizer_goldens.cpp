// The tokenizer against an independent implementation: every corpus text of
// tests/data/text/tokenizer_goldens.json (ASCII, CJK, emoji with ZWJ sequences, combining marks,
// whitespace runs, digit groups, contractions, special tokens, the empty string) must encode to
// the ids the JavaScript reference gave (tools/make_tokenizer_goldens.sh), with and without
// special tokens, and decode to its text; and decode(encode(x)) == x.
#include "text_test_support.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using diffattn::text::Tokenizer;
using json = nlohmann::json;

namespace {

std::vector<std::int32_t> golden_ids(const json& ids) { return ids.get<std::vector<std::int32_t>>(); }

}  // namespace

TEST_CASE("tokenizer: ids and decoded text equal the JavaScript reference's on the whole corpus") {
    const json& g = text_test::goldens();
    REQUIRE(g.at("cases").size() >= 40);
    std::size_t compared = 0;
    for (const auto& spec : g.at("tokenizers").items()) {
        const std::string name = spec.key();
        const Tokenizer tokenizer = text_test::golden_tokenizer(name);
        for (const json& c : g.at("cases")) {
            const std::string text = c.at("text");
            const json& expected = c.at("expected").at(name);
            INFO("tokenizer " << name << ", case \"" << c.at("name").get<std::string>() << "\": " << json(text).dump());
            const std::vector<std::int32_t> with_special = tokenizer.encode(text, true);
            CHECK(with_special == golden_ids(expected.at("with_special")));
            CHECK(tokenizer.encode(text, false) == golden_ids(expected.at("without_special")));
            CHECK(tokenizer.decode(with_special) == expected.at("decoded").get<std::string>());
            CHECK(tokenizer.decode(with_special, true) == expected.at("decoded_skip_special").get<std::string>());
            ++compared;
        }
    }
    CHECK(compared >= 3 * 45);
}

TEST_CASE("tokenizer: decode(encode(x)) == x on the corpus") {
    // tiny_llama3's added tokens strip no whitespace, so every text comes back; tiny_gpt2's <mask>
    // and [NOTE] do (lstrip / rstrip), so its texts with them are left out.
    for (const char* name : {"tiny_llama3", "tiny_gpt2"}) {
        const Tokenizer tokenizer = text_test::golden_tokenizer(name);
        const std::string bos = std::string(name) == "tiny_llama3" ? "<|begin_of_text|>" : "";
        for (const json& c : text_test::goldens().at("cases")) {
            const std::string text = c.at("text");
            if (std::string(name) == "tiny_gpt2" &&
                (text.find("<mask>") != std::string::npos || text.find("[NOTE]") != std::string::npos)) {
                continue;
            }
            INFO(name << ": " << json(text).dump());
            CHECK(tokenizer.decode(tokenizer.encode(text, false)) == text);
            // The template's <|begin_of_text|> (tiny_llama3) comes back as its content.
            CHECK(tokenizer.decode(tokenizer.encode(text, true)) == bos + text);
        }
    }
}

TEST_CASE("tokenizer: the real Llama 3 vocabulary (DIFFATTN_LLAMA3_TOKENIZER) gives the reference's ids") {
    const char* path = std::getenv("DIFFATTN_LLAMA3_TOKENIZER");
    if (path == nullptr || *path == '\0') {
        WARN("SKIPPED: set DIFFATTN_LLAMA3_TOKENIZER to Llama 3's tokenizer.json (tools/make_tokenizer_goldens.sh "
             "installs one) to compare against the real vocabulary");
        return;
    }
    const json goldens = text_test::read_json(text_test::data_path("llama3_goldens.json"));
    const Tokenizer tokenizer = Tokenizer::load(path);
    CHECK(tokenizer.vocab_size() == 128256);
    CHECK(tokenizer.token_to_id("<|begin_of_text|>") == 128000);
    CHECK(tokenizer.token_to_id("<|eot_id|>") == 128009);
    CHECK(tokenizer.token_to_id("Hello") == 9906);
    if (std::filesystem::exists(std::filesystem::path(path).parent_path() / "tokenizer_config.json")) {
        CHECK(tokenizer.bos_id() == 128000);  // its bos_token / eos_token
        CHECK(tokenizer.eos_id() == 128001);
    }
    REQUIRE(goldens.at("cases").size() >= 40);
    for (const json& c : goldens.at("cases")) {
        const std::string text = c.at("text");
        INFO("case \"" << c.at("name").get<std::string>() << "\": " << json(text).dump());
        const std::vector<std::int32_t> ids = tokenizer.encode(text, false);
        CHECK(ids == golden_ids(c.at("ids")));
        CHECK(tokenizer.decode(ids) == c.at("decoded").get<std::string>());
        CHECK(tokenizer.decode(ids) == text);
    }
}
