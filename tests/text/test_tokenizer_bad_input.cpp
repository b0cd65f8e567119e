// Bad input to the tokenizer: files that are missing or not JSON (FileError / ConfigError naming
// the file), tokenizer.json content outside the supported subset or malformed (ConfigError naming
// the key), text that is not UTF-8 and ids that name no token (Error). Also what load() reads
// beside tokenizer.json (tokenizer_config.json's bos / eos).
#include "../error_messages.hpp"
#include "../temp_dir.hpp"
#include "text_test_support.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using diffattn::ConfigError;
using diffattn::FileError;
using diffattn::text::Tokenizer;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// The ConfigError of from_json(j) (source "bad.json").
std::string config_error_of(const json& j) {
    return message_of<ConfigError>([&] { (void)Tokenizer::from_json(j, "tokenizer.json \"bad.json\""); });
}

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

json base() { return text_test::byte_tokenizer_json(); }

json with_pre(const json& pre) {
    json j = base();
    j["pre_tokenizer"] = pre;
    return j;
}

const json kByteLevelStep = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};

json split_step(const std::string& regex) {
    return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

json sequence(std::initializer_list<json> steps) { return {{"type", "Sequence"}, {"pretokenizers", steps}}; }

json with_template(const json& single, const json& special_tokens) {
    json j = base();
    j["added_tokens"] = json::array({{{"id", 256}, {"content", "<s>"}, {"special", true}}});
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special_tokens}};
    return j;
}

}  // namespace

TEST_CASE("tokenizer bad input: files") {
    const test_files::TempDir temp;
    const fs::path dir = temp.path();
    CHECK_ERROR(FileError, Tokenizer::load(dir / "missing.json"), "tokenizer.json \"", "missing.json",
                          "no such file");
    // A directory without tokenizer.json: the file looked for is named.
    CHECK_ERROR(FileError, Tokenizer::load(dir), "tokenizer.json", "no such file");
    write_file(dir / "tokenizer.json", "{\"model\": ");
    CHECK_ERROR(ConfigError, Tokenizer::load(dir), "tokenizer.json \"", "not valid JSON");
    write_file(dir / "tokenizer.json", "[1, 2]");
    CHECK_ERROR(ConfigError, Tokenizer::load(dir / "tokenizer.json"), "expected a JSON object");
    std::string deep(40, '[');
    deep += std::string(40, ']');
    write_file(dir / "tokenizer.json", deep);
    CHECK_ERROR(ConfigError, Tokenizer::load(dir), "nests deeper than 32 levels");

    // tokenizer_config.json beside it: bos_token / eos_token must be tokens.
    write_file(dir / "tokenizer.json", base().dump());
    write_file(dir / "tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "!"})");
    CHECK_ERROR(ConfigError, Tokenizer::load(dir), "tokenizer_config.json \"", "bos_token", "\"<s>\"",
                          "is not a token");
    write_file(dir / "tokenizer_config.json", R"({"bos_token": 7})");
    CHECK_ERROR(ConfigError, Tokenizer::load(dir), "tokenizer_config.json", "bos_token",
                          "must be a token string");
    write_file(dir / "tokenizer_config.json", R"({"bos_token": {"content": "!"}, "eos_token": "\"", "extra": 1})");
    const Tokenizer t = Tokenizer::load(dir);
    CHECK(t.bos_id() == 33);  // byte_tokenizer_json gives byte b id b: "!" is 33, "\"" 34
    CHECK(t.eos_id() == 34);
}

TEST_CASE("tokenizer: load() reads a directory and its tokenizer_config.json") {
    const Tokenizer llama = Tokenizer::load(text_test::data_path("tiny_llama3"));
    CHECK(llama.bos_id() == llama.token_to_id("<|begin_of_text|>"));
    CHECK(llama.eos_id() == llama.token_to_id("<|end_of_text|>"));
    CHECK(llama.encode("").front() == *llama.bos_id());
    // No tokenizer_config.json: bos from the template (none for GPT-2's form), no eos.
    const Tokenizer gpt2 = Tokenizer::load(text_test::data_path("tiny_gpt2/tokenizer.json"));
    CHECK_FALSE(gpt2.bos_id().has_value());
    CHECK_FALSE(gpt2.eos_id().has_value());
    const Tokenizer from_template = Tokenizer::from_json(text_test::golden_tokenizer_json("tiny_llama3"));
    CHECK(from_template.bos_id() == llama.bos_id());
    CHECK_FALSE(from_template.eos_id().has_value());
}

TEST_CASE("tokenizer bad input: unsupported components name the key") {
    json j = base();
    j["model"]["type"] = "WordPiece";
    check_words(config_error_of(j), {"bad.json", "model", "\"type\"", "BPE", "WordPiece"});
    j = base();
    j.erase("model");
    check_words(config_error_of(j), {"missing required key \"model\""});
    j = base();
    j["normalizer"] = {{"type", "NFC"}};
    check_words(config_error_of(j), {"\"normalizer\" must be null", "NFC"});
    j = base();
    j["truncation"] = {{"max_length", 512}};
    check_words(config_error_of(j), {"\"truncation\" must be null"});
    j = base();
    j["model"]["byte_fallback"] = true;
    check_words(config_error_of(j), {"model", "byte_fallback"});
    j = base();
    j["model"]["dropout"] = 0.1;
    check_words(config_error_of(j), {"model", "dropout", "0.1"});
    j = base();
    j["model"]["continuing_subword_prefix"] = "##";
    check_words(config_error_of(j), {"continuing_subword_prefix", "##"});
    j = base();
    j["decoder"] = nullptr;
    check_words(config_error_of(j), {"\"decoder\" is missing or null"});
    j = base();
    j["decoder"] = {{"type", "WordPiece"}};
    check_words(config_error_of(j), {"decoder", "ByteLevel", "WordPiece"});
    j = base();
    j["post_processor"] = {{"type", "RobertaProcessing"}};
    check_words(config_error_of(j), {"post_processor", "TemplateProcessing", "RobertaProcessing"});
}

TEST_CASE("tokenizer bad input: pre_tokenizer") {
    json j = base();
    j["pre_tokenizer"] = nullptr;
    check_words(config_error_of(j), {"\"pre_tokenizer\" is missing or null"});
    check_words(config_error_of(with_pre({{"type", "Whitespace"}})),
                    {"pre_tokenizer", "Sequence, Split, ByteLevel", "Whitespace"});
    check_words(config_error_of(with_pre(split_step("\\p{L}+"))), {"exactly one ByteLevel step", "it has 0"});
    check_words(config_error_of(with_pre(sequence({kByteLevelStep, split_step("\\p{L}+")}))),
                    {"exactly one ByteLevel step", "not last"});
    check_words(config_error_of(with_pre(sequence({kByteLevelStep, kByteLevelStep}))),
                    {"exactly one ByteLevel step", "it has 2"});
    json removed = split_step("a");
    removed["behavior"] = "Removed";
    check_words(config_error_of(with_pre(sequence({removed, kByteLevelStep}))),
                    {"pre_tokenizer.pretokenizers[0]", "behavior", "Isolated", "Removed"});
    json inverted = split_step("a");
    inverted["invert"] = true;
    check_words(config_error_of(with_pre(sequence({inverted, kByteLevelStep}))), {"invert"});
    json no_pattern = split_step("a");
    no_pattern["pattern"] = {{"Glob", "*"}};
    check_words(config_error_of(with_pre(sequence({no_pattern, kByteLevelStep}))), {"pattern", "Regex"});
    check_words(config_error_of(with_pre(sequence({split_step("(a"), kByteLevelStep}))),
                    {"pre_tokenizer.pretokenizers[0].pattern", "does not compile", "offset"});
    check_words(config_error_of(with_pre(sequence({split_step("a*"), kByteLevelStep}))),
                    {"pattern", "empty string"});
    check_words(config_error_of(with_pre(sequence({split_step("^a"), kByteLevelStep}))), {"anchor"});
    check_words(config_error_of(with_pre(sequence({split_step("\\bword"), kByteLevelStep}))), {"\\b"});
}

TEST_CASE("tokenizer bad input: vocab and merges") {
    json j = base();
    j["model"]["vocab"]["Ġ"] = -1;
    check_words(config_error_of(j), {"model.vocab", "\"Ġ\"", "[0, 2147483647]", "-1"});
    j = base();
    j["model"]["vocab"]["Ġ"] = "32";
    check_words(config_error_of(j), {"model.vocab", "\"Ġ\"", "\"32\""});
    j = base();
    j["model"]["vocab"] = json::array();
    check_words(config_error_of(j), {"\"vocab\" must be an object"});
    j = base();
    j["model"]["vocab"].erase("Ġ");
    check_words(config_error_of(j), {"no token for byte 32", "Ġ"});
    j = base();
    j["model"]["vocab"]["ab"] = 97;  // the id of "a"
    check_words(config_error_of(j), {"model.vocab gives id 97 to both"});
    j = base();
    j["model"]["merges"] = {"a b", "a zz"};
    check_words(config_error_of(j), {"model.merges[0]", "merged token \"ab\" is not in model.vocab"});
    j = text_test::with_merges(base(), {"a b"});
    j["model"]["merges"].push_back("a zz");
    check_words(config_error_of(j), {"model.merges[1]", "\"zz\" is not in model.vocab"});
    j = base();
    j["model"]["merges"] = {"abc"};
    check_words(config_error_of(j), {"model.merges[0]", "two tokens separated by one space"});
    j = base();
    j["model"]["merges"] = json::array({json::array({"a"})});
    check_words(config_error_of(j), {"model.merges[0]", "[\"left\", \"right\"]"});
    j = base();
    j["model"].erase("merges");
    check_words(config_error_of(j), {"model", "missing required key \"merges\""});
}

TEST_CASE("tokenizer bad input: added tokens and the template") {
    json j = base();
    j["added_tokens"] = json::array({{{"id", 256}, {"content", ""}}});
    check_words(config_error_of(j), {"added_tokens[0]", "empty content"});
    j["added_tokens"] = json::array({{{"id", 256}, {"content", "<a>"}}, {{"id", 257}, {"content", "<a>"}}});
    check_words(config_error_of(j), {"added_tokens[1]", "\"<a>\" is listed twice"});
    j["added_tokens"] = json::array({{{"id", 256}, {"content", "<a>"}}, {{"id", 256}, {"content", "<b>"}}});
    check_words(config_error_of(j), {"added_tokens give id 256 to both \"<a>\" and \"<b>\""});
    j["added_tokens"] = json::array({{{"id", 97}, {"content", "<a>"}}});
    check_words(config_error_of(j), {"\"<a>\" has id 97, which model.vocab gives to \"a\""});
    j["added_tokens"] = json::array({{{"id", 300}, {"content", "a"}}});
    check_words(config_error_of(j), {"\"a\" has id 300 but model.vocab gives it id 97"});
    j["added_tokens"] = json::array({{{"id", 1000000000}, {"content", "<far>"}}});
    check_words(config_error_of(j), {"ids go up to 1000000000"});
    j["added_tokens"] = json::array({{{"id", -3}, {"content", "<a>"}}});
    check_words(config_error_of(j), {"added_tokens[0]", "\"id\"", ">= 0"});
    j["added_tokens"] = json::array({{{"id", 256}, {"content", "<a>"}, {"lstrip", "yes"}}});
    check_words(config_error_of(j), {"added_tokens[0]", "\"lstrip\" must be true or false"});

    const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    const json s = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
    const json specials = {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}};
    CHECK(Tokenizer::from_json(with_template({s, a, s}, specials)).encode("x") == std::vector<std::int32_t>{256, 120, 256});
    check_words(config_error_of(with_template(json::array({s}), specials)), {"single has no", "\"A\""});
    check_words(config_error_of(with_template({s, {{"Sequence", {{"id", "B"}}}}}, specials)),
                    {"post_processor.single[1]", "$A"});
    check_words(config_error_of(with_template({s, a}, json::object())),
                    {"post_processor.single[0]", "\"<s>\" has no \"ids\""});
    check_words(config_error_of(with_template({s, a}, {{"<s>", {{"ids", {5000}}}}})),
                    {"post_processor", "id 5000 names no token"});
    check_words(config_error_of(with_template(json::array({json::array({1})}), specials)), {"post_processor.single[0]"});
}

TEST_CASE("tokenizer bad input: text that is not UTF-8, ids that name no token") {
    const Tokenizer tokenizer = text_test::golden_tokenizer("tiny_llama3");
    CHECK_ERROR(diffattn::Error, tokenizer.encode("abc\xFF" "def"), "Tokenizer::encode",
                          "not valid UTF-8", "0xff", "offset 3");
    CHECK_ERROR(diffattn::Error, tokenizer.encode("ab\xE2\x82"), "offset 2");   // truncated
    CHECK_ERROR(diffattn::Error, tokenizer.encode("\xED\xA0\x80"), "offset 0");  // a surrogate
    const std::int32_t past = tokenizer.vocab_size();
    CHECK_ERROR(diffattn::Error, tokenizer.decode({1, past}), "id ", "names no token");
    CHECK_ERROR(diffattn::Error, tokenizer.decode({-1}), "id -1 names no token");
    CHECK_FALSE(tokenizer.id_to_token(past).has_value());
    CHECK_FALSE(tokenizer.id_to_token(-1).has_value());
    CHECK_FALSE(tokenizer.token_to_id("no such token").has_value());
}

namespace {

/// tokenizer.json text of base() with `replacement` in place of `what` (which it holds once).
std::string base_text_with(const std::string& what, const std::string& replacement) {
    std::string text = base().dump();
    const std::size_t at = text.find(what);
    REQUIRE(at != std::string::npos);
    return text.replace(at, what.size(), replacement);
}

/// `count` copies of `item`, comma-separated.
std::string repeated(const std::string& item, std::size_t count) {
    std::string out;
    out.reserve(count * (item.size() + 1));
    for (std::size_t i = 0; i < count; ++i) out.append(i == 0 ? "" : ",").append(item);
    return out;
}

/// `count` object members "k0":0, "k1":0, ..., comma-separated.
std::string members(std::size_t count) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) out += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":0";
    return out;
}

std::string text_error_of(const std::string& text) {
    return message_of<ConfigError>([&] { (void)Tokenizer::from_json_text(text, "tokenizer.json \"big.json\""); });
}

}  // namespace

// Refused in the linear pass before the DOM is built (its nodes would cost tens of bytes each),
// or, for steps and template ids, before any regex is compiled or id copied.
TEST_CASE("tokenizer bad input: counts over the limits") {
    using namespace diffattn::text;
    // The limits, as docs/tokenizer.md states them ...
    const diffattn::detail::JsonLimits limits = tokenizer_json_limits();
    CHECK(limits.max_members("model.vocab", false) == 2097152);
    CHECK(limits.max_members("model.merges", true) == 4194304);
    CHECK(limits.max_members("added_tokens", true) == 65536);
    CHECK(limits.max_values == 16777216);
    CHECK(limits.max_array_size == 4096);
    CHECK(limits.max_object_members == 4096);
    CHECK(limits.max_members("model.added_tokens", true) == 4096);  // the path, not the last name
    // ... and their checks, each one tried with the same limits scaled down (a pass over tens of MB
    // takes half a minute under the sanitizers).
    diffattn::detail::JsonLimits scaled = limits;
    scaled.large_containers = {{"model.vocab", 100}, {"model.merges", 200}, {"added_tokens", 65536}};
    scaled.max_values = 5000;
    const auto scaled_error_of = [&](const std::string& text) {
        return message_of<ConfigError>([&] {
            (void)diffattn::detail::parse_json_text(text, "tokenizer.json \"big.json\"", scaled, "a tokenizer");
        });
    };
    check_words(scaled_error_of(base_text_with("\"merges\":[]", "\"merges\":[" + repeated("\"a b\"", 201) + "]")),
                {"tokenizer.json \"big.json\"", "array model.merges holds more than 200 elements"});
    std::string vocab = "\"vocab\":{";
    for (std::size_t i = 0; i <= 100; ++i) vocab += "\"x" + std::to_string(i) + "\":1,";
    check_words(scaled_error_of(base_text_with("\"vocab\":{", vocab)),
                {"tokenizer.json \"big.json\"", "object model.vocab holds more than 100 members"});
    check_words(scaled_error_of("{\"junk\":[" + repeated("[" + repeated("0", 100) + "]", 50) + "]}"),
                {"the file holds 5052 JSON values, over the limit of 5000 for a tokenizer"});
    const std::string added = repeated("{}", max_tokenizer_added_tokens + 1);
    check_words(text_error_of(base_text_with("\"added_tokens\":[]", "\"added_tokens\":[" + added + "]")),
                {"array added_tokens holds more than 65536 elements"});
    // Any other container: 4096 members, however they nest.
    check_words(text_error_of("{\"junk\":[" + repeated("0", 4097) + "]}"),
                {"tokenizer.json \"big.json\"", "array junk holds more than 4096 elements"});
    check_words(text_error_of("{\"a\":{\"b\":[" + repeated("{}", 5000) + "]}}"), {"array a.b holds more than 4096"});
    check_words(text_error_of("{\"a\":[1,{\"b\":{" + members(4097) + "}}]}"),
                {"object a[1].b holds more than 4096 members"});
    check_words(text_error_of("{" + members(4097) + "}"),
                {"the top-level object holds 4097 keys, over the limit of 4096"});
    // The real tokenizers stay within them.
    CHECK_NOTHROW(Tokenizer::from_json_text(base().dump()));
    CHECK_NOTHROW(Tokenizer::load(text_test::data_path("tiny_llama3")));

    // 65 pre-tokenizer steps, in nested Sequences: refused before the 65th regex is compiled.
    json steps = json::array();
    for (int i = 0; i < 40; ++i) steps.push_back(split_step("\\p{L}+"));
    json inner = {{"type", "Sequence"}, {"pretokenizers", steps}};
    json outer_steps = steps;
    outer_steps.push_back(inner);
    outer_steps.push_back(kByteLevelStep);
    check_words(config_error_of(with_pre({{"type", "Sequence"}, {"pretokenizers", outer_steps}})),
                {"pre_tokenizer.pretokenizers[40].pretokenizers[24]", "more than 64 steps"});
    steps.push_back(kByteLevelStep);
    CHECK_NOTHROW(Tokenizer::from_json(with_pre({{"type", "Sequence"}, {"pretokenizers", steps}})));

    // The template's ids: a piece naming a token of 40 ids twice is 80.
    const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    const json s = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
    const json specials = {{"<s>", {{"id", "<s>"}, {"ids", std::vector<int>(40, 256)}}}};
    check_words(config_error_of(with_template({s, a, s}, specials)),
                {"post_processor.single[2]", "more than 64 special-token ids around the text"});
    CHECK(Tokenizer::from_json(with_template({s, a}, specials)).encode("").size() == 40);
}

TEST_CASE("tokenizer bad input: tokenizer.json over the size limit, tokenizer_config.json a dangling link") {
    const test_files::TempDir temp;
    const fs::path dir = temp.path();
    // A sparse file: refused by its size before anything is read.
    write_file(dir / "tokenizer.json", "{}");
    fs::resize_file(dir / "tokenizer.json", diffattn::text::max_tokenizer_json_bytes + 1);
    CHECK_ERROR(FileError, Tokenizer::load(dir), "tokenizer.json \"", "over the 134217728-byte limit");

    // tokenizer_config.json that exists as a link but cannot be read: an error, not bos / eos dropped.
    write_file(dir / "tokenizer.json", base().dump());
    fs::create_symlink("no-such-config.json", dir / "tokenizer_config.json");
    CHECK_ERROR(FileError, Tokenizer::load(dir), "tokenizer_config.json \"", "tokenizer_config.json\"",
                "symbolic link to \"no-such-config.json\", which does not exist");
    fs::remove(dir / "tokenizer_config.json");
    CHECK_FALSE(Tokenizer::load(dir).eos_id().has_value());  // missing: optional
}
