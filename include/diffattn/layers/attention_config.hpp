// Geometry of the multi-head attention modules (docs/math.md §3): the attention kind, the head layout
// and every derived width, as a plain struct with accessors (the llama.cpp hparams style), plus
// the conventions that differ between checkpoint families (AttentionConventions: data on the one
// module, docs/checkpoints.md); their defaults are our own format's.
//
// Buffers of one call, all row-major with one row per token:
//   Q [N x q_width()]   n_query_maps() maps of width head_dim(), map t at columns [t d, (t+1) d)
//   K [S x k_width()]   n_key_maps()   maps of width head_dim()
//   V [S x v_width()]   n_value_heads() heads of width value_dim()
//   O [N x out_width()] n_heads heads of width value_dim(), head h at [h dv, (h+1) dv)
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/layers/attention_conventions.hpp"
#include "diffattn/layers/attention_kind.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/lambda.hpp"
#include "diffattn/layers/rotary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace diffattn {

/// Everything one attention module needs to know. Field comments give the config.json key.
struct AttentionConfig {
    AttentionKind kind = AttentionKind::diff;                    ///< `attention`
    Index d_model = 0;                                           ///< `hidden_size` (D)
    Index n_heads = 0;                                           ///< `num_attention_heads` (H)
    Index n_kv_heads = 0;                                        ///< `num_key_value_heads` (Hkv; 0 means H)
    Index given_head_dim = 0;                                    ///< `head_dim` of diff_v2 and released checkpoints (0: derived)
    Index shared_diff_rank = 0;                                  ///< `shared_diff_rank` (r, shared_diff only)
    Index gda_group_ratio = 0;                                   ///< `gda_group_ratio` (gr signal heads per noise head, gda only)
    DiffGqaPairing gqa_pairing = DiffGqaPairing::per_head;       ///< `diff_gqa_pairing`
    DintIntegral dint_integral = DintIntegral::causal_softmax;   ///< `dint_integral` (dint only)
    bool causal = true;                                          ///< `causal`: mask causal, else none
    double rope_theta = 10000.0;                                 ///< `rope_theta`
    Index depth = 0;                                             ///< layer index, for lambda_init
    AttentionConventions conventions;                            ///< family conventions (defaults: ours)

    // ---- Derived values -------------------------------------------------------------------
    Index kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
    /// rep = H / Hkv: query heads per key/value head.
    Index rep() const { return n_heads / kv_heads(); }
    /// Two maps per head (DIFF family) or one (softmax).
    bool differential() const { return kind != AttentionKind::softmax; }
    /// gda: the noise heads H / gr, each the map 2 of its group of gr heads (docs/math.md §9).
    Index n_noise_heads() const {
        return kind == AttentionKind::gda && gda_group_ratio > 0 ? n_heads / gda_group_ratio : 0;
    }
    /// d: width of one query/key map. softmax D/H; diff, dint, shared_diff D/H/2; diff_v2
    /// head_dim; a released checkpoint's `head_dim` (given_head_dim) when set.
    Index head_dim() const {
        switch (kind) {
            case AttentionKind::softmax: return d_model / n_heads;
            case AttentionKind::diff_v2: return given_head_dim;
            default: return given_head_dim > 0 ? given_head_dim : d_model / n_heads / 2;
        }
    }
    /// Number of query maps: H (softmax), H + H / gr (gda) or 2H (every other differential kind).
    Index n_query_maps() const {
        if (kind == AttentionKind::gda) return n_heads + n_noise_heads();
        return differential() ? 2 * n_heads : n_heads;
    }
    /// Number of key maps: softmax Hkv; diff, dint 2 Hkv; shared_diff 2H; diff_v2 Hkv.
    Index n_key_maps() const {
        switch (kind) {
            case AttentionKind::softmax:
            case AttentionKind::diff_v2: return kv_heads();
            case AttentionKind::shared_diff: return 2 * n_heads;
            default: return 2 * kv_heads();
        }
    }
    /// Number of value heads: H for shared_diff (no grouping), else Hkv.
    Index n_value_heads() const { return kind == AttentionKind::shared_diff ? n_heads : kv_heads(); }
    /// dv: width of one value head, which is also the width of one head's output:
    /// 2d for diff, dint, shared_diff (the two maps share one V); d for softmax and diff_v2.
    Index value_dim() const {
        return (kind == AttentionKind::softmax || kind == AttentionKind::diff_v2) ? head_dim() : 2 * head_dim();
    }
    Index q_width() const { return n_query_maps() * head_dim(); }
    Index k_width() const { return n_key_maps() * head_dim(); }
    Index v_width() const { return n_value_heads() * value_dim(); }
    /// Width of the concatenated head outputs, the input of out_proj / o_proj: H dv.
    Index out_width() const { return n_heads * value_dim(); }

    /// Query map of map m (0 or 1) of head h (docs/math.md §3.1: sub-heads 2h and 2h+1; §9: group
    /// g = h / gr holds maps g (gr + 1) .. g (gr + 1) + gr, its signal heads first, its noise head last).
    Index query_map(Index h, Index m) const {
        if (kind == AttentionKind::gda) {
            const Index gr = gda_group_ratio;
            return h / gr * (gr + 1) + (m == 0 ? h % gr : gr);
        }
        return differential() ? 2 * h + m : h;
    }
    /// Key map used by map m of head h (docs/math.md §3.1 diff_gqa_pairing, 3.2, 3.3, 3.4).
    Index key_map(Index h, Index m) const {
        switch (kind) {
            case AttentionKind::softmax: return h / rep();
            case AttentionKind::shared_diff: return 2 * h + m;
            case AttentionKind::diff_v2: return (2 * h + m) / (2 * n_heads / kv_heads());
            case AttentionKind::gda: return 2 * (h / rep()) + m;  // docs/math.md §9: maps 2c, 2c+1 of kv pair c
            default:
                return gqa_pairing == DiffGqaPairing::per_head ? 2 * (h / rep()) + m : (2 * h + m) / rep();
        }
    }
    /// Value head used by map m of head h.
    Index value_head(Index h, Index m) const {
        switch (kind) {
            case AttentionKind::shared_diff: return h;
            case AttentionKind::diff_v2: return (2 * h + m) / (2 * n_heads / kv_heads());
            default: return h / rep();
        }
    }

    /// A learnable lambda (lambda_q1 ... lambda_k2) and lambda_init: diff, dint, shared_diff, gda.
    bool has_lambda() const {
        return kind == AttentionKind::diff || kind == AttentionKind::dint || kind == AttentionKind::shared_diff ||
               kind == AttentionKind::gda;
    }
    /// The per-head subln: diff, dint, shared_diff, gda.
    bool has_subln() const { return has_lambda(); }
    /// The subln's learned weight `subln.weight` [2d] (not DiffLlama's weightless norm).
    bool has_subln_weight() const { return has_subln() && conventions.pair_norm == PairNorm::affine; }
    /// lambda_init of the layer's depth, shifted by the family's offset (Motif: depth - 1).
    double lambda_init() const { return diffattn::lambda_init(depth + conventions.lambda_depth_offset); }
    /// Factor after subln: (1 - lambda_init) for diff, shared_diff and gda (docs/math.md §3.1, 3.3, 9); 1 otherwise.
    double output_scale() const {
        const bool scaled = kind == AttentionKind::diff || kind == AttentionKind::shared_diff || kind == AttentionKind::gda;
        return scaled ? 1.0 - lambda_init() : 1.0;
    }
    MaskKind mask() const { return causal ? MaskKind::causal : MaskKind::none; }
    /// Name of the output projection: `out_proj` (docs/math.md §3.1-3.3) or `o_proj` (diff_v2, docs/math.md §3.4;
    /// DiffLlama and Motif, tensor_names()).
    const char* out_proj_name() const {
        return kind == AttentionKind::diff_v2 ? "o_proj" : tensor_names(conventions.family).out_proj;
    }
    /// The rotary table this module's maps need.
    RotarySpec rotary() const { return {head_dim(), rope_theta, conventions.rotary_style, conventions.rope_scaling}; }

    /// Number of parameters (docs/model.md):
    ///   softmax:     D^2 (q) + 2 D^2/rep (k, v) + D^2 (out)
    ///   diff, dint:  D^2 (q) + 2 D^2/rep (k, v) + D^2 (out) + 4d (lambda) + 2d (subln),   d = D/H/2
    ///   gda:         D (H + H/gr) d (q) + 2 D^2/rep (k, v) + D^2 (out) + 4d + 2d,          d = D/H/2
    ///                (a given head_dim: D (q_width + k_width + v_width) + out_width D + 4d [+ 2d];
    ///                no 2d without the subln weight)
    ///   shared_diff: 2 d D (bases) + 4 H r (D + d) (factors) + 2 D^2 (v, out) + 4d + 2d
    ///   diff_v2:     2H d D (q) + 2 Hkv d D (k, v) + H d D (o) + H D (lambda_proj)
    Index parameter_count() const {
        const Index D = d_model, H = n_heads, d = head_dim(), r = shared_diff_rank;
        const Index lambda_and_subln = (has_lambda() ? 4 * d : 0) + (has_subln_weight() ? 2 * d : 0);
        switch (kind) {
            case AttentionKind::shared_diff:
                return 2 * d * D + 4 * H * r * (D + d) + 2 * D * D + lambda_and_subln;
            case AttentionKind::diff_v2:
                return D * (q_width() + k_width() + v_width()) + out_width() * D + H * D;
            default:
                return D * (q_width() + k_width() + v_width()) + out_width() * D + lambda_and_subln;
        }
    }

    /// Largest parameter count validate() accepts (2^53, about 9e15): far above any real model, and
    /// low enough that no width, count or byte size derived from a validated config overflows Index.
    static constexpr long double max_parameters = 9007199254740992.0L;

    /// An upper bound of parameter_count() computed in long double from the raw fields, so that it
    /// cannot overflow whatever they hold (validate() checks it before any Index arithmetic on them).
    long double parameter_count_bound() const {
        const long double D = static_cast<long double>(d_model), H = static_cast<long double>(n_heads),
                          d = static_cast<long double>(head_dim()), r = static_cast<long double>(shared_diff_rank);
        // Every width (q, k, v, out) is at most 2H * 2d; plus the Shared DIFF factors, the square
        // v / out projections, the bases, diff_v2's lambda_proj, lambda and subln.
        return 16 * D * H * d + 4 * H * r * (D + d) + 2 * D * D + 2 * d * D + H * D + 6 * d;
    }

    /// Throws ConfigError naming the config.json key if the geometry is impossible.
    void validate() const {
        const char* where = "attention config: ";
        require<ConfigError>(d_model > 0, where, "hidden_size must be > 0, got ", d_model);
        require<ConfigError>(n_heads > 0, where, "num_attention_heads must be > 0, got ", n_heads);
        require<ConfigError>(n_kv_heads >= 0, where, "num_key_value_heads must be > 0, got ", n_kv_heads);
        require<ConfigError>(shared_diff_rank >= 0 && given_head_dim >= 0, where,
                             "shared_diff_rank and head_dim must be >= 0, got ", shared_diff_rank, " and ",
                             given_head_dim);
        require<ConfigError>(parameter_count_bound() <= max_parameters, where,
                             "the attention module would have more than 2^53 parameters (hidden_size ", d_model,
                             ", num_attention_heads ", n_heads, ", query/key map width ", head_dim(),
                             ", shared_diff_rank ", shared_diff_rank, "): too large to index");
        require<ConfigError>(n_heads % kv_heads() == 0, where, "num_key_value_heads (", kv_heads(),
                             ") must divide num_attention_heads (", n_heads, ")");
        switch (kind) {
            case AttentionKind::softmax:
                require<ConfigError>(d_model % n_heads == 0, where, "hidden_size (", d_model,
                                     ") must be divisible by num_attention_heads (", n_heads, ") for attention softmax");
                break;
            case AttentionKind::diff_v2:
                require<ConfigError>(given_head_dim > 0, where,
                                     "head_dim must be set (> 0) for attention diff_v2, got ", given_head_dim);
                break;
            default:
                require<ConfigError>(given_head_dim > 0 || d_model % (2 * n_heads) == 0, where, "hidden_size (",
                                     d_model, ") must be divisible by 2 * num_attention_heads (", 2 * n_heads,
                                     ") for attention ", to_string(kind));
                break;
        }
        if (kind == AttentionKind::gda) validate_groups(where);
        if (kind == AttentionKind::shared_diff) {
            require<ConfigError>(shared_diff_rank > 0, where,
                                 "shared_diff_rank must be set (> 0) for attention shared_diff, got ",
                                 shared_diff_rank);
            require<ConfigError>(kv_heads() == n_heads, where, "num_key_value_heads (", kv_heads(),
                                 ") must equal num_attention_heads (", n_heads,
                                 ") for attention shared_diff (its v_proj has no grouping, docs/math.md §3.3)");
        }
        require<ConfigError>(head_dim() % 2 == 0, where, "the query/key map width d = ", head_dim(),
                             " must be even for the ", to_string(conventions.rotary_style),
                             " rotary embedding (attention ", to_string(kind), head_dim_source(), ")");
        require<ConfigError>(rope_theta > 0 && std::isfinite(rope_theta), where, "rope_theta must be > 0, got ",
                             rope_theta);
        // With theta < 1 the frequency theta^(-2i/d) grows with i; a tiny theta (a denormal) would
        // make the angles pos * theta^(-2i/d) Inf or NaN, i.e. NaN logits (caught by the finite-logits check of fuzz_config_json).
        // Keep every angle finite for positions below 2^31.
        const double d = static_cast<double>(head_dim());
        const double max_frequency = std::numeric_limits<double>::max() / 2147483648.0;
        const double theta_frequency = std::max(1.0, std::pow(rope_theta, -(d - 2) / d));
        require<ConfigError>(std::isfinite(theta_frequency) && theta_frequency <= max_frequency, where,
                             "rope_theta ", rope_theta, " is too small: the rotary frequency theta^(-2i/d) reaches ",
                             theta_frequency, ", so the angles pos * theta^(-2i/d) would overflow");
        // llama3 scaling keeps each frequency between f / factor and f: a tiny factor is the
        // culprit then, not theta.
        const Llama3RopeScaling& llama3 = conventions.rope_scaling;
        if (llama3.enabled()) {
            const double scaled_frequency = theta_frequency * std::max(1.0, 1.0 / llama3.factor);
            require<ConfigError>(std::isfinite(scaled_frequency) && scaled_frequency <= max_frequency, where,
                                 "llama3 rope scaling factor ", llama3.factor,
                                 " is too small: the rotary frequencies divided by it reach ", scaled_frequency,
                                 ", so the angles would overflow");
        }
        require<ConfigError>(depth >= 0, where, "layer index must be >= 0, got ", depth);
        validate_conventions(where);
        if (kind == AttentionKind::dint && dint_integral == DintIntegral::global_mean) {
            require<ConfigError>(!causal, where,
                                 "dint_integral global_mean sees the future and needs \"causal\": false "
                                 "(a bidirectional encoder stack)");
        }
    }

private:
    const char* head_dim_source() const {
        switch (kind) {
            case AttentionKind::softmax: return ", d = hidden_size / num_attention_heads";
            case AttentionKind::diff_v2: return ", d = head_dim";
            default: return given_head_dim > 0 ? ", d = head_dim" : ", d = hidden_size / num_attention_heads / 2";
        }
    }

    /// gda (docs/math.md §9): gr divides H, and the kv heads divide the H / gr noise heads, so that
    /// each group's signal and noise heads read one kv pair.
    void validate_groups(const char* where) const {
        require<ConfigError>(gda_group_ratio > 0 && n_heads % gda_group_ratio == 0, where, "gda_group_ratio (",
                             gda_group_ratio, ") must be > 0 and divide num_attention_heads (", n_heads,
                             ") for attention gda: each noise head serves gda_group_ratio heads");
        require<ConfigError>(n_noise_heads() % kv_heads() == 0, where, "num_key_value_heads (", kv_heads(),
                             ") must divide the ", n_noise_heads(), " noise heads (num_attention_heads ", n_heads,
                             " / gda_group_ratio ", gda_group_ratio,
                             ") for attention gda: a group's heads read one key/value head");
    }

    void validate_conventions(const char* where) const {
        const AttentionConventions& c = conventions;
        require<ConfigError>(c.pair_norm_eps > 0 && std::isfinite(c.pair_norm_eps), where,
                             "the per-pair norm eps must be > 0 and finite, got ", c.pair_norm_eps);
        require<ConfigError>(c.head_pairing == HeadPairing::stripe || kind == AttentionKind::diff ||
                                 kind == AttentionKind::dint,
                             where, "the halves head pairing needs two maps per head sharing one value head "
                             "(attention diff or dint), not ", to_string(kind));
        const Llama3RopeScaling& l = c.rope_scaling;
        require<ConfigError>(!l.enabled() || (std::isfinite(l.factor) && l.low_freq_factor > 0 &&
                                              l.high_freq_factor > l.low_freq_factor &&
                                              std::isfinite(l.high_freq_factor) &&
                                              l.original_max_position_embeddings > 0 &&
                                              std::isfinite(l.original_max_position_embeddings)),
                             where, "llama3 rope scaling needs a finite factor > 0, 0 < low_freq_factor < "
                             "high_freq_factor and original_max_position_embeddings > 0, got factor ", l.factor,
                             ", low_freq_factor ", l.low_freq_factor, ", high_freq_factor ", l.high_freq_factor,
                             ", original_max_position_embeddings ", l.original_max_position_embeddings);
    }
};

}  // namespace diffattn
