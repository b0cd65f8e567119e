// The conventions a checkpoint family sets on the one attention module (docs/checkpoints.md,
// "What the reader must implement"): data on AttentionConfig, never a copied module. The
// defaults are our own format (docs/math.md §3); DiffLlama and Motif set them from their config.json
// (model/checkpoint_config.hpp).
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/rotary.hpp"

namespace diffattn {

/// Which query heads of a released checkpoint form differential pair j (docs/checkpoints.md).
enum class HeadPairing {
    stripe,  ///< maps 2j, 2j+1, kv heads 2g, 2g+1 (g = j / rep): our own format, Motif
    halves,  ///< DiffLlama: map 1 = query head j, map 2 = query head j + P, query head t reads kv
             ///< head t / rep, value [v(j/rep) ; v((j+P)/rep)]. Realised at load by reordering the
             ///< row blocks of q_proj, k_proj, v_proj into the stripe layout (stored_head()).
};

/// The per-pair RMSNorm over 2d after the differential kernel ("subln").
enum class PairNorm {
    affine,  ///< with a learned weight `subln.weight` [2d]: our own format, Motif
    plain,   ///< without a weight (DiffLlama's `groupnorm`, nn.RMSNorm(elementwise_affine=False))
};

inline const char* to_string(HeadPairing pairing) { return pairing == HeadPairing::stripe ? "stripe" : "halves"; }
inline const char* to_string(PairNorm norm) { return norm == PairNorm::affine ? "affine" : "plain"; }

/// Where file head `head` of `n_heads` (of one projection's row blocks) is stored: stripe keeps
/// it; halves interleaves the two halves, head t < n/2 -> 2t, head n/2 + t -> 2t + 1, so that the
/// two maps of a pair and the two value halves of a kv group sit side by side (docs/checkpoints.md).
inline Index stored_head(HeadPairing pairing, Index head, Index n_heads) {
    if (pairing == HeadPairing::stripe) return head;
    const Index half = n_heads / 2;
    return head < half ? 2 * head : 2 * (head - half) + 1;
}

/// How a checkpoint family lays out and computes the one attention module (docs/checkpoints.md,
/// "What the reader must implement"). The defaults are our own format, docs/math.md §3.
struct AttentionConventions {
    CheckpointFamily family = CheckpointFamily::diffattn;  ///< whose tensor names (tensor_names())
    RotaryStyle rotary_style = RotaryStyle::interleaved;   ///< pairs (2i, 2i+1) or (i, i + d/2)
    Llama3RopeScaling rope_scaling;                        ///< `rope_scaling` llama3 (none by default)
    HeadPairing head_pairing = HeadPairing::stripe;        ///< which query / kv heads form a pair
    PairNorm pair_norm = PairNorm::affine;                 ///< subln with or without its weight
    double pair_norm_eps = kSublnEps;                      ///< DiffLlama `rms_norm_eps`, Motif `attn_rms_norm_eps`
    Index lambda_depth_offset = 0;                         ///< lambda_init(layer + offset): Motif -1

    /// True when every field has its default: our own format, which config.json can express.
    bool ours() const {
        const AttentionConventions d;
        return family == d.family && rotary_style == d.rotary_style && rope_scaling == d.rope_scaling &&
               head_pairing == d.head_pairing && pair_norm == d.pair_norm && pair_norm_eps == d.pair_norm_eps &&
               lambda_depth_offset == d.lambda_depth_offset;
    }
};

}  // namespace diffattn
