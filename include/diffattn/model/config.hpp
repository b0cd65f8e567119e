// Model configuration (docs/math.md §5): one field per config.json key, plus derived values.
//
// A plain struct in the llama.cpp hparams style: fields are what the file says, accessors derive
// everything else. Defaults are docs/math.md §5's; the keys docs/math.md §5 gives no default for are required by
// the JSON reader (model/config_json.hpp) and zero here, which validate() rejects.
//
// A released DiffLlama or Motif checkpoint (model/checkpoint_config.hpp, docs/checkpoints.md) is
// the same struct: attention diff, a pair of its query heads per head (num_attention_heads and
// num_key_value_heads are half the config.json values), or for Motif-2 (num_noise_heads) attention
// gda, its signal heads as num_attention_heads and its kv pairs as num_key_value_heads; head_dim its
// map width, and its conventions as data (`conventions`, `mlp_activation`); the defaults are our own
// format's.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/swiglu.hpp"

#include <cmath>
#include <ostream>

namespace diffattn {

struct ModelConfig {
    AttentionKind attention = AttentionKind::diff;             ///< `attention`: softmax | diff | dint | shared_diff | diff_v2 | gda (required)
    Index hidden_size = 0;                                     ///< `hidden_size`: D, model width (required)
    Index num_attention_heads = 0;                             ///< `num_attention_heads`: H (required)
    Index num_key_value_heads = 0;                             ///< `num_key_value_heads`: Hkv, divides H (default H; 0 here means H)
    Index num_hidden_layers = 0;                               ///< `num_hidden_layers`: L (required)
    Index intermediate_size = 0;                               ///< `intermediate_size`: SwiGLU width F (required)
    Index vocab_size = 0;                                      ///< `vocab_size`: V (required)
    double rms_norm_eps = 1e-5;                                ///< `rms_norm_eps` (default 1e-5; subln always uses 1e-5)
    double rope_theta = 10000.0;                               ///< `rope_theta` (default 10000)
    bool tie_word_embeddings = false;                          ///< `tie_word_embeddings`: lm_head = embed_tokens (default false, see docs/model.md)
    DintIntegral dint_integral = DintIntegral::causal_softmax; ///< `dint_integral` (dint only; default causal_softmax)
    Index shared_diff_rank = 0;                                ///< `shared_diff_rank`: r (required for shared_diff)
    Index gda_group_ratio = 0;                                 ///< `gda_group_ratio`: gr signal heads per noise head (required for gda)
    DiffGqaPairing diff_gqa_pairing = DiffGqaPairing::per_head;///< `diff_gqa_pairing` (diff, dint with GQA; default per_head)
    Index head_dim = 0;                                        ///< `head_dim`: d of diff_v2 (required) and gda (default D/H/2),
                                                               ///< ignored otherwise; the map width hd of a released checkpoint
    bool causal = true;                                        ///< `causal`: false makes a bidirectional encoder stack (default true)
    AttentionConventions conventions;                          ///< the family's attention conventions (defaults: ours)
    MlpActivation mlp_activation = MlpActivation::silu;        ///< the gate activation: silu (SwiGLU) or Motif's poly_norm

    /// Most tokens of one sequence (a ForwardState's or a KvCache's max_len): positions stay below
    /// 2^31, the range over which AttentionConfig::validate keeps every rotary angle finite.
    static constexpr Index max_positions = 2147483647;

    // ---- Derived values -------------------------------------------------------------------
    Index kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
    MaskKind mask() const { return causal ? MaskKind::causal : MaskKind::none; }

    /// The attention module of layer `layer` (its depth sets lambda_init, docs/math.md §2.5).
    AttentionConfig attention_config(Index layer = 0) const {
        AttentionConfig c;
        c.kind = attention;
        c.d_model = hidden_size;
        c.n_heads = num_attention_heads;
        c.n_kv_heads = kv_heads();
        // Our format reads head_dim for diff_v2 and gda only; a released checkpoint's is its map width.
        const bool given = attention == AttentionKind::diff_v2 || attention == AttentionKind::gda ||
                           conventions.family != CheckpointFamily::diffattn;
        c.given_head_dim = given ? head_dim : 0;
        c.shared_diff_rank = shared_diff_rank;
        c.gda_group_ratio = gda_group_ratio;
        c.gqa_pairing = diff_gqa_pairing;
        c.dint_integral = dint_integral;
        c.causal = causal;
        c.rope_theta = rope_theta;
        c.depth = layer;
        c.conventions = conventions;
        return c;
    }

    /// Parameters of one decoder layer: attention + 2 RMSNorm weights [D] + SwiGLU 3 D F (+ 4 for PolyNorm).
    Index layer_parameter_count() const {
        return attention_config().parameter_count() + 2 * RmsNorm<double>::parameter_count(hidden_size) +
               SwiGlu<double>::parameter_count(hidden_size, intermediate_size, mlp_activation);
    }
    /// Parameters of the model: V D (embedding) + L layer + D (final norm) + V D (lm_head, 0 if tied).
    Index parameter_count() const {
        const Index embedding = vocab_size * hidden_size;
        return embedding + num_hidden_layers * layer_parameter_count() + hidden_size +
               (tie_word_embeddings ? 0 : embedding);
    }

    /// Throws ConfigError naming the config.json key of the first impossible value.
    void validate() const {
        const char* where = "model config: ";
        require<ConfigError>(hidden_size > 0, where, "hidden_size must be > 0, got ", hidden_size);
        require<ConfigError>(num_attention_heads > 0, where, "num_attention_heads must be > 0, got ",
                             num_attention_heads);
        require<ConfigError>(num_key_value_heads >= 0, where, "num_key_value_heads must be > 0, got ",
                             num_key_value_heads);
        require<ConfigError>(num_hidden_layers >= 0, where, "num_hidden_layers must be >= 0, got ",
                             num_hidden_layers);
        require<ConfigError>(intermediate_size > 0, where, "intermediate_size must be > 0, got ",
                             intermediate_size);
        require<ConfigError>(vocab_size > 0, where, "vocab_size must be > 0, got ", vocab_size);
        require<ConfigError>(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), where,
                             "rms_norm_eps must be > 0 and finite, got ", rms_norm_eps);
        attention_config().validate();
        // parameter_count() and every size derived from the config must fit in Index: bound it in
        // long double first (a hostile config.json could otherwise overflow the Index arithmetic).
        const long double D = static_cast<long double>(hidden_size), V = static_cast<long double>(vocab_size),
                          F = static_cast<long double>(intermediate_size),
                          L = static_cast<long double>(num_hidden_layers);
        const long double bound = 2 * V * D + L * (attention_config().parameter_count_bound() + 2 * D + 3 * D * F) + D;
        require<ConfigError>(bound <= AttentionConfig::max_parameters, where,
                             "the model would have more than 2^53 parameters (hidden_size ", hidden_size,
                             ", vocab_size ", vocab_size, ", intermediate_size ", intermediate_size,
                             ", num_hidden_layers ", num_hidden_layers, "): too large to index");
    }
};

/// Prints the configuration as `key = value` lines (the example program's summary).
inline std::ostream& operator<<(std::ostream& out, const ModelConfig& c) {
    out << "  attention            = " << to_string(c.attention) << "\n"
        << "  hidden_size          = " << c.hidden_size << "\n"
        << "  num_attention_heads  = " << c.num_attention_heads << "\n"
        << "  num_key_value_heads  = " << c.kv_heads() << "\n"
        << "  num_hidden_layers    = " << c.num_hidden_layers << "\n"
        << "  intermediate_size    = " << c.intermediate_size << "\n"
        << "  vocab_size           = " << c.vocab_size << "\n"
        << "  rms_norm_eps         = " << c.rms_norm_eps << "\n"
        << "  rope_theta           = " << c.rope_theta << "\n"
        << "  tie_word_embeddings  = " << (c.tie_word_embeddings ? "true" : "false") << "\n"
        << "  causal               = " << (c.causal ? "true" : "false") << "\n";
    if (c.attention == AttentionKind::dint) out << "  dint_integral        = " << to_string(c.dint_integral) << "\n";
    if (c.attention == AttentionKind::diff || c.attention == AttentionKind::dint)
        out << "  diff_gqa_pairing     = " << to_string(c.diff_gqa_pairing) << "\n";
    if (c.attention == AttentionKind::shared_diff) out << "  shared_diff_rank     = " << c.shared_diff_rank << "\n";
    if (c.attention == AttentionKind::diff_v2) out << "  head_dim             = " << c.head_dim << "\n";
    if (c.attention == AttentionKind::gda) {
        out << "  gda_group_ratio      = " << c.gda_group_ratio << " (" << c.attention_config().n_noise_heads()
            << " noise heads)\n";
    }
    const AttentionConventions& v = c.conventions;
    if (v.family != CheckpointFamily::diffattn) {
        if (c.attention == AttentionKind::gda) {
            out << "  checkpoint family    = " << to_string(v.family) << " (grouped: its "
                << c.num_attention_heads + c.attention_config().n_noise_heads() << " query heads, "
                << 2 * c.kv_heads() << " kv heads)\n";
        } else {
            out << "  checkpoint family    = " << to_string(v.family) << " (a pair of its " << 2 * c.num_attention_heads
                << " query heads per head, " << 2 * c.kv_heads() << " kv heads)\n";
        }
        out << "  head_dim             = " << c.head_dim << "\n"
            << "  rotary               = " << to_string(v.rotary_style);
        if (v.rope_scaling.enabled()) {
            out << ", llama3 scaling (factor " << v.rope_scaling.factor << ", low_freq_factor "
                << v.rope_scaling.low_freq_factor << ", high_freq_factor " << v.rope_scaling.high_freq_factor
                << ", original_max_position_embeddings " << v.rope_scaling.original_max_position_embeddings << ")";
        }
        out << "\n"
            << "  head pairing         = " << to_string(v.head_pairing) << "\n"
            << "  per-pair norm        = " << to_string(v.pair_norm) << ", eps " << v.pair_norm_eps << "\n"
            << "  lambda_init depth    = layer " << (v.lambda_depth_offset < 0 ? "- " : "+ ")
            << (v.lambda_depth_offset < 0 ? -v.lambda_depth_offset : v.lambda_depth_offset) << "\n"
            << "  mlp activation       = " << to_string(c.mlp_activation) << "\n";
    }
    out << "  (query/key map width d = " << c.attention_config().head_dim() << ")\n";
    return out;
}

}  // namespace diffattn
