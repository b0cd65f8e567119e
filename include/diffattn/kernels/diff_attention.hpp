// Differential attention (docs/math.md §2.2): O = (A1 - lambda A2) V, computed as O1 - lambda O2 where
// Oi = softmax(s Qi Ki^T + M) V are two runs of the shared tiled core over the same V.
#pragma once

#include "diffattn/kernels/diff_few_rows.hpp"
#include "diffattn/kernels/key_split.hpp"

namespace diffattn {
namespace detail {

/// Shapes and lambda of a DIFF/DINT call: Q1 ~ Q2, K1 ~ K2, then the common single-map checks.
template <typename T, typename S = T>
ResolvedOptions check_differential(const char* function, const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1,
                                   const ConstMatrixRef<T>& q2, const KeyOperand<S>& k2,
                                   const ConstMatrixRef<S>& v, T lambda, const MatrixRef<T>& out,
                                   const AttentionOptions& options) {
    check_second_map(function, q1, k1, q2, k2, static_cast<double>(lambda));
    require_no_alias(function, "out", out, "Q2", q2);
    require_no_alias(function, "out", out, "K2", k2);
    return check_attention<T, S>(function, "Q1", "K1", "V", q1, k1, v, out, options);
}

/// out.row(q_begin + r) = O1 - lambda O2 (docs/math.md §2.2) for the rows [first, last) of a group whose
/// two maps are `map1` and `map2` and whose first row is q_begin.
template <typename T>
void write_differential_rows(const OnlineSoftmaxState<T>& map1, const OnlineSoftmaxState<T>& map2, T lambda,
                             Index q_begin, Index first, Index last, MatrixRef<T>& out) {
    for (Index r = first; r < last; ++r) out.row(q_begin + r) = map1.normalized_row(r) - lambda * map2.normalized_row(r);
}

/// The two maps of one query block or group (q_rows <= kGroupRows): fills scratch.states[0] and
/// [1] (map 1, map 2) and writes out = O1 - lambda O2 for rows [q_begin, q_begin + q_rows), on the
/// thread calling it (attend_maps). Shared by DIFF and DINT.
template <typename T, typename S, typename Mask>
void differential_block(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2, const Mask& mask,
                        Index q_begin, Index q_rows, const ConstMatrixRef<S>& v, T lambda, BlockScratch<T>& scratch,
                        MatrixRef<T>& out) {
    OnlineSoftmaxState<T>& map1 = scratch.states[0];
    OnlineSoftmaxState<T>& map2 = scratch.states[1];
    attend_maps<T>(std::tie(logits1, logits2), mask, q_begin, q_rows, v, scratch, {&map1, &map2});
    write_differential_rows(map1, map2, lambda, q_begin, 0, q_rows, out);
}

template <typename T, typename S = T>
void diff_attention(const ConstMatrixRef<T>& q1, const KeyOperand<S>& k1, const ConstMatrixRef<T>& q2,
                    const KeyOperand<S>& k2, const ConstMatrixRef<S>& v, T lambda, MatrixRef<T> out,
                    const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_differential<T, S>("diff_attention", q1, k1, q2, k2, v, lambda, out, options);
    for_each_two_map_group<T, S>(q1, k1, q2, k2, v, resolved, workspace,
                                 [&](const auto& logits1, const auto& logits2, const auto& mask, Index q_begin,
                                     Index q_rows, AttentionWorkspace<T>& ws, BlockScratch<T>& scratch,
                                     int key_threads) {
                                     if (q_begin == 0 && q_rows < kMinPackedRows) {  // a call of few rows: V once
                                         diff_few_rows(logits1, logits2, mask, v, lambda, RowFactors<T>{}, q_rows,
                                                       key_threads, ws, scratch, out);
                                         return;
                                     }
                                     differential_block(logits1, logits2, mask, q_begin, q_rows, v, lambda, scratch,
                                                        out);
                                 });
}

}  // namespace detail

/// Differential attention of one head (docs/math.md §2.2): out = (softmax(s Q1 K1^T + M) - lambda softmax(s Q2 K2^T + M)) V.
///   q1, q2 [N x d]; k1, k2 [S x d], S >= N; v [S x dv] (dv = 2d in the DIFF Transformer); out [N x dv].
///   Heads may be column blocks of wider row-major matrices; out must not alias the inputs.
/// Throws ShapeError / OptionError naming the argument and shapes.
template <int = 0>  // instantiated only where called (keeps every other TU cheap to compile)
inline void diff_attention(const ConstMatrixRef<float>& q1, const ConstMatrixRef<float>& k1,
                           const ConstMatrixRef<float>& q2, const ConstMatrixRef<float>& k2,
                           const ConstMatrixRef<float>& v, float lambda, MatrixRef<float> out,
                           const AttentionOptions& options = {}, AttentionWorkspace<float>* workspace = nullptr) {
    detail::diff_attention<float>(q1, k1, q2, k2, v, lambda, out, options, workspace);
}
template <int = 0>
inline void diff_attention(const ConstMatrixRef<double>& q1, const ConstMatrixRef<double>& k1,
                           const ConstMatrixRef<double>& q2, const ConstMatrixRef<double>& k2,
                           const ConstMatrixRef<double>& v, double lambda, MatrixRef<double> out,
                           const AttentionOptions& options = {}, AttentionWorkspace<double>* workspace = nullptr) {
    detail::diff_attention<double>(q1, k1, q2, k2, v, lambda, out, options, workspace);
}

}  // namespace diffattn
