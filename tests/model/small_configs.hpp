// Small model configurations shared by the model tests (test_model, test_model_nomalloc) and the
// folders that build whole models (tests/catalogue, tests/concurrency). Plain inline functions:
// safe to include in the no-malloc TU, which links no test support library.
#pragma once

#include "diffattn/model/config.hpp"

namespace diffattn::test {

/// 2 layers, 4 query heads of map width 6 (hidden 32), SwiGLU width 48, vocabulary 64, Shared
/// DIFF rank 2; `kv_heads` key/value heads (4: no GQA, 2: GQA; Shared DIFF requires 4); gda:
/// 4 / kv_heads heads per noise head (kv_heads noise heads, a kv pair each).
inline ModelConfig small_config(AttentionKind kind, Index kv_heads) {
    ModelConfig c;
    c.attention = kind;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.num_key_value_heads = kv_heads;
    c.num_hidden_layers = 2;
    c.intermediate_size = 48;
    c.vocab_size = 64;
    c.shared_diff_rank = 2;
    c.head_dim = 6;
    if (kind == AttentionKind::gda) c.gda_group_ratio = 4 / kv_heads;
    return c;
}

/// small_config with GQA (2 key/value heads) where the kind allows it, and DINT's `integral`.
inline ModelConfig small_config(AttentionKind kind, DintIntegral integral = DintIntegral::causal_softmax) {
    ModelConfig c = small_config(kind, kind == AttentionKind::shared_diff ? 4 : 2);
    c.dint_integral = integral;
    return c;
}

/// Every attention kind a KV cache serves, DINT in both causal integral modes (global_mean cannot
/// be decoded incrementally): the cases of the tests that run every cached kind.
struct CachedKind {
    AttentionKind kind;
    DintIntegral integral;
};
inline constexpr CachedKind kCachedKinds[] = {{AttentionKind::softmax, DintIntegral::causal_softmax},
                                              {AttentionKind::diff, DintIntegral::causal_softmax},
                                              {AttentionKind::dint, DintIntegral::causal_softmax},
                                              {AttentionKind::dint, DintIntegral::causal_mean},
                                              {AttentionKind::shared_diff, DintIntegral::causal_softmax},
                                              {AttentionKind::diff_v2, DintIntegral::causal_softmax},
                                              {AttentionKind::gda, DintIntegral::causal_softmax}};

/// The smallest useful model: 2 layers, 2 heads, hidden 16, SwiGLU width 24, the default head
/// geometry (head dim 4 for diff_v2; gda: both heads share one noise head and kv head),
/// vocabulary `vocab_size`.
inline ModelConfig tiny_config(AttentionKind kind, Index vocab_size) {
    ModelConfig c;
    c.attention = kind;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
    c.num_hidden_layers = 2;
    c.intermediate_size = 24;
    c.vocab_size = vocab_size;
    if (kind == AttentionKind::shared_diff) c.shared_diff_rank = 2;
    if (kind == AttentionKind::diff_v2) c.head_dim = 4;
    if (kind == AttentionKind::gda) {
        c.gda_group_ratio = 2;
        c.num_key_value_heads = 1;
    }
    return c;
}

}  // namespace diffattn::test
