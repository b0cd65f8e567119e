// config.json parsing (docs/math.md §5): defaults, required keys, bad values naming the key, warnings for
// unknown or unused keys, and the global_mean / causal rule.
#include "model_files.hpp"

#include "diffattn/model/config_json.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace diffattn;
using Catch::Matchers::Contains;
using json = nlohmann::json;

namespace {

json minimal_diff() {
    return json{{"attention", "diff"},      {"hidden_size", 32},      {"num_attention_heads", 2},
                {"num_hidden_layers", 2},   {"intermediate_size", 85}, {"vocab_size", 50}};
}

/// The ConfigError message for `j`, or "no error".
std::string error_of(const json& j) {
    try {
        model_config_from_json(j);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "no error";
}

json with(json j, const std::string& key, json value) {
    j[key] = std::move(value);
    return j;
}

json without(json j, const std::string& key) {
    j.erase(key);
    return j;
}

}  // namespace

TEST_CASE("config.json: missing keys take the docs/math.md §5 defaults", "[model][config]") {
    std::vector<std::string> warnings;
    const ModelConfig c = model_config_from_json(minimal_diff(), &warnings);
    CHECK(warnings.empty());
    CHECK(c.attention == AttentionKind::diff);
    CHECK(c.hidden_size == 32);
    CHECK(c.kv_heads() == 2);  // default: num_attention_heads
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.rope_theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK(c.dint_integral == DintIntegral::causal_softmax);
    CHECK(c.diff_gqa_pairing == DiffGqaPairing::per_head);
    CHECK(c.causal);
    CHECK(c.mask() == MaskKind::causal);
    CHECK(c.attention_config(1).head_dim() == 8);
    CHECK(c.attention_config(1).depth == 1);

    // JSON null is the same as a missing key.
    const ModelConfig nulls = model_config_from_json(with(minimal_diff(), "num_key_value_heads", nullptr));
    CHECK(nulls.kv_heads() == 2);
}

TEST_CASE("config.json: every key is read", "[model][config]") {
    json j = minimal_diff();
    j["attention"] = "dint";
    j["num_attention_heads"] = 4;
    j["num_key_value_heads"] = 2;
    j["rms_norm_eps"] = 1e-6;
    j["rope_theta"] = 500000.0;
    j["tie_word_embeddings"] = true;
    j["dint_integral"] = "causal_mean";
    j["diff_gqa_pairing"] = "per_subhead";
    j["causal"] = false;
    const ModelConfig c = model_config_from_json(j);
    CHECK(c.attention == AttentionKind::dint);
    CHECK(c.kv_heads() == 2);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.rope_theta == 500000.0);
    CHECK(c.tie_word_embeddings);
    CHECK(c.dint_integral == DintIntegral::causal_mean);
    CHECK(c.diff_gqa_pairing == DiffGqaPairing::per_subhead);
    CHECK_FALSE(c.causal);

    const ModelConfig shared =
        model_config_from_json(with(with(minimal_diff(), "attention", "shared_diff"), "shared_diff_rank", 3));
    CHECK(shared.shared_diff_rank == 3);
    const ModelConfig v2 = model_config_from_json(with(with(minimal_diff(), "attention", "diff_v2"), "head_dim", 6));
    CHECK(v2.head_dim == 6);
    CHECK(v2.attention_config().head_dim() == 6);

    // Round trip through model_config_to_json.
    const ModelConfig again = model_config_from_json(json::parse(model_config_to_json(c).dump()));
    CHECK(model_config_to_json(again) == model_config_to_json(c));

    // gda (docs/math.md §9.2): gda_group_ratio required, head_dim optional (default D / H / 2).
    json gda = with(with(minimal_diff(), "attention", "gda"), "gda_group_ratio", 2);
    gda["num_key_value_heads"] = 1;
    const ModelConfig g = model_config_from_json(gda);
    CHECK(g.gda_group_ratio == 2);
    CHECK(g.attention_config().head_dim() == 8);
    CHECK(g.attention_config().n_noise_heads() == 1);
    CHECK(g.attention_config().q_width() == 3 * 8);
    const ModelConfig g6 = model_config_from_json(with(gda, "head_dim", 6));
    CHECK(g6.attention_config().head_dim() == 6);
    for (const ModelConfig& each : {g, g6}) {
        const json written = json::parse(model_config_to_json(each).dump());
        CHECK(written.at("gda_group_ratio") == 2);
        CHECK(model_config_to_json(model_config_from_json(written)) == model_config_to_json(each));
    }
    CHECK_FALSE(json::parse(model_config_to_json(g).dump()).contains("head_dim"));
}

TEST_CASE("config.json: a bad value is a ConfigError naming the key", "[model][config]") {
    const json base = minimal_diff();
    CHECK_THAT(error_of(with(base, "hidden_size", "32")), Contains("\"hidden_size\"") && Contains("integer"));
    CHECK_THAT(error_of(with(base, "hidden_size", 32.5)), Contains("\"hidden_size\""));
    CHECK_THAT(error_of(with(base, "hidden_size", -32)), Contains("\"hidden_size\""));
    CHECK_THAT(error_of(with(base, "hidden_size", 0)), Contains("\"hidden_size\""));
    CHECK_THAT(error_of(with(base, "hidden_size", true)), Contains("\"hidden_size\""));
    CHECK_THAT(error_of(with(base, "hidden_size", 30)), Contains("hidden_size") && Contains("num_attention_heads"));
    CHECK_THAT(error_of(with(base, "num_attention_heads", json::array({2}))), Contains("\"num_attention_heads\""));
    CHECK_THAT(error_of(with(base, "num_key_value_heads", 3)), Contains("num_key_value_heads"));
    CHECK_THAT(error_of(with(base, "num_hidden_layers", -1)), Contains("\"num_hidden_layers\""));
    CHECK_THAT(error_of(with(base, "intermediate_size", 0)), Contains("\"intermediate_size\""));
    CHECK_THAT(error_of(with(base, "vocab_size", "many")), Contains("\"vocab_size\""));
    CHECK_THAT(error_of(with(base, "attention", "linear")), Contains("\"attention\"") && Contains("linear"));
    CHECK_THAT(error_of(with(base, "attention", 3)), Contains("\"attention\""));
    CHECK_THAT(error_of(with(base, "rms_norm_eps", 0)), Contains("\"rms_norm_eps\""));
    CHECK_THAT(error_of(with(base, "rms_norm_eps", "1e-5")), Contains("\"rms_norm_eps\""));
    CHECK_THAT(error_of(with(base, "rope_theta", -1.0)), Contains("\"rope_theta\""));
    // A denormal theta makes the rotary frequencies theta^(-2i/d) overflow once d is large enough
    // (NaN logits; found with fuzz_config_json). At d 64 (hidden 256, 2 DIFF heads) the top one,
    // theta^(-62/64), is Inf; at the base config's d 8 it is theta^(-6/8) ~ 1e242, still finite.
    const json wide = with(base, "hidden_size", 256);
    CHECK_THAT(error_of(with(wide, "rope_theta", 5e-324)), Contains("rope_theta") && Contains("too small"));
    CHECK(error_of(with(base, "rope_theta", 5e-324)) == "no error");
    CHECK(error_of(with(base, "rope_theta", 1e-3)) == "no error");
    CHECK_THAT(error_of(with(base, "tie_word_embeddings", 1)), Contains("\"tie_word_embeddings\""));
    CHECK_THAT(error_of(with(base, "causal", "yes")), Contains("\"causal\""));
    CHECK_THAT(error_of(with(base, "dint_integral", "integral")), Contains("\"dint_integral\""));
    CHECK_THAT(error_of(with(base, "diff_gqa_pairing", "per_group")), Contains("\"diff_gqa_pairing\""));
    CHECK_THAT(error_of(with(base, "head_dim", 0)), Contains("\"head_dim\""));
    CHECK_THAT(error_of(json::array({1, 2})), Contains("JSON object"));
}

TEST_CASE("config.json: required keys", "[model][config]") {
    for (const char* key :
         {"attention", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"}) {
        INFO(key);
        CHECK_THAT(error_of(without(minimal_diff(), key)), Contains("missing required key") && Contains(key));
    }
    CHECK_THAT(error_of(with(minimal_diff(), "attention", "shared_diff")), Contains("\"shared_diff_rank\""));
    CHECK_THAT(error_of(with(minimal_diff(), "attention", "diff_v2")), Contains("\"head_dim\""));
    CHECK_THAT(error_of(with(minimal_diff(), "attention", "gda")), Contains("\"gda_group_ratio\""));
}

TEST_CASE("config.json: global_mean needs \"causal\": false", "[model][config]") {
    const json dint = with(with(minimal_diff(), "attention", "dint"), "dint_integral", "global_mean");
    CHECK_THAT(error_of(dint), Contains("global_mean") && Contains("causal"));
    CHECK(error_of(with(dint, "causal", false)) == "no error");
    // causal_* integrals are fine in both settings.
    CHECK(error_of(with(dint, "dint_integral", "causal_mean")) == "no error");
}

TEST_CASE("config.json: unknown and unused keys are warnings", "[model][config]") {
    json j = minimal_diff();
    j["model_type"] = "llama";
    j["head_dim"] = 8;  // only diff_v2 uses it
    std::vector<std::string> warnings;
    const ModelConfig c = model_config_from_json(j, &warnings);
    CHECK(c.hidden_size == 32);
    REQUIRE(warnings.size() == 2);
    CHECK_THAT(warnings[0] + warnings[1], Contains("\"model_type\"") && Contains("\"head_dim\""));
    // No warnings vector: the keys are ignored silently.
    CHECK_NOTHROW(model_config_from_json(j));

    // From a file, to a stream.
    model_test::TempDir dir;
    std::ofstream(dir.path() / "config.json") << j.dump();
    std::ostringstream stream;
    read_model_config(dir.path() / "config.json", stream);
    CHECK_THAT(stream.str(), Contains("warning") && Contains("model_type") && Contains("config.json"));
}

TEST_CASE("config.json files: unreadable, invalid JSON", "[model][config]") {
    model_test::TempDir dir;
    CHECK_THROWS_AS(read_model_config(dir.path() / "config.json"), FileError);
    std::ofstream(dir.path() / "config.json") << "{\"attention\": \"diff\",";
    try {
        read_model_config(dir.path() / "config.json");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK_THAT(std::string(e.what()), Contains("not valid JSON") && Contains("config.json"));
    }
    std::ofstream(dir.path() / "config.json") << with(minimal_diff(), "vocab_size", -5).dump();
    try {
        read_model_config(dir.path() / "config.json");
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK_THAT(std::string(e.what()), Contains((dir.path() / "config.json").string()) && Contains("vocab_size"));
    }
}

TEST_CASE("parameter counts of the model formula", "[model][config][parameters]") {
    ModelConfig c = model_config_from_json(minimal_diff());
    // V D + L (attention + 2D + 3 D F) + D + V D
    const Index D = 32, F = 85, V = 50, L = 2, d = 8;
    const Index attention = 4 * D * D + 6 * d;
    CHECK(c.parameter_count() == V * D + L * (attention + 2 * D + 3 * D * F) + D + V * D);
    c.tie_word_embeddings = true;
    CHECK(c.parameter_count() == V * D + L * (attention + 2 * D + 3 * D * F) + D);
}

TEST_CASE("config.json: a number too large for a double is a ConfigError", "[model][config]") {
    // nlohmann reports it as out_of_range (406), not parse_error (found by fuzz_config_json).
    const std::string text = minimal_diff().dump().insert(1, "\"rope_theta\": 1e400, ");
    try {
        model_config_from_json_text(text);
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK_THAT(std::string(e.what()), Contains("not valid JSON") && Contains("1e400"));
    }
}

TEST_CASE("config.json: an integer too large to index names the real range", "[model][config]") {
    // 2^40 is >= 1: the message must say why it is refused.
    const std::string message = error_of(with(minimal_diff(), "hidden_size", std::int64_t{1} << 40));
    CHECK_THAT(message, Contains("\"hidden_size\"") && Contains("[1, 2147483647]") &&
                            Contains("1099511627776") && Contains("too large to index"));
    CHECK_THAT(error_of(with(minimal_diff(), "vocab_size", 2147483648.0)), Contains("too large to index"));
    CHECK_THAT(error_of(with(minimal_diff(), "num_hidden_layers", std::uint64_t{1} << 63)),
               Contains("[0, 2147483647]") && Contains("too large to index"));
    CHECK(error_of(with(with(minimal_diff(), "vocab_size", 2147483647), "num_hidden_layers", 0)) == "no error");
}

TEST_CASE("config.json: a NUL byte is a ConfigError naming its offset", "[model][config]") {
    // nlohmann's lexer stops at a NUL byte: the garbage after it would be ignored.
    const std::string text = minimal_diff().dump() + std::string(1, '\0') + "{\"vocab_size\": -1} garbage";
    try {
        model_config_from_json_text(text);
        FAIL("no error");
    } catch (const ConfigError& e) {
        CHECK_THAT(std::string(e.what()), Contains("NUL byte") && Contains(std::to_string(minimal_diff().dump().size())));
    }
    std::string inside = minimal_diff().dump();
    inside.insert(inside.find("diff") + 2, 1, '\0');  // inside a string value
    CHECK_THROWS_AS(model_config_from_json_text(inside), ConfigError);

    // The same from a file.
    model_test::TempDir dir;
    std::ofstream(dir.path() / "config.json", std::ios::binary) << text;
    CHECK_THROWS_WITH(read_model_config(dir.path() / "config.json"), Contains("NUL byte") && Contains("config.json"));
}

TEST_CASE("config.json: a duplicate key is a ConfigError naming it", "[model][config]") {
    // nlohmann keeps the last value silently; which one a reader takes is not agreed on.
    const std::string text = "{\"vocab_size\": 50, " + minimal_diff().dump().substr(1);
    CHECK_THROWS_WITH(model_config_from_json_text(text), Contains("duplicate key \"vocab_size\""));
    const std::string nested = minimal_diff().dump().insert(1, "\"extra\": {\"a\": 1, \"a\": 2}, ");
    CHECK_THROWS_WITH(model_config_from_json_text(nested), Contains("duplicate key \"a\""));
    // The same key in two different objects is fine.
    const std::string separate = minimal_diff().dump().insert(1, "\"x\": {\"a\": 1}, \"y\": {\"a\": 2}, ");
    CHECK_NOTHROW(model_config_from_json_text(separate));
}

TEST_CASE("config.json: parsing takes time linear in the size", "[model][config]") {
    // A 1 MiB config.json of 88,000 empty objects (under the file-size limit). nlohmann's callback
    // parser, used to limit the depth, rescanned the parent object after each one: 75 s.
    std::string text = "{";
    for (int i = 0; text.size() < (1u << 20) - 64; ++i) text += "\"k" + std::to_string(i) + "\":{},";
    text += "\"attention\":\"diff\"}";
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(model_config_from_json_text(text), Contains("missing required key"));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("parsed in " << seconds << " s");
    CHECK(seconds < 20.0);  // linear: well under a second in a release build
}
