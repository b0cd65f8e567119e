// The caller-owned run state of a model forward (the llama2.c RunState): every activation buffer,
// allocated once for a maximum number of tokens and reused by every call and every layer.
//
// The model is const during forward(); one ForwardState per concurrent caller makes a model
// usable from any number of threads at once.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/core/weight_panels.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/layers/few_rows_linear.hpp"
#include "diffattn/model/config.hpp"
#include "diffattn/model/decoder_layer.hpp"

#include <cstddef>
#include <memory>

namespace diffattn {

template <typename T>
struct ForwardState {
    RowMatrix<T> x;       ///< [max_len x D]  residual stream X
    RowMatrix<T> normed;  ///< [max_len x D]  RMSNorm(X_L), the lm_head input
    RowMatrix<T> logits;  ///< [max_len x V]  logits of the convenience forward()
    LayerScratch<T> layer;///< per-layer buffers (attention, SwiGLU), shared by all layers

    ForwardState() = default;

    /// Buffers for calls of up to max_len tokens; heads and products run on `threads` threads
    /// (with OpenMP; 1 otherwise). Throws what check(config, max_len) throws, or OptionError for
    /// threads outside [1, detail::kMaxThreads], before allocating.
    ForwardState(const ModelConfig& config, Index max_len, int threads = 1)
        : x(checked(config, max_len, threads), config.hidden_size),
          normed(max_len, config.hidden_size),
          logits(max_len, config.vocab_size),
          layer(config, max_len, threads),
          context_{detail::available_threads(threads)},
          config_(config) {
        // Calls of many rows decode stored weights a panel at a time (layers/linear.hpp): the
        // panels' pages are touched only by a model whose weights are not all f32.
        if (max_len >= detail::kFewRowsLinear) {
            panels_ = std::make_unique<WeightPanels>(context_.threads, sizeof(T));
            context_.panels = panels_.get();
        }
    }

    Index max_len() const { return x.rows(); }
    /// The configuration the buffers were made for.
    const ModelConfig& config() const { return config_; }
    /// How every parallel call of a forward (heads, products) uses threads: up to the `threads` the
    /// state was made for (its kernel workspaces), fewer for calls below min_parallel_flops per
    /// thread. Results never depend on it.
    const ExecutionContext& context() const { return context_; }
    /// Work (flops) per thread below which a call runs on fewer threads, down to one (0: always all).
    void set_min_parallel_flops(double flops) { context_.min_parallel_flops = flops; }
    /// The products of the forwards that use this state (ExecutionContext::compute): the heads' and
    /// the projections' over many rows (docs/math.md §7.1, §10.1). OptionError for a BF16 mode of a
    /// double model or one this CPU cannot run.
    void set_compute(Compute compute) {
        detail::resolve_products<T>("ForwardState::set_compute", compute);
        // BF16 projections round their input rows beside each thread's panel (layers/panel_products.hpp).
        if (rounds_to_bf16(compute) && panels_ != nullptr && !panels_->holds_bf16_operands()) {
            panels_ = std::make_unique<WeightPanels>(context_.threads, sizeof(T), true);
            context_.panels = panels_.get();
        }
        context_.compute = compute;
    }

    /// True when the buffers serve a forward of a model of `model`: the same widths (hidden,
    /// SwiGLU, vocabulary) and an attention scratch that fits its modules, factored or merged
    /// (AttentionScratch::fits). DecoderModel::forward's one check of its state.
    bool fits(const ModelConfig& model) const {
        return config_.hidden_size == model.hidden_size && config_.intermediate_size == model.intermediate_size &&
               config_.vocab_size == model.vocab_size && layer.attention.fits(model.attention_config(), true);
    }

    /// ConfigError for an invalid config; ShapeError for max_len outside [1,
    /// ModelConfig::max_positions] or a state larger than memory_limit_bytes() (naming the bytes).
    static void check(const ModelConfig& config, Index max_len) {
        require<ShapeError>(max_len > 0, "ForwardState: max_len must be > 0, got ", max_len);
        config.validate();  // bytes_per_token's Index arithmetic needs a config that fits
        require<ShapeError>(max_len <= ModelConfig::max_positions, "ForwardState: max_len must be at most ",
                            ModelConfig::max_positions, " (ModelConfig::max_positions), got ", max_len, " (",
                            detail::byte_count_text(bytes(config, max_len)), " bytes)");
        require_memory(bytes(config, max_len), "ForwardState: ", max_len, " tokens of ", bytes_per_token(config),
                       " bytes each");
    }

    /// Bytes per token of max_len of a state for `config`, the buffers that grow with max_len:
    ///   sizeof(T) (4D + V + 2F + q_width + k_width + v_width + out_width + d
    ///              [+ out_width + H for diff_v2] [+ 2d + 4H r for shared_diff])
    /// (x, normed, logits, the layer's normed and branch, SwiGLU gate and up, Q, K, V, the head
    /// outputs, the rotary table's cos and sin, diff_v2's second maps and lambda gate, Shared
    /// DIFF's base and X a products). The kernel workspaces add a few bytes per token and thread.
    static std::size_t bytes_per_token(const ModelConfig& config) {
        const AttentionConfig a = config.attention_config();
        Index scalars = 4 * config.hidden_size + config.vocab_size + 2 * config.intermediate_size + a.q_width() +
                        a.k_width() + a.v_width() + a.out_width() + a.head_dim();
        if (a.kind == AttentionKind::diff_v2) scalars += a.out_width() + a.n_heads;
        if (a.kind == AttentionKind::shared_diff) scalars += 2 * a.head_dim() + 4 * a.n_heads * a.shared_diff_rank;
        return static_cast<std::size_t>(scalars) * sizeof(T);
    }

    /// max_len * bytes_per_token(config), in long double (no overflow for any max_len).
    static long double bytes(const ModelConfig& config, Index max_len) {
        return static_cast<long double>(bytes_per_token(config)) * static_cast<long double>(max_len);
    }

private:
    static Index checked(const ModelConfig& config, Index max_len, int threads) {
        detail::require_thread_count("ForwardState", threads);  // one kernel workspace per thread
        check(config, max_len);
        return max_len;
    }

    ExecutionContext context_;  // threads fixed at construction: one kernel workspace each
    ModelConfig config_;        // what the buffers were sized for
    std::unique_ptr<WeightPanels> panels_;  // context_.panels: on the heap, so a moved state keeps them
};

}  // namespace diffattn
