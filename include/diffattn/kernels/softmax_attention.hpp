// Softmax attention (docs/math.md §2.1): O = softmax(s Q K^T + M) V, computed tile by tile.
#pragma once

#include "diffattn/kernels/diff_few_rows.hpp"
#include "diffattn/kernels/key_split.hpp"

namespace diffattn {
namespace detail {

template <typename T, typename S = T>
void softmax_attention(const ConstMatrixRef<T>& q, const KeyOperand<S>& k, const ConstMatrixRef<S>& v,
                       MatrixRef<T> out, const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_attention<T, S>("softmax_attention", "Q", "K", "V", q, k, v, out, options);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, q.rows(), k.rows(), q.cols(), v.cols(), resolved);
    const DotProductLogits<T, S> logits(q, k, T(resolved.scale));
    const int key_threads = key_split_threads(q.rows(), resolved.threads);
    dispatch_mask(resolved.mask, q.rows(), k.rows(), resolved.valid_len, [&](const auto& mask) {
        for_each_query_group(q.rows(), resolved.threads, mask, ws,
                             [&](Index q_begin, Index q_rows, BlockScratch<T>& scratch) {
                                 if (q_begin == 0 && q_rows < kMinPackedRows) {  // a call of few rows
                                     return softmax_few_rows(logits, mask, v, q_rows, key_threads, ws, scratch, out);
                                 }
                                 OnlineSoftmaxState<T>& state = scratch.states[0];
                                 attend_maps<T>(std::tie(logits), mask, q_begin, q_rows, v, scratch, {&state});
                                 state.normalize_into(out.middleRows(q_begin, q_rows));
                             });
    });
}

/// Two softmax attentions over the same values (docs/math.md §2.1 twice): out1 = softmax(s Q1 K1^T +
/// M) V and out2 = softmax(s Q2 K2^T + M) V, each value tile read once for both maps (attend_maps), as
/// DIFF V2's two query heads of one kv head need (docs/math.md §3.4); a call of fewer than
/// kMinPackedRows rows runs each map as softmax_attention does (softmax_few_rows), V once per map.
/// Each output equals that of softmax_attention on its map, bit for bit: the maps fold their tiles
/// exactly as alone.
/// The checks of a pair of maps over one V into out1 and out2 (softmax_attention_pair,
/// gated_softmax_difference): each map's, Q2 ~ Q1, K2 ~ K1, and out2 apart from out1.
template <typename T, typename S>
ResolvedOptions check_pair(const char* function, const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1,
                           const ConstMatrixRef<T>& q2, const KeyOperand<S>& k2, const ConstMatrixRef<S>& v,
                           const MatrixRef<T>& out1, const MatrixRef<T>& out2, const AttentionOptions& options) {
    const ResolvedOptions resolved = check_attention<T, S>(function, "Q1", "K1", "V", q1, k1, v, out1, options);
    check_attention<T, S>(function, "Q2", "K2", "V", q2, k2, v, out2, options);
    require_same_shape(function, named("Q2", q2), named("Q1", q1));
    require_same_shape(function, named("K2", k2), named("K1", k1));
    require_no_alias(function, "out2", out2, "out1", out1);
    return resolved;
}

template <typename T, typename S = T>
void softmax_attention_pair(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                            const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, MatrixRef<T> out1,
                            MatrixRef<T> out2, const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved =
        check_pair<T, S>("softmax_attention_pair", q1, k1, q2, k2, v, out1, out2, options);
    for_each_two_map_group<T, S>(q1, k1, q2, k2, v, resolved, workspace,
                                 [&](const auto& logits1, const auto& logits2, const auto& mask, Index q_begin,
                                     Index q_rows, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch,
                                     int key_threads) {
                                     if (q_begin == 0 && q_rows < kMinPackedRows) {  // each map as alone
                                         softmax_few_rows(logits1, mask, v, q_rows, key_threads, ws, scratch, out1);
                                         return softmax_few_rows(logits2, mask, v, q_rows, key_threads, ws, scratch,
                                                                 out2);
                                     }
                                     OnlineSoftmaxState<T>& map1 = scratch.states[0];
                                     OnlineSoftmaxState<T>& map2 = scratch.states[1];
                                     attend_maps<T>(std::tie(logits1, logits2), mask, q_begin, q_rows, v, scratch,
                                                    {&map1, &map2});
                                     map1.normalize_into(out1.middleRows(q_begin, q_rows));
                                     map2.normalize_into(out2.middleRows(q_begin, q_rows));
                                 });
}

/// DIFF V2's head over one kv head (docs/math.md §3.4): out = softmax(s Q1 K1^T + M) V - diag(gate)
/// softmax(s Q2 K2^T + M) V, gate [N] (sigmoid(l) of each row). A call of fewer than kMinPackedRows
/// rows multiplies V once, by the two maps' weights combined (diff_few_rows.hpp); larger calls run
/// softmax_attention_pair into out and `second` [N x dv], then subtract.
template <typename T, typename S = T>
void gated_softmax_difference(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                              const KeyOperand<S>& k2, const ConstMatrixRef<S>& v,
                              const Eigen::Map<const Vector<T>, 0, Eigen::InnerStride<>>& gate, MatrixRef<T> out,
                              MatrixRef<T> second, const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    constexpr const char* function = "gated_softmax_difference";
    require<ShapeError>(gate.size() == q1.rows(), function, ": gate has ", gate.size(), " entries but ",
                        named("Q1", q1), " (one per query row)");
    if (q1.rows() >= kMinPackedRows) {
        softmax_attention_pair<T, S>(q1, k1, q2, k2, v, out, second, options, workspace);
        out.noalias() -= gate.asDiagonal() * second;
        return;
    }
    const ResolvedOptions resolved = check_pair<T, S>(function, q1, k1, q2, k2, v, out, second, options);
    for_each_two_map_group<T, S>(q1, k1, q2, k2, v, resolved, workspace,
                                 [&](const auto& logits1, const auto& logits2, const auto& mask, Index /*q_begin*/,
                                     Index q_rows, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch,
                                     int key_threads) {
                                     diff_few_rows(logits1, logits2, mask, v, T(1),
                                                   RowFactors<T>{gate.data(), gate.innerStride()}, q_rows, key_threads,
                                                   ws, scratch, out);
                                 });
}

}  // namespace detail

/// Softmax attention of one head (docs/math.md §2.1).
///   q [N x d], k [S x d], v [S x dv] with S >= N; out [N x dv], written (caller-owned, must not alias inputs).
///   Any argument may be a column block of a wider row-major matrix (one head of many); no copy is made.
///   workspace: optional scratch reused across calls (else a temporary one is allocated).
/// Throws ShapeError / OptionError naming the argument and shapes.
template <int = 0>  // instantiated only where called (keeps every other TU cheap to compile)
inline void softmax_attention(const ConstMatrixRef<float>& q, const ConstMatrixRef<float>& k,
                              const ConstMatrixRef<float>& v, MatrixRef<float> out,
                              const AttentionOptions& options = {}, AttentionWorkspace<float>* workspace = nullptr) {
    detail::softmax_attention<float>(q, k, v, out, options, workspace);
}
template <int = 0>
inline void softmax_attention(const ConstMatrixRef<double>& q, const ConstMatrixRef<double>& k,
                              const ConstMatrixRef<double>& v, MatrixRef<double> out,
                              const AttentionOptions& options = {}, AttentionWorkspace<double>* workspace = nullptr) {
    detail::softmax_attention<double>(q, k, v, out, options, workspace);
}

}  // namespace diffattn
