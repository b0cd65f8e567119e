// The choices of config.json that name an attention operator (docs/math.md §5, 9): the attention
// kind, DIFF's pairing of key sub-heads under GQA, and DINT's integral mode, with their
// config.json spellings (to_string, and the parse_* functions that read them back).
#pragma once

#include "diffattn/kernels/options.hpp"

#include <string>

namespace diffattn {

/// config.json `attention` (docs/math.md §5).
enum class AttentionKind {
    softmax,      ///< baseline multi-head attention (docs/math.md §3.2)
    diff,         ///< DIFF Transformer (docs/math.md §3.1)
    dint,         ///< DINT Transformer: DIFF plus the integral term (docs/math.md §2.3, 3.1)
    shared_diff,  ///< Shared DIFF: shared base plus low-rank per-head factors (docs/math.md §3.3)
    diff_v2,      ///< DIFF Transformer V2: per-token sigmoid lambda (docs/math.md §3.4)
    gda,          ///< grouped differential attention: gr signal heads share one noise head (docs/math.md §9)
};

/// config.json `diff_gqa_pairing`: which key sub-heads the two maps of a grouped head use (docs/math.md §3.1).
enum class DiffGqaPairing {
    per_head,     ///< map m of head h uses key sub-head 2 (h / rep) + m (official FlashAttention modules)
    per_subhead,  ///< query sub-head t uses key sub-head t / rep (official plain-PyTorch module)
};

inline const char* to_string(AttentionKind kind) {
    switch (kind) {
        case AttentionKind::softmax: return "softmax";
        case AttentionKind::diff: return "diff";
        case AttentionKind::dint: return "dint";
        case AttentionKind::shared_diff: return "shared_diff";
        case AttentionKind::diff_v2: return "diff_v2";
        case AttentionKind::gda: return "gda";
    }
    return "?";
}
inline const char* to_string(DiffGqaPairing pairing) {
    return pairing == DiffGqaPairing::per_head ? "per_head" : "per_subhead";
}
inline const char* to_string(DintIntegral integral) {
    switch (integral) {
        case DintIntegral::causal_softmax: return "causal_softmax";
        case DintIntegral::causal_mean: return "causal_mean";
        case DintIntegral::global_mean: return "global_mean";
    }
    return "?";
}

/// Parses the config.json spellings; false if `text` is not one of them.
inline bool parse_attention_kind(const std::string& text, AttentionKind& kind) {
    for (AttentionKind k : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                            AttentionKind::shared_diff, AttentionKind::diff_v2, AttentionKind::gda}) {
        if (text == to_string(k)) { kind = k; return true; }
    }
    return false;
}
inline bool parse_gqa_pairing(const std::string& text, DiffGqaPairing& pairing) {
    for (DiffGqaPairing p : {DiffGqaPairing::per_head, DiffGqaPairing::per_subhead}) {
        if (text == to_string(p)) { pairing = p; return true; }
    }
    return false;
}
inline bool parse_dint_integral(const std::string& text, DintIntegral& integral) {
    for (DintIntegral i : {DintIntegral::causal_softmax, DintIntegral::causal_mean, DintIntegral::global_mean}) {
        if (text == to_string(i)) { integral = i; return true; }
    }
    return false;
}

}  // namespace diffattn
