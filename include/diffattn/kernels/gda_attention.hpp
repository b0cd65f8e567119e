// Grouped differential attention (docs/math.md §9): a group of gr signal heads and one noise head
// over the same keys and values,
//     O_i = (A1_i - lambda A2) V = A1_i V - lambda A2 V,   i < gr,
// so A2 V, the noise head's output, is computed once per group and subtracted from the gr outputs
// (the linearity DIFF relies on, docs/math.md §2.2). A thin composition on the tiled core: per
// query group the noise map runs once and stays in the group's scratch while each signal head
// runs as an ordinary map beside it (attend_maps), its rows written as O1_i - lambda O2.
// A decode step (one query row) stacks its gr signal heads as the gr rows of one map instead and
// takes the two passes of diff_few_rows.hpp: K1 and K2 read once each, V once for all gr outputs,
// the keys split over the threads.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/diff_few_rows.hpp"
#include "diffattn/kernels/key_split.hpp"

#include <array>

namespace diffattn {
namespace detail {

/// Whether a GDA call of `seq_len_q` query rows and group ratio gr stacks its signal heads as the
/// gr rows of one map (gda_few_rows, keys split over the threads): a decode step of one row, with
/// gr < kMinPackedRows (the few-row passes' row limit). Otherwise each signal head is a map of its
/// own, on the query groups' threads; a call of 2 .. kMinPackedRows - 1 rows is one group, on one.
inline bool gda_stacks_signal_heads(Index seq_len_q, Index gr) { return seq_len_q == 1 && gr < kMinPackedRows; }

/// The probability rows a stacked call keeps (AttentionWorkspace::reserve's kept_rows): gr signal
/// rows, then the noise row.
inline Index gda_kept_rows(Index gr) { return gr + 1; }

/// The checks of a GDA call (check_gda_shapes, then out [N x gr dv] apart from every input, the
/// thread count, the options against Q2 and K2). Returns the options and sets gr.
template <typename T, typename S>
ResolvedOptions check_gda(const char* function, const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1,
                          const ConstMatrixRef<T>& q2, const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, T lambda,
                          const MatrixRef<T>& out, const AttentionOptions& options, Index& gr) {
    gr = check_gda_shapes(function, q1, k1, q2, k2, v, static_cast<double>(lambda));
    require_shape(function, named("out", out), q2.rows(), gr * v.cols());
    require_no_alias(function, "out", out, "Q1", q1);
    require_no_alias(function, "out", out, "K1", k1);
    require_no_alias(function, "out", out, "Q2", q2);
    require_no_alias(function, "out", out, "K2", k2);
    require_no_alias(function, "out", out, "V", v);
    require_thread_count(function, options.threads);
    ResolvedOptions resolved = resolve_options<T>(function, options, "Q2", q2, "K2", k2);
    resolved.threads = available_threads(options.threads);
    resolved.products = resolve_products<T>(function, options.compute);
    return resolved;
}

/// out [gr x dv] = (A1 - lambda A2) V for the one query row of a decode step: `signal` holds the gr
/// signal heads as the rows of map 1 ([gr x d] queries over K1), `noise` the noise head as the one
/// row of map 2, whose weights serve every row when V is multiplied (KeptMap::broadcast). The passes
/// of diff_few_rows: each map's logits kept over its own keys (one stream each), then V once for
/// all the rows, the keys of both passes split over `threads` threads. Under either mask one query
/// row sees the same keys from every stacked row (the causal offset is S - 1), so the rows share
/// the call's mask.
template <typename T, typename S, typename Mask>
void gda_few_rows(const DotProductLogits<T, S>& signal, const DotProductLogits<T, S>& noise, const Mask& mask,
                  const ConstMatrixRef<S>& v, T lambda, Index gr, int threads, AttentionWorkspace<T>& ws,
                  BlockScratch<T>& scratch, MatrixRef<T>& out) {
    constexpr Index tile = kFewRowsKeyTileOf<S>;
    KeptProbabilities<T> kept_signal = ws.kept_probabilities_from(0, gr, v.rows(), tile);
    KeptProbabilities<T> kept_noise = ws.kept_probabilities_from(gr, 1, v.rows(), tile);
    using Map = MapToKeep<T, const DotProductLogits<T, S>>;
    fold_key_runs<2, S>(mask, 0, gr, threads, ws, scratch, {&scratch.states[0], &scratch.states[1]},
                        [&](KeyRange keys, BlockScratch<T>& mine, const auto& states) {
                            // Each run keeps its own keys' columns (one stream per map).
                            keep_map_logits<S>(std::array<Map, 1>{Map{signal, kept_signal, *states[0]}}, mask, 0, gr,
                                               mine, keys);
                            keep_map_logits<S>(std::array<Map, 1>{Map{noise, kept_noise, *states[1]}}, mask, 0, 1,
                                               mine, keys);
                        });
    const std::array<KeptMap<T>, 2> maps{KeptMap<T>{kept_signal, scratch.states[0], T(1), {}},
                                         KeptMap<T>{kept_noise, scratch.states[1], -lambda, {}, gr}};
    multiply_values_once(maps, mask, gr, v, threads, ws, scratch, out);
}

template <typename T, typename S = T>
void gda_attention(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                   const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, T lambda, MatrixRef<T> out,
                   const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    Index gr = 0;
    const ResolvedOptions resolved = check_gda<T, S>("gda_attention", q1, k1, q2, k2, v, lambda, out, options, gr);
    const Index n = q2.rows(), d = q2.cols(), dv = v.cols();
    const bool stacked = gda_stacks_signal_heads(n, gr);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws = workspace != nullptr ? *workspace : local;
    ws.reserve(n, k2.rows(), d, dv, resolved.threads, stacked ? gda_kept_rows(gr) : 0, compute_of(resolved.products));
    const T scale = T(resolved.scale);
    const DotProductLogits<T, S> noise(q2, k2, scale);
    dispatch_mask(resolved.mask, n, k2.rows(), resolved.valid_len, [&](const auto& mask) {
        if (stacked) {  // one row: its gr signal heads, side by side, become the gr rows of map 1
            const ConstMatrixRef<T> signal_rows(
                Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>(q1.data(), gr, d, Eigen::OuterStride<>(d)));
            MatrixRef<T> out_rows(
                Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>(out.data(), gr, dv, Eigen::OuterStride<>(dv)));
            const DotProductLogits<T, S> signal(signal_rows, k1, scale);
            gda_few_rows(signal, noise, mask, v, lambda, gr, resolved.threads, ws, ws.block(0), out_rows);
            return;
        }
        for_each_query_group(n, resolved.threads, mask, ws, [&](Index q_begin, Index q_rows, BlockScratch<T>& scratch) {
            OnlineSoftmaxState<T>& signal_state = scratch.states[0];
            OnlineSoftmaxState<T>& noise_state = scratch.states[1];  // O2 = A2 V of the group's rows, kept
            attend_maps<T>(std::tie(noise), mask, q_begin, q_rows, v, scratch, {&noise_state});
            for (Index i = 0; i < gr; ++i) {
                const ConstMatrixRef<T> queries(q1.middleCols(i * d, d));
                const DotProductLogits<T, S> signal(queries, k1, scale);
                attend_maps<T>(std::tie(signal), mask, q_begin, q_rows, v, scratch, {&signal_state});
                MatrixRef<T> head(out.middleCols(i * dv, dv));
                write_differential_rows(signal_state, noise_state, lambda, q_begin, 0, q_rows, head);
            }
        });
    });
}

}  // namespace detail

/// Grouped differential attention of one group (docs/math.md §9): gr signal heads and one noise
/// head over one value matrix, out_i = (softmax(s Q1_i K1^T + M) - lambda softmax(s Q2 K2^T + M)) V.
///   q1 [N x gr d]: signal head i at columns [i d, (i+1) d); q2 [N x d] the noise head;
///   k1, k2 [S x d], S >= N; v [S x dv]; out [N x gr dv]: head i at columns [i dv, (i+1) dv).
///   Heads may be column blocks of wider row-major matrices; out must not alias the inputs.
/// Throws ShapeError / OptionError naming the argument and shapes.
template <int = 0>  // instantiated only where called (keeps every other TU cheap to compile)
inline void gda_attention(const ConstMatrixRef<float>& q1, const ConstMatrixRef<float>& k1,
                          const ConstMatrixRef<float>& q2, const ConstMatrixRef<float>& k2,
                          const ConstMatrixRef<float>& v, float lambda, MatrixRef<float> out,
                          const AttentionOptions& options = {}, AttentionWorkspace<float>* workspace = nullptr) {
    detail::gda_attention<float>(q1, k1, q2, k2, v, lambda, out, options, workspace);
}
template <int = 0>
inline void gda_attention(const ConstMatrixRef<double>& q1, const ConstMatrixRef<double>& k1,
                          const ConstMatrixRef<double>& q2, const ConstMatrixRef<double>& k2,
                          const ConstMatrixRef<double>& v, double lambda, MatrixRef<double> out,
                          const AttentionOptions& options = {}, AttentionWorkspace<double>* workspace = nullptr) {
    detail::gda_attention<double>(q1, k1, q2, k2, v, lambda, out, options, workspace);
}

}  // namespace diffattn
