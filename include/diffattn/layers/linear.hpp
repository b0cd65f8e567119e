// Linear projection without bias, in PyTorch nn.Linear layout (SPEC 3): y = x W^T.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/types.hpp"

namespace diffattn {

/// y = x W^T for a weight stored as [out_features x in_features] (nn.Linear, no bias).
/// The caller owns `out`; it must not alias `x`.
///   x   [N x in]     (any row-major matrix or column block)
///   w   [out x in]
///   out [N x out]
template <typename T>
void linear(const ConstMatrixRef<T>& x, const ConstMatrixRef<T>& w, MatrixRef<T> out) {
    // Entry-point checks are cheap next to the GEMM and catch mis-sized scratch early.
    detail::require_same_cols("linear", detail::named("x", x), detail::named("weight", w));
    detail::require_shape("linear", detail::named("out", out), x.rows(), w.rows());
    out.noalias() = x * w.transpose();
}

/// Parameter count of a bias-free nn.Linear(in_features, out_features).
constexpr Index linear_parameter_count(Index in_features, Index out_features) {
    return in_features * out_features;
}

}  // namespace diffattn
