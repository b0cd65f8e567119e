// Pre-norm decoder layer (docs/math.md §4):
//   Y  = X + Attn(RMSNorm_in(X))
//   X' = Y + SwiGLU(RMSNorm_post(Y))          (Motif: the PolyNorm-gated MLP, layers/swiglu.hpp)
// With "causal": false the same layer is a bidirectional encoder layer (attention mask none).
#pragma once

#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_scratch.hpp"
#include "diffattn/layers/kv_cache_view.hpp"
#include "diffattn/layers/multi_head_attention.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/swiglu.hpp"
#include "diffattn/model/config.hpp"

#include <string>

namespace diffattn {

/// Activation buffers of one layer call, shared by all layers of a model (they run in turn).
template <typename T>
struct LayerScratch {
    RowMatrix<T> normed;            ///< [max_len x D]  RMSNorm_in(X), then RMSNorm_post(Y)
    RowMatrix<T> branch;            ///< [max_len x D]  Attn(...), then SwiGLU(...)
    SwiGluScratch<T> mlp;           ///< gate, up [max_len x F]
    AttentionScratch<T> attention;  ///< q, k, v, head outputs, rotary table, kernel workspaces

    LayerScratch() = default;
    /// Buffers for calls of up to max_len tokens, kernel workspaces for up to `threads` threads.
    LayerScratch(const ModelConfig& config, Index max_len, int threads)
        : normed(max_len, config.hidden_size),
          branch(max_len, config.hidden_size),
          mlp(max_len, config.intermediate_size),
          attention(config.attention_config(), max_len, threads) {}

    Index max_len() const { return normed.rows(); }
};

template <typename T>
struct DecoderLayer {
    RmsNorm<T> input_layernorm;           ///< [D]  `input_layernorm.weight`
    MultiHeadAttention<T> self_attn;      ///< `self_attn.*` (docs/math.md §3)
    RmsNorm<T> post_attention_layernorm;  ///< [D]  `post_attention_layernorm.weight`
    SwiGlu<T> mlp;                        ///< `mlp.gate_proj`, `mlp.up_proj` [F x D], `mlp.down_proj` [D x F]
                                          ///< (+ `mlp.act_fn.*` with PolyNorm)

    /// Layer `index` of a model (the index is the depth of lambda_init). Zero projections, stored
    /// in `weights` (stored_format).
    DecoderLayer(const ModelConfig& config, Index index, WeightFormat weights = WeightFormat::f32)
        : input_layernorm(config.hidden_size, config.rms_norm_eps),
          self_attn(config.attention_config(index), weights),
          post_attention_layernorm(config.hidden_size, config.rms_norm_eps),
          mlp(config.hidden_size, config.intermediate_size, config.mlp_activation, weights) {}

    /// The layer's tensors under `prefix` ("model.layers.<i>."), in model-file order.
    void collect_parameters(const std::string& prefix, ParameterList<T>& list) {
        self_attn.unmerge();  // writable views of the Shared DIFF factors drop the merge
        list_tensors(input_layernorm.features(), self_attn.config(), mlp.d_ff(), mlp.activation, prefix, list, this);
    }

    /// The tensors of layer `index` of a model of `config` under `prefix`, as table entries only
    /// (no storage): what a checkpoint must hold, checked before anything is allocated.
    static void list_tensors(const ModelConfig& config, Index index, const std::string& prefix, ParameterList<T>& list) {
        list_tensors(config.hidden_size, config.attention_config(index), config.intermediate_size,
                     config.mlp_activation, prefix, list, nullptr);
    }

    /// x [N x D], the residual stream, updated in place; scratch sized for >= N tokens; attention
    /// and SwiGLU run as `context` allows. cache: this layer's KV cache (the N tokens follow its
    /// `length` cached ones), or null for a plain forward over positions 0 .. N-1
    /// (MultiHeadAttention::forward; S the scalar the cache stores keys and values in).
    template <typename S = T>
    void forward(MatrixRef<T> x, LayerScratch<T>& scratch, const ExecutionContext& context,
                 KvCacheView<T, S>* cache = nullptr) const {
        forward_around(x, scratch, context, [&](auto normed, auto branch) {
            self_attn.forward(normed, branch, scratch.attention, context, cache);
        });
    }

    /// A batched step: the rows of x continue `count` sequences, each with its own cache
    /// (MultiHeadAttention's batched forward, sequence(s) its SequenceRows); norms and SwiGLU run
    /// once over all rows.
    template <typename Sequences>
    void forward_batch(MatrixRef<T> x, LayerScratch<T>& scratch, const ExecutionContext& context, Index count,
                       const Sequences& sequence) const {
        forward_around(x, scratch, context, [&](auto normed, auto branch) {
            self_attn.forward(normed, branch, scratch.attention, context, count, sequence);
        });
    }

private:
    /// The layer around its attention call `attend(normed, branch)`.
    template <typename Attend>
    void forward_around(MatrixRef<T> x, LayerScratch<T>& scratch, const ExecutionContext& context,
                        Attend&& attend) const {
        const Index n = x.rows();
        auto normed = scratch.normed.topRows(n);  // [N x D]
        auto branch = scratch.branch.topRows(n);  // [N x D]
        input_layernorm(x, normed);                                            // RMSNorm_in(X)
        attend(normed, branch);                                                // Attn(RMSNorm_in(X))
        x += branch;                                                           // Y = X + Attn(...)
        post_attention_layernorm(x, normed);                                   // RMSNorm_post(Y)
        mlp(normed, branch, scratch.mlp, context);                             // SwiGLU(RMSNorm_post(Y))
        x += branch;                                                           // X' = Y + SwiGLU(...)
    }

    static void list_tensors(Index d_model, const AttentionConfig& attention, Index d_ff, MlpActivation activation,
                             const std::string& prefix, ParameterList<T>& list, DecoderLayer* layer) {
        list.add(prefix + "input_layernorm.weight", d_model, layer ? &layer->input_layernorm.weight : nullptr);
        AttentionWeights<T>::list_tensors(attention, prefix + "self_attn.", list,
                                          layer ? &layer->self_attn.weights() : nullptr);
        list.add(prefix + "post_attention_layernorm.weight", d_model,
                 layer ? &layer->post_attention_layernorm.weight : nullptr);
        SwiGlu<T>::list_tensors(d_model, d_ff, activation, prefix + "mlp.", list, layer ? &layer->mlp : nullptr);
    }
};

}  // namespace diffattn
