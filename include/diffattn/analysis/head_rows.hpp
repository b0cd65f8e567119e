// The attention maps of chosen rows of one head, computed from the call's rotated queries and keys
// one row at a time (docs/math.md §2), in O(S) memory per head: no N x S buffer.
//
// A row of softmax(s q K^T + M) costs O(S d). DINT's integral (docs/math.md §2.3) needs, for row
// n, the mean G[n] of the rows 0 .. n of A1 (all N rows for global_mean): the pass streams over
// those rows of A1 once, adding each into running column sums (the same state the kernels carry
// across a KV cache, docs/math.md §6), and reads G[n] off the sums when it reaches an asked row.
// Rows are asked in increasing order, so one pass serves every asked row of a head.
//
// Everything is computed in double from the stored T queries and keys: the maps are an analysis
// of what the kernels computed, at least as accurate as the kernels themselves.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

namespace diffattn::analysis {

/// One head of one attention call, as the kernels saw it. A whole sequence: S = N keys (the
/// analysis runs the plain forward, positions 0 .. N-1).
template <typename T>
struct HeadInputs {
    AttentionKind kind;           ///< softmax: map 1 only; diff, shared_diff, dint, diff_v2: two maps
    DintIntegral integral;        ///< dint: how I is built (docs/math.md §2.3)
    bool causal;                  ///< mask causal, else none (docs/math.md §1)
    ConstMatrixRef<T> q1;         ///< [N x d] rotated queries of map 1
    ConstMatrixRef<T> k1;         ///< [N x d] rotated keys of map 1
    ConstMatrixRef<T> q2;         ///< [N x d] map 2 (softmax: unused, any view)
    ConstMatrixRef<T> k2;         ///< [N x d]
    double lambda = 0;            ///< DIFF family: the layer's lambda as the kernels used it (rounded to T)
    const T* gate = nullptr;      ///< diff_v2: sigmoid gate of row n at gate[n * gate_stride]
    Index gate_stride = 0;
};

/// The maps of one row over its visible keys [visible] (views of HeadRowPass's buffers, valid
/// during the callback). Empty vectors for maps the kind does not have.
struct RowMaps {
    Index row;                                     ///< query row n
    Eigen::Ref<const Vector<double>> a1;           ///< softmax map 1 (softmax: the map)
    Eigen::Ref<const Vector<double>> a2;           ///< softmax map 2 (diff family, diff_v2)
    Eigen::Ref<const Vector<double>> integral;     ///< dint: I[n] (before the factor lambda)
    Eigen::Ref<const Vector<double>> combined;     ///< the map the values are weighted by
    double weight;                                 ///< lambda (diff, shared_diff, dint), the gate (diff_v2), 0 (softmax)
};

/// Buffers of one head's pass, sized once for up to `max_len` keys: 5 max_len + d doubles.
class HeadRowPass {
public:
    HeadRowPass() = default;
    HeadRowPass(Index max_len, Index head_dim)
        : a1_(max_len), a2_(max_len), integral_(max_len), combined_(max_len), column_sum_(max_len), query_(head_dim) {}

    Index max_len() const { return a1_.size(); }
    Index head_dim() const { return query_.size(); }
    /// Bytes of the buffers.
    std::size_t bytes() const { return sizeof(double) * static_cast<std::size_t>(5 * a1_.size() + query_.size()); }

    /// Calls on_row(const RowMaps&) for each row of `rows` (strictly increasing, in [0, N)), in
    /// order. Allocates nothing (the buffers must hold N keys and d).
    template <typename T, typename OnRow>
    void run(const HeadInputs<T>& in, const std::vector<Index>& rows, OnRow&& on_row) {
        if (rows.empty()) return;
        const Index n_rows = in.q1.rows();
        assert(in.k1.rows() == n_rows && n_rows <= max_len() && in.q1.cols() == query_.size());
        const bool dint = in.kind == AttentionKind::dint;
        const bool two_maps = in.kind != AttentionKind::softmax;
        if (dint) column_sum_.head(n_rows).setZero();
        if (dint && in.integral == DintIntegral::global_mean) {
            // g = (1/N) sum over every row of A1 (docs/math.md §2.3, DINT v1).
            for (Index m = 0; m < n_rows; ++m) accumulate_row(in, m);
        }
        Index next_streamed = 0;  // causal integrals: rows of A1 added to the column sums so far
        for (const Index n : rows) {
            const Index visible = visible_keys(in, n);
            if (dint && in.integral != DintIntegral::global_mean) {
                while (next_streamed <= n) accumulate_row(in, next_streamed++);  // leaves A1[n] in a1_
            } else {
                softmax_row(in.q1, in.k1, n, visible, a1_);
            }
            auto a1 = a1_.head(visible);
            auto combined = combined_.head(visible);
            double weight = 0;
            if (two_maps) {
                softmax_row(in.q2, in.k2, n, visible, a2_);
                weight = in.kind == AttentionKind::diff_v2 ? static_cast<double>(in.gate[n * in.gate_stride]) : in.lambda;
                combined = a1 - weight * a2_.head(visible);
            } else {
                combined = a1;
            }
            if (dint) {
                integral_row(in, n, visible);
                combined += in.lambda * integral_.head(visible);
            }
            on_row(RowMaps{n, a1, two_maps ? a2_.head(visible) : a2_.head(0),
                           dint ? integral_.head(visible) : integral_.head(0), combined, weight});
        }
    }

    /// Keys row n may see: n + 1 under the causal mask, all N without (docs/math.md §1).
    template <typename T>
    static Index visible_keys(const HeadInputs<T>& in, Index n) {
        return in.causal ? n + 1 : in.k1.rows();
    }

private:
    /// out[0, visible) = softmax(s q[n] K[0, visible)^T), s = 1/sqrt(d), in double: the row
    /// maximum subtracted first (docs/math.md §1).
    template <typename T>
    void softmax_row(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, Index n, Index visible,
                     Vector<double>& out) {
        const double scale = 1.0 / std::sqrt(static_cast<double>(q.cols()));
        query_ = q.row(n).transpose().template cast<double>();
        double top = -std::numeric_limits<double>::infinity();
        for (Index j = 0; j < visible; ++j) {
            out[j] = scale * k.row(j).transpose().template cast<double>().dot(query_);
            top = std::max(top, out[j]);
        }
        normalise_exp(out.head(visible), top);
    }

    /// x = exp(x - top) / sum: the softmax of logits whose maximum is `top`.
    static void normalise_exp(Eigen::Ref<Vector<double>> x, double top) {
        x = (x.array() - top).exp();
        x /= x.sum();
    }

    /// A1[m] into a1_ and added into the column sums.
    template <typename T>
    void accumulate_row(const HeadInputs<T>& in, Index m) {
        const Index visible = visible_keys(in, m);
        softmax_row(in.q1, in.k1, m, visible, a1_);
        column_sum_.head(visible) += a1_.head(visible);
    }

    /// I[n] from the column sums (docs/math.md §2.3): G[n] = sums / rows counted; causal_softmax
    /// takes the softmax of G[n] over the visible keys (scale 1), the mean modes G[n] itself.
    template <typename T>
    void integral_row(const HeadInputs<T>& in, Index n, Index visible) {
        const Index counted = in.integral == DintIntegral::global_mean ? in.q1.rows() : n + 1;
        auto g = integral_.head(visible);
        g = column_sum_.head(visible) / static_cast<double>(counted);
        if (in.integral == DintIntegral::causal_softmax) normalise_exp(g, g.maxCoeff());
    }

    Vector<double> a1_, a2_, integral_, combined_;  // [max_len] the current row's maps
    Vector<double> column_sum_;                     // [max_len] dint: sum of the A1 rows streamed so far
    Vector<double> query_;                          // [d] the query row in double
};

}  // namespace diffattn::analysis
