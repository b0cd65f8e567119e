// Per-caller activation buffers of a multi-head attention module, allocated once for a maximum
// number of tokens (the llama2.c run-state idea). The module itself is const during a forward,
// so any number of threads can share one module, each with its own scratch.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/parallel.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/layers/head_parallel.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_kernels.hpp"
#include "diffattn/layers/rotary.hpp"

#include <vector>

namespace diffattn {

template <typename T>
struct AttentionScratch {
    RowMatrix<T> q;              ///< [max_len x q_width]     projected, then rotated queries
    RowMatrix<T> k;              ///< [max_len x k_width]     projected, then rotated keys
    RowMatrix<T> v;              ///< [max_len x v_width]     values
    RowMatrix<T> heads;          ///< [max_len x out_width]   head outputs, head h at [h dv, (h+1) dv)
    RowMatrix<T> second;         ///< diff_v2: [max_len x out_width] O[2h+1] of every head; else empty
    RowMatrix<T> lambda_gate;    ///< diff_v2: [max_len x H] sigmoid(x lambda_proj^T); else empty
    RowMatrix<T> shared_base;    ///< shared_diff: [max_len x 2d]    X q_base^T | X k_base^T; else empty
    RowMatrix<T> shared_xa;      ///< shared_diff: [max_len x 4H r]  X q_a | X k_a; else empty
    RotaryTable<T> rotary;       ///< cos / sin for positions [0, max_len), maps of width d
    std::vector<AttentionWorkspace<T>> workspaces;  ///< kernel scratch, one per thread
    /// Not owned. Set: the calls hold a slice of a longer sequence and run their heads through
    /// these kernels (attention_kernels.hpp); null (the default): the single-process kernels.
    const AttentionKernels<T>* kernels = nullptr;

    AttentionScratch() = default;

    /// Buffers for calls of up to `max_len` tokens of modules with this geometry (every layer of
    /// a model shares one geometry, so one scratch serves all its layers), with kernel workspaces
    /// for up to `requested_threads` threads (1 without OpenMP).
    AttentionScratch(const AttentionConfig& config, Index max_len, int requested_threads = 1)
        : q(max_len, config.q_width()),
          k(max_len, config.k_width()),
          v(max_len, config.v_width()),
          heads(max_len, config.out_width()),
          rotary(config.rotary(), max_len),
          workspaces(static_cast<std::size_t>(detail::available_threads(requested_threads))),
          config_(config) {
        require<ShapeError>(max_len > 0, "AttentionScratch: max_len must be > 0, got ", max_len);
        if (config.kind == AttentionKind::diff_v2) {
            second.resize(max_len, config.out_width());
            lambda_gate.resize(max_len, config.n_heads);
        }
        if (config.kind == AttentionKind::shared_diff) {
            shared_base.resize(max_len, 2 * config.head_dim());
            shared_xa.resize(max_len, 4 * config.n_heads * config.shared_diff_rank);
        }
        reserve_keys(max_len);
    }

    Index max_len() const { return q.rows(); }
    /// The geometry the buffers were made for.
    const AttentionConfig& config() const { return config_; }

    /// True when the buffers serve a module of `module`: the same q, k, v and output widths, map
    /// and value widths, rotary settings (the table), and the buffers of its kind: diff_v2's, and
    /// shared_diff's factors when `factored` (a module that has not merged them). The one check of a
    /// scratch against a module, for MultiHeadAttention::forward and ForwardState::fits.
    bool fits(const AttentionConfig& module, bool factored) const {
        const AttentionConfig& made = config_;
        return made.q_width() == module.q_width() && made.k_width() == module.k_width() &&
               made.v_width() == module.v_width() && made.out_width() == module.out_width() &&
               made.head_dim() == module.head_dim() && made.value_dim() == module.value_dim() &&
               made.rotary() == module.rotary() &&
               (module.kind != AttentionKind::diff_v2 || made.kind == AttentionKind::diff_v2) &&
               (module.kind != AttentionKind::shared_diff || !factored ||
                (made.kind == AttentionKind::shared_diff && made.shared_diff_rank == module.shared_diff_rank));
    }

    /// Makes every kernel workspace hold calls over up to `seq_len_kv` keys (DINT's column sums),
    /// e.g. a KV cache's capacity, so that decoding never allocates. Grows only; a no-op once done.
    /// The first workspace also serves a decode step whose heads run one after another, each on
    /// every thread (detail::split_heads_over_keys), when some thread count could call for that.
    void reserve_keys(Index seq_len_kv) {
        const int threads = static_cast<int>(workspaces.size());
        int first_threads = 1;
        const Index group = detail::heads_sharing_kv(config_);  // a one-row step's heads per kernel call
        const bool gda = config_.kind == AttentionKind::gda;     // a task per group of gr heads
        for (int t = 2; t <= threads; ++t) {
            if (detail::split_heads_over_keys(config_.n_heads, 1, t) ||
                detail::split_heads_over_keys(config_.n_heads / group, group, t) ||
                (gda && detail::split_heads_over_keys(config_.n_noise_heads(), 1, t))) {
                first_threads = threads;
            }
        }
        // gda's one-row step keeps gr + 1 rows of probabilities (its stacked signal heads and noise head).
        const Index kept_rows = gda ? detail::gda_kept_rows(config_.gda_group_ratio) : 0;
        for (AttentionWorkspace<T>& ws : workspaces) {
            ws.reserve(max_len(), seq_len_kv, config_.head_dim(), config_.value_dim(),
                       &ws == &workspaces.front() ? first_threads : 1, kept_rows);
        }
    }

private:
    AttentionConfig config_;  // what the buffers were sized for
};

}  // namespace diffattn
