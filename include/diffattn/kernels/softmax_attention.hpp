// Softmax attention (docs/math.md §2.1): O = softmax(s Q K^T + M) V, computed tile by tile.
#pragma once

#include "diffattn/kernels/key_split.hpp"

namespace diffattn {
namespace detail {

template <typename T, typename S = T>
void softmax_attention(const ConstMatrixRef<T>& q, const ConstMatrixRef<S>& k, const ConstMatrixRef<S>& v,
                       MatrixRef<T> out, const AttentionOptions& options, AttentionWorkspace<T>* workspace) {
    const ResolvedOptions resolved = check_attention<T, S>("softmax_attention", "Q", "K", "V", q, k, v, out, options);
    AttentionWorkspace<T> local;
    AttentionWorkspace<T>& ws =
        prepare_workspace(workspace, local, q.rows(), k.rows(), q.cols(), v.cols(), resolved.threads);
    const DotProductLogits<T, S> logits(q, k, T(resolved.scale));
    const int key_threads = key_split_threads(q.rows(), resolved.threads);
    dispatch_mask(resolved.mask, q.rows(), k.rows(), resolved.valid_len, [&](const auto& mask) {
        for_each_query_group(q.rows(), resolved.threads, mask, ws,
                             [&](Index q_begin, Index q_rows, BlockScratch<T>& scratch) {
                                 OnlineSoftmaxState<T>& state = scratch.states[0];
                                 attend_maps<T>({&logits}, mask, q_begin, q_rows, v, ws, scratch, key_threads, {&state});
                                 state.normalize_into(out.middleRows(q_begin, q_rows));
                             });
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
