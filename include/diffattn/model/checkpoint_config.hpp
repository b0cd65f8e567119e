// config.json of any supported checkpoint -> ModelConfig: our own format (model/config_json.hpp)
// or a released DiffLlama / Motif checkpoint, read unchanged (docs/checkpoints.md).
//
// The family is decided by the ordered rules of docs/checkpoints.md ("Detecting the family"); a
// released checkpoint becomes the one diff attention module with its conventions as data:
//   DiffLlama: halves pairing, rotate_half rotary, weightless per-pair norm (eps rms_norm_eps),
//              lambda_init(i), head_dim possibly != D/H, SwiGLU;
//   Motif:     stripe pairing, rotate_half rotary, subln weight (eps attn_rms_norm_eps),
//              lambda_init(i - 1), PolyNorm MLP.
// A pair of query heads is one differential head of ours: num_attention_heads and
// num_key_value_heads of the ModelConfig are half the config.json values.
// Everything not implemented (other rope types, biases, activations, odd head counts, grouped
// differential attention) is a ConfigError naming the file, the key and the value.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/config_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace diffattn {

namespace detail {

/// `json[key]` for a message: the JSON text, or "absent".
inline std::string json_value_text(const nlohmann::json& json, const char* key) {
    const auto it = json.find(key);
    return it == json.end() ? std::string("absent") : it->dump();
}

/// A number (not a bool) at `json[key]`.
inline bool is_json_number(const nlohmann::json& json, const char* key) {
    const auto it = json.find(key);
    return it != json.end() && it->is_number();
}

/// Checks of a released checkpoint's config.json: every message starts "<source>: <family> checkpoint: ".
class ReleasedConfigReader {
public:
    ReleasedConfigReader(const nlohmann::json& json, const std::string& source, CheckpointFamily family)
        : json_(json), read_(json, source), prefix_(concat(source, ": ", to_string(family), " checkpoint: ")) {}

    const ConfigReader& read() const { return read_; }
    const nlohmann::json& json() const { return json_; }

    template <typename... Parts>
    void require(bool condition, Parts&&... parts) const {
        if (!condition) throw ConfigError(concat(prefix_, std::forward<Parts>(parts)...));
    }

    /// A finite number > 0 that must be present.
    double required_number(const char* key, const char* why) const {
        require(read_.has(key), "key \"", key, "\" is required (", why, ")");
        return read_.positive_number(key, 0.0);
    }

    /// Refuses `key` when it is true (absent or false is fine).
    void refuse_true(const char* key, const char* why) const {
        require(!read_.boolean(key, false), "key \"", key, "\" is true: ", why);
    }

    /// The resolved rotary settings (docs/checkpoints.md, "Which settings"): theta into
    /// config.rope_theta, llama3 into config.conventions.rope_scaling.
    void rope(ModelConfig& config) const {
        const nlohmann::json* dict = nullptr;
        const char* dict_key = "rope_scaling";
        for (const char* key : {"rope_scaling", "rope_parameters"}) {
            const auto it = json_.find(key);
            if (it == json_.end() || it->is_null() || (it->is_object() && it->empty())) continue;
            require(it->is_object(), "key \"", key, "\" must be an object, got ", it->dump());
            dict = &*it;
            dict_key = key;
            break;
        }
        static const nlohmann::json empty = nlohmann::json::object();
        const nlohmann::json& rope = dict != nullptr ? *dict : empty;
        const auto string_at = [&](const char* key) -> std::string {
            const auto it = rope.find(key);
            require(it->is_string(), "key \"", dict_key, ".", key, "\" must be a string, got ", it->dump());
            return it->get<std::string>();
        };
        const std::string type_key = rope.contains("rope_type") ? "rope_type" : "type";
        const std::string type = rope.contains(type_key) ? string_at(type_key.c_str()) : "default";

        // theta: the dict's, else the top level's, else 10000; both and different: refused.
        const bool inner_theta = is_json_number(rope, "rope_theta"), top_theta = read_.has("rope_theta");
        require(!rope.contains("rope_theta") || inner_theta, "key \"", dict_key, ".rope_theta\" must be a number, got ",
                json_value_text(rope, "rope_theta"));
        const double outer = read_.positive_number("rope_theta", 10000.0);
        if (inner_theta && top_theta) {
            require(rope.at("rope_theta").get<double>() == outer, "key \"rope_theta\" (", json_.at("rope_theta").dump(),
                    ") and \"", dict_key, ".rope_theta\" (", rope.at("rope_theta").dump(),
                    ") disagree (transformers 4 reads the first, 5 the second)");
        }
        config.rope_theta = inner_theta ? rope.at("rope_theta").get<double>() : outer;
        require(config.rope_theta > 0 && std::isfinite(config.rope_theta), "rope_theta must be a finite number > 0, got ",
                config.rope_theta);

        for (const nlohmann::json* where : {&rope, &json_}) {
            const auto it = where->find("partial_rotary_factor");
            if (it == where->end() || it->is_null()) continue;
            require(it->is_number() && it->get<double>() == 1.0, "key \"",
                    where == &rope ? std::string(dict_key) + "." : std::string(),
                    "partial_rotary_factor\" is ", it->dump(), ": only 1 (rotary over the whole head) is supported");
        }
        if (type == "default") return;
        require(type == "llama3", "key \"", dict_key, ".", type_key, "\" is \"", type,
                "\": only rope types \"default\" and \"llama3\" are supported");
        Llama3RopeScaling& llama3 = config.conventions.rope_scaling;
        double* fields[] = {&llama3.factor, &llama3.low_freq_factor, &llama3.high_freq_factor};
        const char* names[] = {"factor", "low_freq_factor", "high_freq_factor"};
        for (int i = 0; i < 3; ++i) {
            require(is_json_number(rope, names[i]) && rope.at(names[i]).get<double>() > 0, "llama3 key \"", dict_key, ".",
                    names[i], "\" must be a number > 0, got ", json_value_text(rope, names[i]));
            *fields[i] = rope.at(names[i]).get<double>();
        }
        require(llama3.high_freq_factor > llama3.low_freq_factor, "llama3 key \"", dict_key,
                ".high_freq_factor\" (", llama3.high_freq_factor, ") must exceed low_freq_factor (",
                llama3.low_freq_factor, ")");
        // original_max_position_embeddings: the top level's, else the dict's, else
        // max_position_embeddings; both and different: refused.
        const char* omax_key = "original_max_position_embeddings";
        const bool top = read_.has(omax_key), inner = rope.contains(omax_key) && !rope.at(omax_key).is_null();
        if (top && inner) {
            require(rope.at(omax_key) == json_.at(omax_key), "llama3 key \"", omax_key, "\" (", json_.at(omax_key).dump(),
                    ") and \"", dict_key, ".", omax_key, "\" (", rope.at(omax_key).dump(),
                    ") disagree (transformers 4 reads the second, 5 the first)");
        }
        const nlohmann::json* omax = top ? &json_.at(omax_key) : inner ? &rope.at(omax_key) : nullptr;
        const char* omax_name = top || inner ? omax_key : "max_position_embeddings";
        if (omax == nullptr && read_.has("max_position_embeddings")) omax = &json_.at("max_position_embeddings");
        require(omax != nullptr && omax->is_number_integer() && omax->get<long long>() > 0,
                "llama3 rope scaling needs a positive integer ", omax_name, ", got ",
                omax != nullptr ? omax->dump() : std::string("none (neither ") + omax_key +
                                                     " nor max_position_embeddings is given)");
        llama3.original_max_position_embeddings = static_cast<double>(omax->get<long long>());
    }

private:
    const nlohmann::json& json_;
    ConfigReader read_;
    std::string prefix_;
};

/// config.json keys a released checkpoint may hold that change nothing here (no warning).
inline bool is_informational_key(const std::string& key, CheckpointFamily family) {
    static const char* const common[] = {
        "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
        "transformers_version", "use_cache", "initializer_range", "attention_dropout", "max_position_embeddings",
        "_name_or_path"};
    static const char* const diffllama[] = {"lambda_std_dev"};
    static const char* const motif[] = {"sliding_window", "use_sliding_window", "max_window_layers", "auto_map"};
    const auto listed = [&](const auto& keys) { return std::find(std::begin(keys), std::end(keys), key) != std::end(keys); };
    return listed(common) || (family == CheckpointFamily::diffllama ? listed(diffllama) : listed(motif));
}

/// DiffLlama or Motif config.json -> ModelConfig (the file comment). Throws ConfigError.
inline ModelConfig released_config_from_json(const nlohmann::json& json, CheckpointFamily family,
                                             std::vector<std::string>* warnings, const std::string& source) {
    const ReleasedConfigReader check(json, source, family);
    const ConfigReader& read = check.read();
    const bool diffllama = family == CheckpointFamily::diffllama;
    const Index D = read.integer("hidden_size", 1, true, 0);
    const Index H = read.integer("num_attention_heads", 1, true, 0);
    const Index Hkv = read.integer("num_key_value_heads", 1, false, H);
    check.require(H % Hkv == 0, "num_key_value_heads (", Hkv, ") must divide num_attention_heads (", H, ")");
    check.require(H % 2 == 0 && Hkv % 2 == 0, "num_attention_heads (", H, ") and num_key_value_heads (", Hkv,
                  ") must both be even: a differential pair takes two query heads and two key/value heads");

    ModelConfig c;
    c.attention = AttentionKind::diff;
    c.hidden_size = D;
    c.num_attention_heads = H / 2;
    c.num_key_value_heads = Hkv / 2;
    c.num_hidden_layers = read.integer("num_hidden_layers", 1, true, 0);
    c.intermediate_size = read.integer("intermediate_size", 1, true, 0);
    c.vocab_size = read.integer("vocab_size", 1, true, 0);
    c.tie_word_embeddings = read.boolean("tie_word_embeddings", false);
    c.diff_gqa_pairing = DiffGqaPairing::per_head;
    AttentionConventions& conventions = c.conventions;
    conventions.family = family;
    conventions.rotary_style = RotaryStyle::rotate_half;
    if (diffllama) {
        c.head_dim = read.integer("head_dim", 1, false, D / H);
        check.require(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim (", c.head_dim,
                      read.has("head_dim") ? "" : " = hidden_size / num_attention_heads",
                      ") must be even and > 0 (rotate_half rotary)");
        const std::string act = read.has("hidden_act") ? json.at("hidden_act").dump() : "\"silu\"";
        check.require(act == "\"silu\"", "key \"hidden_act\" is ", act, ": only \"silu\" is supported");
        check.refuse_true("attention_bias", "q/k/v/o_proj biases are not supported");
        c.rms_norm_eps = read.positive_number("rms_norm_eps", 1e-5);
        conventions.head_pairing = HeadPairing::halves;
        conventions.pair_norm = PairNorm::plain;
        conventions.pair_norm_eps = c.rms_norm_eps;
        conventions.lambda_depth_offset = 0;
        c.mlp_activation = MlpActivation::silu;
    } else {
        check.require(D % H == 0, "hidden_size (", D, ") must be divisible by num_attention_heads (", H, ")");
        c.head_dim = D / H;
        check.require(!read.has("head_dim") || read.integer("head_dim", 1, false, 0) == c.head_dim, "key \"head_dim\" is ",
                      detail::json_value_text(json, "head_dim"), " but hidden_size / num_attention_heads = ", c.head_dim,
                      " (Motif's q_proj maps hidden_size to hidden_size; another head_dim is not supported)");
        check.require(c.head_dim % 2 == 0, "the head width hidden_size / num_attention_heads = ", c.head_dim,
                      " must be even (rotate_half rotary)");
        check.require(read.has("hidden_act") && json.at("hidden_act") == "poly_norm", "key \"hidden_act\" is ",
                      detail::json_value_text(json, "hidden_act"), ": Motif's MLP needs \"poly_norm\"");
        for (const char* key : {"attention_bias", "use_bias", "qkv_bias"}) {
            check.refuse_true(key, "biases are not supported");
        }
        check.require(!read.has("num_noise_heads"), "key \"num_noise_heads\" is ", detail::json_value_text(json, "num_noise_heads"),
                      ": grouped differential attention (Motif-2-12.7B) is another architecture, not supported");
        c.rms_norm_eps = check.required_number("rms_norm_eps", "upstream defaults disagree");
        conventions.head_pairing = HeadPairing::stripe;
        conventions.pair_norm = PairNorm::affine;
        conventions.pair_norm_eps = check.required_number("attn_rms_norm_eps", "upstream defaults disagree");
        conventions.lambda_depth_offset = -1;
        c.mlp_activation = MlpActivation::poly_norm;
    }
    check.rope(c);

    if (warnings != nullptr) {
        static const char* const used[] = {
            "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
            "vocab_size", "tie_word_embeddings", "head_dim", "hidden_act", "rms_norm_eps", "attn_rms_norm_eps",
            "attention_bias", "use_bias", "qkv_bias", "num_noise_heads", "rope_theta", "rope_scaling",
            "rope_parameters", "partial_rotary_factor", "original_max_position_embeddings"};
        for (const auto& item : json.items()) {
            const bool known = std::find(std::begin(used), std::end(used), item.key()) != std::end(used) ||
                               is_informational_key(item.key(), family);
            if (!known) warnings->push_back(concat(source, ": unknown key \"", item.key(), "\" ignored"));
        }
    }
    try {
        c.validate();
    } catch (const ConfigError& e) {
        throw ConfigError(concat(source, ": ", e.what()));
    }
    return c;
}

}  // namespace detail

/// The family of a parsed config.json, by the ordered rules of docs/checkpoints.md: model_type
/// "diffllama" (architectures, if given, exactly ["DiffLlamaForCausalLM"]), architectures
/// ["MotifForCausalLM"], key "attention" (our own format). Otherwise ConfigError naming
/// model_type and architectures and listing what is supported.
inline CheckpointFamily detect_checkpoint_family(const nlohmann::json& json, const std::string& source = "config.json") {
    require<ConfigError>(json.is_object(), source, ": expected a JSON object, got ", json.type_name());
    const std::string model_type = detail::json_value_text(json, "model_type");
    const std::string architectures = detail::json_value_text(json, "architectures");
    const auto arch = json.find("architectures");
    const bool has_arch = arch != json.end() && !arch->is_null();
    if (model_type == "\"diffllama\"") {
        require<ConfigError>(!has_arch || *arch == nlohmann::json::array({"DiffLlamaForCausalLM"}), source,
                             ": model_type \"diffllama\" with architectures ", architectures,
                             ": only [\"DiffLlamaForCausalLM\"] (a causal LM head) is supported");
        return CheckpointFamily::diffllama;
    }
    if (has_arch && *arch == nlohmann::json::array({"MotifForCausalLM"})) return CheckpointFamily::motif;
    if (json.contains("attention")) return CheckpointFamily::diffattn;
    throw ConfigError(detail::concat(
        source, ": unknown checkpoint (model_type ", model_type, ", architectures ", architectures,
        "); supported: diffattn's own format (key \"attention\", docs/math.md §5), DiffLlama (model_type "
        "\"diffllama\", architectures [\"DiffLlamaForCausalLM\"]) and Motif (architectures [\"MotifForCausalLM\"])"));
}

/// A config.json object of any supported family -> a validated ModelConfig. Unknown keys go to
/// `warnings` (may be null). ConfigError naming the key and the value.
inline ModelConfig checkpoint_config_from_json(const nlohmann::json& json, std::vector<std::string>* warnings = nullptr,
                                               const std::string& source = "config.json") {
    const CheckpointFamily family = detect_checkpoint_family(json, source);
    if (family == CheckpointFamily::diffattn) return model_config_from_json(json, warnings, source);
    return detail::released_config_from_json(json, family, warnings, source);
}

/// checkpoint_config_from_json of config.json text (detail::parse_config_json_text's ConfigErrors too).
inline ModelConfig checkpoint_config_from_json_text(const std::string& text,
                                                    std::vector<std::string>* warnings = nullptr,
                                                    const std::string& source = "config.json") {
    return checkpoint_config_from_json(detail::parse_config_json_text(text, source), warnings, source);
}

/// Reads `path` (config.json of any supported family; the limits and FileErrors of
/// read_model_config) into a validated ModelConfig.
inline ModelConfig read_checkpoint_config(const std::filesystem::path& path, std::vector<std::string>* warnings = nullptr) {
    const std::string source = detail::concat("config.json \"", path.string(), "\"");
    return checkpoint_config_from_json_text(
        detail::read_text_file(path, source, max_config_json_bytes, "a config.json"), warnings, source);
}

}  // namespace diffattn
