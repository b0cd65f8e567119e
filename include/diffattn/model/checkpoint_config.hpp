// config.json of any supported checkpoint -> ModelConfig: our own format (model/config_json.hpp)
// or a released DiffLlama / Motif checkpoint, read unchanged (docs/checkpoints.md).
//
// The family is decided by the ordered rules of docs/checkpoints.md ("Detecting the family"); a
// released checkpoint becomes the one diff attention module with its conventions as data:
//   DiffLlama: halves pairing, rotate_half rotary, weightless per-pair norm (eps rms_norm_eps),
//              lambda_init(i), head_dim possibly != D/H, SwiGLU;
//   Motif:     stripe pairing, rotate_half rotary, subln weight (eps attn_rms_norm_eps),
//              lambda_init(i - 1), PolyNorm MLP;
//   Motif-2 (num_noise_heads): Motif's conventions on the gda module (docs/math.md §9), its
//              query heads in groups of gr signal heads and one noise head.
// A pair of query heads is one differential head of ours: num_attention_heads and
// num_key_value_heads of the ModelConfig are half the config.json values; for Motif-2 they are
// the signal heads and the kv pairs, and gda_group_ratio is gr.
// Everything not implemented (other rope types, biases, activations, odd head counts, head
// topologies that form no groups, k_ratio other than 1) is a ConfigError naming the file, the key
// and the value.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/released_config_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace diffattn {

namespace detail {

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

/// Motif-2's grouped heads (docs/checkpoints.md, "Motif-2"; vLLM MotifAttention.__init__ and
/// GroupedDifferentialAttentionImpl.__init__, mlx-motif ModelArgs._validate_grouped_head_topology):
/// Hn = num_noise_heads noise heads, each closing a group of H / Hn query heads, gr = H / Hn - 1
/// signal heads first; the kv heads in pairs (2c, 2c + 1) that the Hn / (Hkv / 2) groups of pair c
/// read; head_dim given. Sets the gda geometry of `c`.
inline void motif_grouped_heads(const ReleasedConfigReader& check, ModelConfig& c, Index H, Index Hkv) {
    const ConfigReader& read = check.read();
    const Index Hn = read.integer("num_noise_heads", 1, true, 0);
    check.require(Hn < H && H % Hn == 0, "num_noise_heads (", Hn, ") must be less than and divide num_attention_heads (",
                  H, "): each noise head closes a group of num_attention_heads / num_noise_heads query heads, "
                  "at least one of them a signal head");
    check.require(Hkv % 2 == 0, "num_key_value_heads (", Hkv,
                  ") must be even: the signal heads read the even kv heads, the noise heads the odd ones");
    check.require(Hn % (Hkv / 2) == 0, "num_noise_heads (", Hn, ") must be a multiple of num_key_value_heads / 2 (",
                  Hkv / 2, "): each of the ", Hkv / 2, " kv pairs serves whole groups");
    check.require(read.has("head_dim"), "key \"head_dim\" is required with num_noise_heads (vLLM MotifAttention "
                  "raises without it; hidden_size / num_attention_heads is not the head width of these models)");
    c.attention = AttentionKind::gda;
    c.num_attention_heads = H - Hn;
    c.gda_group_ratio = H / Hn - 1;
    c.num_key_value_heads = Hkv / 2;
    c.head_dim = read.integer("head_dim", 1, true, 0);
    check.require(c.head_dim % 2 == 0, "head_dim (", c.head_dim, ") must be even (rotate_half rotary)");
}

/// DiffLlama or Motif config.json -> ModelConfig (the file comment). Throws ConfigError.
inline ModelConfig released_config_from_json(const nlohmann::json& json, CheckpointFamily family,
                                             std::vector<std::string>* warnings, const std::string& source) {
    const ReleasedConfigReader check(json, source, family);
    const ConfigReader& read = check.read();
    const bool diffllama = family == CheckpointFamily::diffllama;
    const bool grouped = !diffllama && read.has("num_noise_heads");
    const Index D = read.integer("hidden_size", 1, true, 0);
    const Index H = read.integer("num_attention_heads", 1, true, 0);
    const Index Hkv = read.integer("num_key_value_heads", 1, false, H);

    ModelConfig c;
    if (grouped) {
        motif_grouped_heads(check, c, H, Hkv);
    } else {
        check.require(H % Hkv == 0, "num_key_value_heads (", Hkv, ") must divide num_attention_heads (", H, ")");
        check.require(H % 2 == 0 && Hkv % 2 == 0, "num_attention_heads (", H, ") and num_key_value_heads (", Hkv,
                      ") must both be even: a differential pair takes two query heads and two key/value heads");
        c.attention = AttentionKind::diff;
        c.num_attention_heads = H / 2;
        c.num_key_value_heads = Hkv / 2;
    }
    c.hidden_size = D;
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
        if (!grouped) {
            check.require(D % H == 0, "hidden_size (", D, ") must be divisible by num_attention_heads (", H, ")");
            c.head_dim = D / H;
            check.require(!read.has("head_dim") || read.integer("head_dim", 1, false, 0) == c.head_dim,
                          "key \"head_dim\" is ", detail::json_value_text(json, "head_dim"),
                          " but hidden_size / num_attention_heads = ", c.head_dim,
                          " (Motif's q_proj maps hidden_size to hidden_size; another head_dim is not supported)");
            check.require(c.head_dim % 2 == 0, "the head width hidden_size / num_attention_heads = ", c.head_dim,
                          " must be even (rotate_half rotary)");
        }
        // k_ratio (mlx-motif's ModelArgs; vLLM's MotifConfig stores it, its MotifAttention never
        // reads it): what another value does to the key and value heads is not pinned by the code
        // that runs the released models.
        const auto k_ratio = json.find("k_ratio");
        check.require(!read.has("k_ratio") || (k_ratio->is_number_integer() && k_ratio->get<long long>() == 1),
                      "key \"k_ratio\" is ", detail::json_value_text(json, "k_ratio"),
                      ": only 1 is supported (Motif's vLLM MotifAttention never reads it, so no released code "
                      "pins what another value does to the key and value heads)");
        check.require(read.has("hidden_act") && json.at("hidden_act") == "poly_norm", "key \"hidden_act\" is ",
                      detail::json_value_text(json, "hidden_act"), ": Motif's MLP needs \"poly_norm\"");
        for (const char* key : {"attention_bias", "use_bias", "qkv_bias"}) {
            check.refuse_true(key, "biases are not supported");
        }
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
            "attention_bias", "use_bias", "qkv_bias", "num_noise_heads", "k_ratio", "rope_theta", "rope_scaling",
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
