// The per-head step of the multi-head modules, one small policy per attention kind (docs/math.md §3).
//
// Everything around the heads (projections, rotary, subln, output projection) is shared by all
// kinds and lives in MultiHeadAttention; a policy only says which single-head kernel turns the
// head's maps into its output columns:
//   SoftmaxHeads  kernel 2.1 on map h                                   (softmax)
//   DiffHeads     kernel 2.2 on maps 2h, 2h+1 with the layer's lambda    (diff, shared_diff)
//   DintHeads     kernel 2.3, same maps, plus the integral               (dint)
//   DiffV2Heads   two kernels 2.1, O[2h] - sigmoid(l[n, h]) O[2h+1]       (diff_v2)
//   GdaHeads      kernel §9 on a group: gr signal maps, one noise map     (gda; a task per group)
// Heads are blocks of the call's buffers (queries: column blocks; keys and values: HeadBlocks,
// column blocks or a KV cache's head-major blocks, its keys in blocks of 16): no head is ever
// copied. Keys and values may be stored in a narrower scalar S (a half-precision KV cache,
// docs/math.md §6): the kernels then widen them tile by tile.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/attention_kernels.hpp"
#include "diffattn/layers/head_blocks.hpp"

#include <type_traits>

namespace diffattn {

/// Views of one call's buffers, as a head sees them. Shared read-only by all head tasks; each
/// task writes only its own columns of `heads` and `second`. S: the scalar of k and v.
template <typename T, typename S = T>
struct HeadContext {
    const AttentionConfig& config;
    ConstMatrixRef<T> q;            ///< [N x q_width]   rotated queries
    HeadBlocks<const S> k;          ///< key maps of [S x d] rotated keys, S >= N (S > N with a KV cache)
    HeadBlocks<const S> v;          ///< value heads of [S x dv]
    Index kv_rows;                  ///< S: the keys and values a head attends over
    mutable MatrixRef<T> heads;     ///< [N x out_width] head outputs (written per head)
    mutable MatrixRef<T> second;    ///< diff_v2: [N x out_width] O[2h+1] (written per head); else unused
    ConstMatrixRef<T> lambda_gate;  ///< diff_v2: [N x H] sigmoid(l); else unused
    T lambda;                       ///< DIFF family: the layer's lambda (docs/math.md §2.5)
    AttentionOptions options;       ///< mask (causal / none), default scale 1/sqrt(d)
    DintHistory<T>* dint_histories; ///< dint with a KV cache: [H] per-head histories; nullptr without
    const AttentionKernels<T>* kernels;  ///< replaces the single-process kernels; nullptr: use them (always
                                         ///< with S != T: a KV cache excludes replacement kernels)
    Index heads_per_task = 1;       ///< g: a task's heads. 1: task h is head h. g > 1 (a call of one
                                    ///< row, heads_sharing_kv): task h is heads g h .. g h + g - 1,
                                    ///< one per row of its kernel call, which reads their keys once

    /// The call's replacement kernels, or nullptr (also whenever keys and values are not in T).
    const AttentionKernels<T>* replacement() const {
        if constexpr (std::is_same_v<S, T>) {
            return kernels;
        } else {
            return nullptr;
        }
    }

    Index d() const { return config.head_dim(); }
    Index dv() const { return config.value_dim(); }
    /// Map m of task h's queries: [N x d] of head h, or [g x d], head g h + r in row r.
    auto query(Index h, Index m) const {
        const Index step = (config.query_map(1, m) - config.query_map(0, m)) * d();  // from a head to the next
        return task_rows(q, config.query_map(h * heads_per_task, m) * d(), d(), step);
    }
    /// Key map used by map m of task h (every head of a task reads the same): [S x d].
    auto key(Index h, Index m) const { return k.keys(config.key_map(h * heads_per_task, m), kv_rows); }
    /// Value head used by map m of task h: [S x dv].
    auto value(Index h, Index m) const { return v.head(config.value_head(h * heads_per_task, m), 0, kv_rows); }
    /// Output columns of task h: [N x dv] of head h, or [g x dv], head g h + r in row r.
    auto output(Index h) const { return task_rows(heads, h * heads_per_task * dv(), dv(), dv()); }
    /// diff_v2: where O[2h+1] goes, as output(h).
    auto second_output(Index h) const { return task_rows(second, h * heads_per_task * dv(), dv(), dv()); }
    /// diff_v2: sigmoid(l) of task h's rows: [N] of head h, or [g], head g h + r in row r.
    auto gate(Index h) const {
        const bool grouped = heads_per_task > 1;
        return Eigen::Map<const Vector<T>, 0, Eigen::InnerStride<>>(
            lambda_gate.data() + h * heads_per_task, grouped ? heads_per_task : lambda_gate.rows(),
            Eigen::InnerStride<>(grouped ? 1 : lambda_gate.outerStride()));
    }
    DintHistory<T>* dint_history(Index h) const { return dint_histories ? dint_histories + h : nullptr; }
    /// The kernel options of a head whose kernel may use `threads` threads.
    AttentionOptions options_on(int threads) const {
        AttentionOptions o = options;
        o.threads = threads;
        return o;
    }

private:
    /// `width` columns of m from `first`: the call's rows, or with g > 1 (one row holding every
    /// head) g blocks `step` columns apart, stacked as rows.
    template <typename M>
    auto task_rows(M& m, Index first, Index width, Index step) const {
        using Scalar = std::remove_pointer_t<decltype(m.data())>;
        using Rows = std::conditional_t<std::is_const_v<Scalar>, const RowMatrix<T>, RowMatrix<T>>;
        const bool grouped = heads_per_task > 1;
        return Eigen::Map<Rows, 0, Eigen::OuterStride<>>(m.data() + first, grouped ? heads_per_task : m.rows(), width,
                                                          Eigen::OuterStride<>(grouped ? step : m.outerStride()));
    }
};

/// Kernel 2.1 on map m of head h into `out` on `threads` threads, through the call's kernels if it has them.
template <typename T, typename S, typename Out>
void run_softmax(const HeadContext<T, S>& c, Index m, Out&& out, Index h, AttentionWorkspace<T>& ws, int threads) {
    if (const AttentionKernels<T>* kernels = c.replacement()) {
        if constexpr (std::is_same_v<S, T>) {
            kernels->softmax(c.query(h, m), c.key(h, m).row_major(), c.value(h, m), out, c.options_on(threads), ws);
        }
    } else {
        detail::softmax_attention<T, S>(c.query(h, m), c.key(h, m), c.value(h, m), out, c.options_on(threads), &ws);
    }
}

/// softmax (docs/math.md §3.2): O_h = softmax(s Q_h K_g^T + M) V_g, g = h / rep.
struct SoftmaxHeads {
    template <typename T, typename S>
    static void run(const HeadContext<T, S>& c, Index h, AttentionWorkspace<T>& ws, int threads) {
        run_softmax(c, 0, c.output(h), h, ws, threads);
    }
};

/// diff and shared_diff (docs/math.md §2.2, 3.1, 3.3): O_h = (A1 - lambda A2) V_g.
struct DiffHeads {
    template <typename T, typename S>
    static void run(const HeadContext<T, S>& c, Index h, AttentionWorkspace<T>& ws, int threads) {
        if (const AttentionKernels<T>* kernels = c.replacement()) {
            if constexpr (std::is_same_v<S, T>) {
                kernels->diff(c.query(h, 0), c.key(h, 0).row_major(), c.query(h, 1), c.key(h, 1).row_major(),
                              c.value(h, 0), c.lambda, c.output(h), c.options_on(threads), ws);
            }
            return;
        }
        detail::diff_attention<T, S>(c.query(h, 0), c.key(h, 0), c.query(h, 1), c.key(h, 1), c.value(h, 0), c.lambda,
                       c.output(h), c.options_on(threads), &ws);
    }
};

/// dint (docs/math.md §2.3, 3.1): O_h = (A1 - lambda A2 + lambda I) V_g.
struct DintHeads {
    template <typename T, typename S>
    static void run(const HeadContext<T, S>& c, Index h, AttentionWorkspace<T>& ws, int threads) {
        if (const AttentionKernels<T>* kernels = c.replacement()) {
            if constexpr (std::is_same_v<S, T>) {
                kernels->dint(c.query(h, 0), c.key(h, 0).row_major(), c.query(h, 1), c.key(h, 1).row_major(),
                              c.value(h, 0), c.lambda, c.config.dint_integral, c.output(h), c.options_on(threads), ws);
            }
            return;
        }
        detail::dint_attention<T, S>(c.query(h, 0), c.key(h, 0), c.query(h, 1), c.key(h, 1), c.value(h, 0), c.lambda,
                       c.config.dint_integral, c.output(h), c.options_on(threads), c.dint_history(h), &ws);
    }
};

/// diff_v2 (docs/math.md §3.4): O_h = O[2h] - sigmoid(l[:, h]) O[2h+1], each O[t] an ordinary softmax
/// attention of query head t over kv head t / (2H / Hkv).
struct DiffV2Heads {
    template <typename T, typename S>
    static void run(const HeadContext<T, S>& c, Index h, AttentionWorkspace<T>& ws, int threads) {
        auto out = c.output(h);           // [N x d]  O[2h], then the head's output
        auto second = c.second_output(h); // [N x d]  O[2h+1] (scratch of calls of many rows)
        if (c.replacement() == nullptr && c.config.value_head(h, 0) == c.config.value_head(h, 1)) {
            // Both query heads read one kv head: one pass over its values for the two maps.
            detail::gated_softmax_difference<T, S>(c.query(h, 0), c.key(h, 0), c.query(h, 1), c.key(h, 1),
                                                   c.value(h, 0), c.gate(h), out, second, c.options_on(threads), &ws);
        } else {
            run_softmax(c, 0, out, h, ws, threads);
            run_softmax(c, 1, second, h, ws, threads);
            out.noalias() -= c.gate(h).asDiagonal() * second;
        }
    }
};

/// gda (docs/math.md §9): task g is noise group g, its signal heads h = g gr .. g gr + gr - 1:
/// O_h = A1_h V - lambda A2_g V over the group's kv pair, A2_g V once for the group
/// (kernels/gda_attention.hpp). Replacement kernels (a slice of a sequence, docs/distributed.md)
/// have no GDA call: each signal head is then a DIFF head with the group's noise map as map 2,
/// which computes A2_g V once per head instead (the same output: docs/math.md §9).
struct GdaHeads {
    template <typename T, typename S>
    static void run(const HeadContext<T, S>& c, Index g, AttentionWorkspace<T>& ws, int threads) {
        const Index gr = c.config.gda_group_ratio, d = c.d(), dv = c.dv(), first = g * gr;
        const auto signal = c.q.middleCols(c.config.query_map(first, 0) * d, gr * d);  // [N x gr d]
        const auto noise = c.q.middleCols(c.config.query_map(first, 1) * d, d);        // [N x d]
        auto out = c.heads.middleCols(first * dv, gr * dv);                            // [N x gr dv]
        if (const AttentionKernels<T>* kernels = c.replacement()) {
            if constexpr (std::is_same_v<S, T>) {
                for (Index i = 0; i < gr; ++i) {
                    kernels->diff(signal.middleCols(i * d, d), c.key(first, 0).row_major(), noise,
                                  c.key(first, 1).row_major(), c.value(first, 0), c.lambda,
                                  out.middleCols(i * dv, dv), c.options_on(threads), ws);
                }
            }
            return;
        }
        detail::gda_attention<T, S>(signal, c.key(first, 0), noise, c.key(first, 1), c.value(first, 0), c.lambda, out,
                                    c.options_on(threads), &ws);
    }
};

}  // namespace diffattn
