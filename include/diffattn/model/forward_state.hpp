// The caller-owned run state of a model forward (the llama2.c RunState): every activation buffer,
// allocated once for a maximum number of tokens and reused by every call and every layer.
//
// The model is const during forward(); one ForwardState per concurrent caller makes a model
// usable from any number of threads at once.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/decoder_layer.hpp"

namespace diffattn {

template <typename T>
struct ForwardState {
    RowMatrix<T> x;       ///< [max_len x D]  residual stream X
    RowMatrix<T> normed;  ///< [max_len x D]  RMSNorm(X_L), the lm_head input
    RowMatrix<T> logits;  ///< [max_len x V]  logits of the convenience forward()
    LayerScratch<T> layer;///< per-layer buffers (attention, SwiGLU), shared by all layers
    /// Threads of every parallel call of a forward (heads, products): up to `threads`, fewer for
    /// calls below min_parallel_flops per thread (0: always all; results never depend on it).
    ExecutionContext context;

    ForwardState() = default;

    /// Buffers for calls of up to max_len tokens; heads and products run on `threads` threads
    /// (with OpenMP; 1 otherwise).
    ForwardState(const ModelConfig& config, Index max_len, int threads = 1)
        : x(check_len(max_len), config.hidden_size),
          normed(max_len, config.hidden_size),
          logits(max_len, config.vocab_size),
          layer(config, max_len, threads),
          context{detail::available_threads(threads)},
          config_(config) {}

    Index max_len() const { return x.rows(); }
    /// The configuration the buffers were made for.
    const ModelConfig& config() const { return config_; }

    /// True when the buffers serve a forward of a model of `model`: the same widths (hidden,
    /// SwiGLU, vocabulary) and an attention scratch that fits its modules, factored or merged
    /// (AttentionScratch::fits). DecoderModel::forward's one check of its state.
    bool fits(const ModelConfig& model) const {
        return config_.hidden_size == model.hidden_size && config_.intermediate_size == model.intermediate_size &&
               config_.vocab_size == model.vocab_size && layer.attention.fits(model.attention_config(), true);
    }

private:
    static Index check_len(Index max_len) {
        require<ShapeError>(max_len > 0, "ForwardState: max_len must be > 0, got ", max_len);
        return max_len;
    }

    ModelConfig config_;  // what the buffers were sized for
};

}  // namespace diffattn
