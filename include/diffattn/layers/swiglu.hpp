// SwiGLU feed-forward (SPEC 4): y = (silu(x Wg^T) * (x Wu^T)) Wd^T.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/linear.hpp"

#include <cmath>

namespace diffattn {

/// Activation buffers of one SwiGLU call, sized once for a maximum number of tokens.
template <typename T>
struct SwiGluScratch {
    RowMatrix<T> gate;  ///< [max_len x d_ff]  x Wg^T, then silu(x Wg^T) * (x Wu^T)
    RowMatrix<T> up;    ///< [max_len x d_ff]  x Wu^T

    SwiGluScratch() = default;
    SwiGluScratch(Index max_len, Index d_ff) : gate(max_len, d_ff), up(max_len, d_ff) {}
};

template <typename T>
struct SwiGlu {
    RowMatrix<T> gate_proj;  ///< [d_ff x d_model]  `mlp.gate_proj.weight`
    RowMatrix<T> up_proj;    ///< [d_ff x d_model]  `mlp.up_proj.weight`
    RowMatrix<T> down_proj;  ///< [d_model x d_ff]  `mlp.down_proj.weight`

    SwiGlu() = default;
    SwiGlu(Index d_model, Index d_ff)
        : gate_proj(RowMatrix<T>::Zero(d_ff, d_model)),
          up_proj(RowMatrix<T>::Zero(d_ff, d_model)),
          down_proj(RowMatrix<T>::Zero(d_model, d_ff)) {}

    Index d_model() const { return gate_proj.cols(); }
    Index d_ff() const { return gate_proj.rows(); }

    /// out = SwiGLU(x). x [N x d_model], out [N x d_model] (must not alias x);
    /// scratch sized for at least N tokens and d_ff; the projections run as `context` allows (linear()).
    void operator()(const ConstMatrixRef<T>& x, MatrixRef<T> out, SwiGluScratch<T>& scratch,
                    const ExecutionContext& context = {}) const {
        const Index n = x.rows();
        require<ShapeError>(scratch.gate.rows() >= n && scratch.gate.cols() == d_ff() &&
                                scratch.up.rows() >= n && scratch.up.cols() == d_ff(),
                            "SwiGlu: scratch is sized for ", scratch.gate.rows(), " tokens x ", scratch.gate.cols(),
                            " but the call has ", n, " tokens x d_ff ", d_ff());
        auto gate = scratch.gate.topRows(n);  // [N x d_ff]
        auto up = scratch.up.topRows(n);      // [N x d_ff]
        linear<T>(x, gate_proj, gate, context);
        linear<T>(x, up_proj, up, context);
        // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)), fused with the product by up.
        gate.array() = gate.array() / (T(1) + (-gate.array()).exp()) * up.array();
        linear<T>(gate, down_proj, out, context);
    }

    /// 3 d_model d_ff (gate, up and down projections, no biases).
    static constexpr Index parameter_count(Index d_model, Index d_ff) { return 3 * d_model * d_ff; }
};

}  // namespace diffattn
