// Plain reference of grouped differential attention (docs/math.md §9), beside the other kernels'
// (reference.hpp): each signal head's map A1_i and the noise head's map A2 MATERIALISED ([N x S]
// each), the combined map A1_i - lambda A2 formed and multiplied by V, as literally as the formula
// reads. The oracle of kernels/gda_attention.hpp; O(N S) memory, for tests and debugging.
// Arguments are checked as the fast entry point checks them (check_gda_shapes, resolve_options),
// with the function named "reference::gda_attention".
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/attention_checks.hpp"
#include "diffattn/kernels/options.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/reference_maps.hpp"

namespace diffattn::reference {

/// docs/math.md §9: out_i = (A1_i - lambda A2) V, A1_i = softmax(s Q1_i K1^T + M), A2 = softmax(s Q2 K2^T + M).
///   q1 [N x gr d] (signal head i at columns [i d, (i+1) d)), k1 [S x d], q2 [N x d], k2 [S x d],
///   v [S x dv]; returns [N x gr dv], head i at columns [i dv, (i+1) dv).
template <typename T>
RowMatrix<T> gda_attention(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                           const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, NonDeducedT<T> lambda,
                           const AttentionOptions& options = {}) {
    constexpr const char* function = "reference::gda_attention";
    const Index gr = diffattn::detail::check_gda_shapes(function, q1, k1, q2, k2, v, static_cast<double>(lambda));
    diffattn::detail::resolve_options<T>(function, options, "Q2", q2, "K2", k2);
    const Index d = q2.cols(), dv = v.cols();
    const RowMatrix<T> a2 = attention_map<T>(q2, k2, options);  // A2, the group's noise map   [N x S]
    RowMatrix<T> out(q2.rows(), gr * dv);
    for (Index i = 0; i < gr; ++i) {
        const RowMatrix<T> a1 = attention_map<T>(q1.middleCols(i * d, d), k1, options);  // A1_i   [N x S]
        const RowMatrix<T> combined = a1 - lambda * a2;                                // A1_i - lambda A2
        out.middleCols(i * dv, dv) = combined * v;                                     // O_i   [N x dv]
    }
    return out;
}

/// T from the matrices (reference::gda_attention(q1, k1, q2, k2, v, lambda)), as reference.hpp's overloads.
template <typename Q1, typename K1, typename Q2, typename K2, typename V, typename T = ScalarOf<Q1>>
RowMatrix<T> gda_attention(const Q1& q1, const K1& k1, const Q2& q2, const K2& k2, const V& v, NonDeducedT<T> lambda,
                           const AttentionOptions& options = {}) {
    return gda_attention<T>(q1, k1, q2, k2, v, lambda, options);
}

}  // namespace diffattn::reference
