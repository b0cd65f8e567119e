// Multi-head attention modules of docs/math.md §3 and 9: softmax, diff, dint, shared_diff, diff_v2, gda — one
// module, with the attention kind as a small head policy (layers/attention_heads.hpp) chosen in
// exactly one switch.
//
// forward(x), as in the papers:
//   Q, K, V = projections of x                     (dense, or Shared DIFF through its factors)
//   Q, K    = rotary on every map                  (interleaved or rotate_half; positions from the
//                                                   first token, cache included)
//   per head h (in parallel over heads):
//     O_h = kernel(maps of head h)                 (the policy)
//     O_h = (1 - lambda_init?) * subln(O_h)        (DIFF family; the factor for diff, shared_diff)
//   y = concat_h(O_h) out_proj^T
//
// KV cache (docs/math.md §6): the rotated K and V rows of the new tokens are written to the layer's cache
// (layers/kv_cache_view.hpp) after its `length` earlier rows, the heads read all S = length + N
// rows (the kernels' S >= N form, causal offset S - N), positions start at `length` and DINT heads
// pass their per-head DintHistory. Without a cache the same path runs over a view of the scratch
// with length 0: prefill, decode and the plain forward are one code path. The new keys and values are
// projected and rotated in the scratch, then stored in the cache, converted when it keeps them in
// half precision (KvPrecision); the kernels widen the cached rows tile by tile.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_call_checks.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_heads.hpp"
#include "diffattn/layers/attention_scratch.hpp"
#include "diffattn/layers/attention_weights.hpp"
#include "diffattn/layers/head_parallel.hpp"
#include "diffattn/layers/kv_cache_view.hpp"
#include "diffattn/layers/lambda.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/parameters.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/shared_diff.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <string>

namespace diffattn {

template <typename T>
class MultiHeadAttention {
public:
    /// A module with all-zero projections (norm weights one) for this geometry, the projections
    /// stored in `weights` (stored_format); validates the geometry.
    explicit MultiHeadAttention(const AttentionConfig& config, WeightFormat weights = WeightFormat::f32)
        : config_(config) {
        config_.validate();
        kv_group_ = detail::heads_sharing_kv(config_);
        weights_ = AttentionWeights<T>(config_, weights);
    }

    const AttentionConfig& config() const { return config_; }
    const AttentionWeights<T>& weights() const { return weights_; }
    /// Mutable weights. Changing the Shared DIFF factors after merge() needs another merge().
    AttentionWeights<T>& weights() { return weights_; }

    /// The model-file tensors of this module under `prefix` (e.g. "model.layers.3.self_attn."),
    /// in the order of docs/math.md §3, each viewing its storage here. Handing out writable views drops a
    /// Shared DIFF merge (the factors may change).
    void collect_parameters(const std::string& prefix, ParameterList<T>& list) {
        unmerge();
        AttentionWeights<T>::list_tensors(config_, prefix, list, &weights_);
    }

    /// Number of parameters (AttentionConfig::parameter_count; merged Shared DIFF weights are a
    /// cache of the factors and not counted).
    Index parameter_count() const { return config_.parameter_count(); }

    /// Shared DIFF: precompute the full per-map projection matrices q_proj, k_proj [2H d x D]
    /// (W_t = base + b_t a_t^T), so forward() projects with one GEMM each instead of through the
    /// factors. No-op for other kinds.
    void merge() {
        if (config_.kind != AttentionKind::shared_diff) return;
        weights_.q_proj = LinearWeight<T>();  // f32: the merge writes the matrices
        weights_.k_proj = LinearWeight<T>();
        weights_.shared.merge_into(weights_.q_proj.dense(), weights_.k_proj.dense());
        merged_ = true;
    }
    /// Shared DIFF: go back to projecting through the factors (drops the merged matrices).
    void unmerge() {
        if (config_.kind != AttentionKind::shared_diff) return;
        weights_.q_proj = LinearWeight<T>();
        weights_.k_proj = LinearWeight<T>();
        merged_ = false;
    }
    bool merged() const { return merged_; }

    /// The layer's lambda (docs/math.md §2.5) for the DIFF family; 0 for softmax and diff_v2.
    /// OptionError naming the layer when its weights give no finite lambda (DiffLambda::checked_value).
    double lambda() const {
        if (!config_.has_lambda()) return 0.0;
        return weights_.lambda.template checked_value<T>(config_.lambda_init(), config_.depth);
    }

    /// y = Attention(x) for one sequence of N tokens at positions 0 .. N-1.
    ///   x [N x D] (the module input, after input_layernorm), out [N x D] (caller-owned, must not
    ///   alias x); scratch built for this geometry with max_len >= N and workspaces for at least
    ///   context.threads threads (projections and heads run on up to that many; one without a
    ///   context). Const: any number of threads may run forward() on one module at once, each with
    ///   its own scratch.
    void forward(const ConstMatrixRef<T>& x, MatrixRef<T> out, AttentionScratch<T>& scratch,
                 const ExecutionContext& context = {}) const {
        forward(x, out, scratch, context, static_cast<KvCacheView<T>*>(nullptr));
    }

    /// As above for N new tokens after the `cache->length` tokens of a KV cache (docs/math.md §6): their
    /// positions are length .. length + N - 1, their rotated keys and values are written to cache
    /// rows [length, length + N), and they attend to all length + N cached rows. `cache` null is
    /// the plain forward (an empty cache over the scratch). The cache's length is not advanced
    /// (its owner does that after the last layer). Needs a causal module (not "causal": false, not
    /// DINT global_mean: OptionError) and room for N more rows (ShapeError). The first call with a
    /// cache longer than the scratch's max_len grows the scratch's kernel workspaces once.
    /// S: the scalar the cache stores keys and values in (KvScalar); the new rows are rounded to it.
    template <typename S>
    void forward(const ConstMatrixRef<T>& x, MatrixRef<T> out, AttentionScratch<T>& scratch,
                 const ExecutionContext& context, KvCacheView<T, S>* cache) const {
        const Index n = x.rows();
        if (cache == nullptr) {  // this call's keys and values live in the scratch: an empty cache, no history
            forward_sequences(x, out, scratch, context, 1,
                              [&](Index) { return SequenceRows<T>{scratch_cache(scratch), 0, n}; }, false);
        } else {
            forward_sequences(x, out, scratch, context, 1,
                              [&](Index) { return SequenceRows<T, S>{*cache, 0, n}; }, true);
        }
    }

    /// A batched step (docs/math.md §6): the rows of x continue `count` sequences; sequence(s)
    /// returns the SequenceRows of sequence s (its cache view and its rows, which follow those of
    /// sequence s - 1; every cache stores the same scalar S). The projections and the output
    /// projection run once over all rows (the weights are read once for the whole batch); rotary,
    /// the cache writes and the heads run per sequence, the heads of all sequences together on the
    /// context's threads. Each sequence gets what forward(its rows, ..., its cache) gives it.
    /// ShapeError if the rows do not tile x, two sequences share a cache, or a cache has no room; as
    /// forward() otherwise. A refused call changes no cache.
    template <typename Sequences>
    void forward(const ConstMatrixRef<T>& x, MatrixRef<T> out, AttentionScratch<T>& scratch,
                 const ExecutionContext& context, Index count, const Sequences& sequence) const {
        forward_sequences(x, out, scratch, context, count, sequence, true);
    }

private:
    /// The cache view over the scratch's own K and V rows: the plain forward, positions from 0.
    KvCacheView<T> scratch_cache(AttentionScratch<T>& scratch) const {
        return KvCacheView<T>{HeadBlocks<T>::columns(scratch.k, config_.n_key_maps()),
                              HeadBlocks<T>::columns(scratch.v, config_.n_value_heads()), 0, nullptr, &scratch.rotary};
    }

    /// The one forward path: prefill, decode, batched decode and the plain forward (cached false:
    /// one sequence over scratch_cache) differ only in the caches the sequences hold.
    template <typename Sequences>
    void forward_sequences(const ConstMatrixRef<T>& x, MatrixRef<T> out, AttentionScratch<T>& scratch,
                           const ExecutionContext& context, Index count, const Sequences& sequence,
                           bool cached) const {
        using Rows = decltype(sequence(Index(0)));  // SequenceRows<T, S>
        using S = typename Rows::Stored;
        const Index n = x.rows();
        detail::check_attention_call(config_, config_.kind == AttentionKind::shared_diff && !merged_, x, out, scratch);
        detail::check_attention_sequences(config_, count, sequence, n, cached);
        require<OptionError>(!cached || scratch.kernels == nullptr, detail::kAttentionForward,
                             ": a KV cache cannot be combined with "
                             "the scratch's replacement kernels (a slice of a sequence)");
        require<OptionError>(context.compute == Compute::scalar || scratch.kernels == nullptr,
                             detail::kAttentionForward, ": compute ", to_string(context.compute),
                             " cannot be combined with the scratch's replacement kernels, which run their own products");
        if (n == 0) return;
        auto q = scratch.q.topRows(n);          // [N x q_width]
        auto k = scratch.k.topRows(n);          // [N x k_width] this call's keys
        auto v = scratch.v.topRows(n);          // [N x v_width] this call's values
        auto heads = scratch.heads.topRows(n);  // [N x out_width]

        // 1. Projections of all rows (docs/math.md §3.1-3.4), in one parallel region.
        if (config_.kind == AttentionKind::shared_diff && !merged_) {
            weights_.shared.project(x, scratch.shared_base.topRows(n), scratch.shared_xa.topRows(n), q, k, context);
            linear<T>(x, weights_.v_proj, v, context);
        } else if (config_.kind == AttentionKind::diff_v2) {  // and the per-token gates
            auto gate = scratch.lambda_gate.topRows(n);  // [N x H]
            linear_each<T>(x, {{weights_.q_proj, q}, {weights_.k_proj, k}, {weights_.v_proj, v},
                               {weights_.lambda_proj, gate}}, context);
            gate.array() = T(1) / (T(1) + (-gate.array()).exp());  // sigmoid
        } else {
            linear_each<T>(x, {{weights_.q_proj, q}, {weights_.k_proj, k}, {weights_.v_proj, v}}, context);
        }

        // 2. Per sequence: rotary on every query and key map (docs/math.md §3.1, the family's style
        //    and frequencies), positions from its cache length (or the slice's first row); its keys
        //    and values go to its cache rows [length, length + rows).
        Index capacity = 0;
        for (Index s = 0; s < count; ++s) {
            Rows rows_of_s = sequence(s);
            KvCacheView<T, S>& kv = rows_of_s.cache;
            const Index first = rows_of_s.first, rows = rows_of_s.rows;
            const Index position = scratch.kernels != nullptr ? scratch.kernels->first_position() : kv.length;
            kv.rotary->apply(q.middleRows(first, rows), position);
            kv.rotary->apply(k.middleRows(first, rows), position);
            // The plain forward's keys are already where its heads read them.
            if (!std::is_same_v<S, T> || static_cast<const void*>(kv.keys.data) != k.data()) {
                const Index key_row = kv.keys.write_rows(kv.length, k.middleRows(first, rows));
                const Index value_row = kv.values.write_rows(kv.length, v.middleRows(first, rows));
                if (key_row >= 0 || value_row >= 0) {  // an entry beyond f16's range (docs/kv_cache.md)
                    detail::refuse_cache_overflow<S>(config_, kv.length, key_row, value_row);
                }
            }
            capacity = std::max(capacity, kv.capacity());
        }
        // The kernels read S = length + N keys (DINT's column sums): room for the longest cache, once.
        if (cached) scratch.reserve_keys(capacity);

        // 3. The heads of every sequence: kernel, then subln and the output factor.
        run_heads(count, sequence, scratch, context);

        // 4. Output projection of the concatenated heads of all rows.
        linear<T>(heads, weights_.out_proj, out, context);
    }

    /// What a head of sequence s (its rows from `first`) sees: its queries, the S = length + rows
    /// keys and values of its cache, its output rows.
    /// heads_per_task: HeadContext::heads_per_task (g > 1 only for a sequence of one row); compute:
    /// the kernels' products (ExecutionContext::compute).
    template <typename S>
    HeadContext<T, S> head_context(const SequenceRows<T, S>& sequence, AttentionScratch<T>& scratch,
                                   Index heads_per_task, Compute compute) const {
        const Index first = sequence.first, rows = sequence.rows, seq_len_kv = sequence.cache.length + rows;
        const bool v2 = config_.kind == AttentionKind::diff_v2;
        auto heads = scratch.heads.middleRows(first, rows);
        AttentionOptions options;
        // One query row sees every key (causal offset S - 1), so a task's g rows, one per head,
        // take no mask.
        options.mask = heads_per_task > 1 ? MaskKind::none : config_.mask();
        options.compute = compute;  // the kernels' products (calls of few rows stay in T)
        return HeadContext<T, S>{config_,
                              scratch.q.middleRows(first, rows),
                              sequence.cache.keys.as_const(),
                              sequence.cache.values.as_const(),
                              seq_len_kv,
                              heads,
                              v2 ? MatrixRef<T>(scratch.second.middleRows(first, rows)) : MatrixRef<T>(heads),
                              v2 ? ConstMatrixRef<T>(scratch.lambda_gate.middleRows(first, rows))
                                 : ConstMatrixRef<T>(heads),
                              static_cast<T>(lambda()),
                              options,
                              sequence.cache.dint_histories,
                              scratch.kernels,
                              heads_per_task};
    }

    /// Every head of every sequence, one task each (docs/math.md §3): the policy of the module's
    /// kind (the one switch from the runtime kind to its compile-time policy), then subln and the
    /// output factor.
    template <typename Sequences>
    void run_heads(Index count, const Sequences& sequence, AttentionScratch<T>& scratch,
                   const ExecutionContext& context) const {
        switch (config_.kind) {
            case AttentionKind::softmax: run_heads<SoftmaxHeads>(count, sequence, scratch, context); break;
            case AttentionKind::diff:
            case AttentionKind::shared_diff: run_heads<DiffHeads>(count, sequence, scratch, context); break;
            case AttentionKind::dint: run_heads<DintHeads>(count, sequence, scratch, context); break;
            case AttentionKind::diff_v2: run_heads<DiffV2Heads>(count, sequence, scratch, context); break;
            case AttentionKind::gda: run_heads<GdaHeads>(count, sequence, scratch, context); break;
        }
    }

    template <typename Policy, typename Sequences>
    void run_heads(Index count, const Sequences& sequence, AttentionScratch<T>& scratch,
                   const ExecutionContext& context) const {
        const Index n_heads = config_.n_heads;
        const bool subln = config_.has_subln();
        const T output_scale = static_cast<T>(config_.output_scale());
        double work = 0;  // flops, as detail::heads_work counts them
        Index most_rows = 0, fewest_keys = std::numeric_limits<Index>::max();
        for (Index s = 0; s < count; ++s) {
            const auto rows_of_s = sequence(s);
            const Index rows = rows_of_s.rows, keys = rows_of_s.cache.length + rows;
            fewest_keys = std::min(fewest_keys, keys);
            work += detail::heads_work(config_, rows, keys, sizeof(typename decltype(rows_of_s)::Stored));
            most_rows = std::max(most_rows, rows);
        }
        // Replacement kernels may communicate: their calls come in the same order on every rank.
        ExecutionContext heads_context = context;
        if (scratch.kernels != nullptr) heads_context.threads = 1;
        // A step of one row per sequence runs the heads that share keys and values (GQA) as the
        // rows of one kernel call: the group reads them once. (The kernels take no more query
        // rows than keys.)
        const bool grouped = most_rows == 1 && fewest_keys >= kv_group_ && scratch.kernels == nullptr;
        const Index group = grouped ? kv_group_ : 1;
        // gda: a task is a group of heads (GdaHeads), whose kernel splits its keys over the threads
        // only when it stacks them (a step of one row); else its heads go to the threads.
        const bool gda = config_.kind == AttentionKind::gda;
        const Index written = gda ? config_.gda_group_ratio : 1;  // heads whose outputs task h writes
        const Index task_rows = gda && !detail::gda_stacks_signal_heads(most_rows, written)
                                    ? std::max(most_rows, kMinPackedRows)
                                    : most_rows * group;
        const Index tasks = n_heads / (group * written);  // per sequence
        detail::for_each_head(count * tasks, task_rows, work, heads_context, scratch.workspaces,
                              [&](Index task, AttentionWorkspace<T>& workspace, int kernel_threads) {
                                  const Index h = task % tasks;
                                  const auto call = head_context(sequence(task / tasks), scratch, group, context.compute);
                                  Policy::run(call, h, workspace, kernel_threads);
                                  for (Index i = 0; subln && i < written; ++i) {
                                      auto head = call.output(h * written + i);  // [rows x 2d], a row per head
                                      weights_.subln.apply(head, head, output_scale);
                                  }
                              });
    }

    AttentionConfig config_;
    Index kv_group_ = 1;  // detail::heads_sharing_kv: heads a one-row step runs as one call
    AttentionWeights<T> weights_;
    bool merged_ = false;  // shared_diff: q_proj / k_proj hold the merged factors
};

}  // namespace diffattn
