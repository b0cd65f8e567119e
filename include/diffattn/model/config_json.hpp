// config.json <-> ModelConfig (docs/math.md §5), with nlohmann-json.
//
//  - a missing key (or a JSON null) takes its docs/math.md §5 default; keys without one (attention,
//    hidden_size, num_attention_heads, num_hidden_layers, intermediate_size, vocab_size, and
//    shared_diff_rank / head_dim / gda_group_ratio for the kinds that need them) are required;
//  - a value of the wrong type or out of range is a ConfigError naming the key and the value;
//  - an unknown key, or a key the chosen attention kind does not use, is a warning (the model
//    still loads), reported to a caller-supplied vector or stream;
//  - the text must be strict JSON: a NUL byte, a key twice in one object or nesting deeper than
//    32 levels is a ConfigError (io/detail/strict_json.hpp), where nlohmann alone would stop at
//    the NUL, keep the last value or recurse.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/json_reader.hpp"
#include "diffattn/io/replace_file.hpp"
#include "diffattn/model/config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace diffattn {

namespace detail {

inline const std::vector<const char*>& known_config_keys() {
    static const std::vector<const char*> keys = {
        "attention",         "hidden_size",   "num_attention_heads", "num_key_value_heads",
        "num_hidden_layers", "intermediate_size", "vocab_size",      "rms_norm_eps",
        "rope_theta",        "tie_word_embeddings", "dint_integral", "shared_diff_rank",
        "diff_gqa_pairing",  "head_dim",      "causal",        "gda_group_ratio"};
    return keys;
}

}  // namespace detail

/// Parses a config.json object (docs/math.md §5) and validates it (ModelConfig::validate).
///   source:   how messages name the file, e.g. "config.json \"models/x/config.json\"".
///   warnings: unknown or unused keys, one message each (may be null: then they are dropped).
/// Throws ConfigError naming the key for a bad or missing value.
inline ModelConfig model_config_from_json(const nlohmann::json& json, std::vector<std::string>* warnings = nullptr,
                                          const std::string& source = "config.json") {
    const detail::ConfigReader read(json, source);
    ModelConfig c;
    c.attention = read.choice<AttentionKind>("attention", parse_attention_kind,
                                             "softmax, diff, dint, shared_diff, diff_v2, gda", true, c.attention);
    c.hidden_size = read.integer("hidden_size", 1, true, 0);
    c.num_attention_heads = read.integer("num_attention_heads", 1, true, 0);
    c.num_key_value_heads = read.integer("num_key_value_heads", 1, false, c.num_attention_heads);
    c.num_hidden_layers = read.integer("num_hidden_layers", 0, true, 0);
    c.intermediate_size = read.integer("intermediate_size", 1, true, 0);
    c.vocab_size = read.integer("vocab_size", 1, true, 0);
    c.rms_norm_eps = read.positive_number("rms_norm_eps", c.rms_norm_eps);
    c.rope_theta = read.positive_number("rope_theta", c.rope_theta);
    c.tie_word_embeddings = read.boolean("tie_word_embeddings", c.tie_word_embeddings);
    c.causal = read.boolean("causal", c.causal);
    c.dint_integral = read.choice<DintIntegral>("dint_integral", parse_dint_integral,
                                                "causal_softmax, causal_mean, global_mean", false, c.dint_integral);
    c.diff_gqa_pairing = read.choice<DiffGqaPairing>("diff_gqa_pairing", parse_gqa_pairing,
                                                     "per_head, per_subhead", false, c.diff_gqa_pairing);
    const bool shared = c.attention == AttentionKind::shared_diff;
    const bool v2 = c.attention == AttentionKind::diff_v2;
    const bool gda = c.attention == AttentionKind::gda;
    c.shared_diff_rank = read.integer("shared_diff_rank", 1, shared, 0);
    c.head_dim = read.integer("head_dim", 1, v2, 0);  // gda: optional, 0 takes D / H / 2
    c.gda_group_ratio = read.integer("gda_group_ratio", 1, gda, 0);

    if (warnings != nullptr) {
        for (const auto& item : json.items()) {
            bool known = false;
            for (const char* key : detail::known_config_keys()) known = known || item.key() == key;
            if (!known) warnings->push_back(detail::concat(source, ": unknown key \"", item.key(), "\" ignored"));
        }
        const auto unused = [&](const char* key, bool used, const char* users) {
            if (!used && read.has(key)) {
                warnings->push_back(detail::concat(source, ": key \"", key, "\" is only used by attention ", users,
                                                   ", not ", to_string(c.attention), "; ignored"));
            }
        };
        unused("dint_integral", c.attention == AttentionKind::dint, "dint");
        unused("shared_diff_rank", shared, "shared_diff");
        unused("head_dim", v2 || gda, "diff_v2 and gda");
        unused("gda_group_ratio", gda, "gda");
        unused("diff_gqa_pairing", c.attention == AttentionKind::diff || c.attention == AttentionKind::dint,
               "diff and dint");
    }
    try {
        c.validate();
    } catch (const ConfigError& e) {
        throw ConfigError(detail::concat(source, ": ", e.what()));
    }
    return c;
}

/// Deepest JSON nesting accepted in config.json (the format is one flat object: depth 1). Deeper
/// input is rejected while parsing, so that no recursive walk (dump() in a message, destruction)
/// ever meets a pathological depth.
inline constexpr int max_config_json_depth = 32;

/// Largest config.json file read_model_config reads, in bytes (real ones are well under 4 KiB).
inline constexpr std::uintmax_t max_config_json_bytes = 1 << 20;

namespace detail {
/// config.json text as one JSON value, of any family: ConfigError for text that is not strictly
/// one JSON value or nests past max_config_json_depth (parse_json_text).
inline nlohmann::json parse_config_json_text(const std::string& text, const std::string& source) {
    return parse_json_text(text, source, max_config_json_depth, "a config");
}
}  // namespace detail

/// Parses config.json text (see model_config_from_json). ConfigError for text that is not strictly
/// one JSON value (detail::parse_config_json_text).
inline ModelConfig model_config_from_json_text(const std::string& text, std::vector<std::string>* warnings = nullptr,
                                               const std::string& source = "config.json") {
    return model_config_from_json(detail::parse_config_json_text(text, source), warnings, source);
}

/// Reads and parses a config.json file. FileError naming the file and the reason if it is missing,
/// not a regular file (a directory, a FIFO, a device), larger than max_config_json_bytes, or
/// cannot be read; ConfigError for bad content.
inline ModelConfig read_model_config(const std::filesystem::path& path, std::vector<std::string>* warnings = nullptr) {
    const std::string source = detail::concat("config.json \"", path.string(), "\"");
    return model_config_from_json_text(detail::read_text_file(path, source, max_config_json_bytes, "a config.json"),
                                       warnings, source);
}

/// read_model_config that writes each warning as one line to `warnings`.
inline ModelConfig read_model_config(const std::filesystem::path& path, std::ostream& warnings) {
    std::vector<std::string> messages;
    ModelConfig config = read_model_config(path, &messages);
    for (const std::string& message : messages) warnings << "warning: " << message << "\n";
    return config;
}

/// The config.json object of a configuration (every docs/math.md §5 key that applies to its kind).
/// ConfigError for a configuration with another family's conventions (a released checkpoint's):
/// our format cannot express them, so the file would describe another model.
inline nlohmann::ordered_json model_config_to_json(const ModelConfig& c) {
    require<ConfigError>(c.conventions.ours() && c.mlp_activation == MlpActivation::silu,
                         "model_config_to_json: a configuration with the conventions of family ",
                         to_string(c.conventions.family), " (rotary ", to_string(c.conventions.rotary_style),
                         ", head pairing ", to_string(c.conventions.head_pairing), ", mlp ",
                         to_string(c.mlp_activation), "): our config.json format cannot express them "
                         "(docs/checkpoints.md); keep the checkpoint's own config.json");
    nlohmann::ordered_json j;
    j["attention"] = to_string(c.attention);
    j["hidden_size"] = c.hidden_size;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.kv_heads();
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["intermediate_size"] = c.intermediate_size;
    j["vocab_size"] = c.vocab_size;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["causal"] = c.causal;
    if (c.attention == AttentionKind::dint) j["dint_integral"] = to_string(c.dint_integral);
    if (c.attention == AttentionKind::diff || c.attention == AttentionKind::dint)
        j["diff_gqa_pairing"] = to_string(c.diff_gqa_pairing);
    if (c.attention == AttentionKind::shared_diff) j["shared_diff_rank"] = c.shared_diff_rank;
    if (c.attention == AttentionKind::diff_v2 || (c.attention == AttentionKind::gda && c.head_dim > 0))
        j["head_dim"] = c.head_dim;
    if (c.attention == AttentionKind::gda) j["gda_group_ratio"] = c.gda_group_ratio;
    return j;
}

/// Writes model_config_to_json(config) to `path` (pretty-printed). FileError on failure.
/// The file is replaced only once complete, as write_safetensors replaces its target
/// (io/replace_file.hpp): a target that is not a regular file is refused, a failed write leaves it
/// as it was.
inline void write_model_config(const std::filesystem::path& path, const ModelConfig& config) {
    const std::string text = model_config_to_json(config).dump(2) + "\n";
    detail::ReplacingFile out(path, "write_model_config");
    out.write(text.data(), text.size());
    out.commit();
}

}  // namespace diffattn
