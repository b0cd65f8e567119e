// Online-softmax state of one block of query rows (FlashAttention's {o, m, l}).
//
// For each row r it keeps the running maximum m_r of the logits seen so far, the running sum
// l_r = sum_j exp(logit_j - m_r) and the un-normalised output acc_r = sum_j exp(logit_j - m_r) v_j.
// A new tile of logits rescales the old values by exp(m_old - m_new) (SPEC 7: softmax subtracts
// the row max). A row that saw no key has l_r = 0 and normalises to an all-zero row, never NaN.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/tile_product.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace diffattn {

template <typename T>
class OnlineSoftmaxState {
public:
    using TileRef = Eigen::Block<RowMatrix<T>>;

    /// Allocates room for up to `max_rows` query rows of width up to `max_value_dim`.
    void reserve(Index max_rows, Index max_value_dim) {
        if (acc_.rows() < max_rows || acc_.cols() < max_value_dim) {
            acc_.resize(std::max(max_rows, acc_.rows()), std::max(max_value_dim, acc_.cols()));
        }
        if (row_max_.size() < max_rows) {
            row_max_.resize(max_rows);
            row_sum_.resize(max_rows);
        }
    }

    /// Starts a new block of `rows` query rows with value width `value_dim` (no allocation).
    void reset(Index rows, Index value_dim) {
        assert(rows <= acc_.rows() && value_dim <= acc_.cols());
        rows_ = rows;
        value_dim_ = value_dim;
        row_max_.head(rows).setConstant(-std::numeric_limits<T>::infinity());
        row_sum_.head(rows).setZero();
        accumulator().setZero();
    }

    /// Folds one tile of logits into the state.
    ///   logits:      [rows x k] raw logits; the logical logit is logit_scale * logits(r, j).
    ///                Overwritten with the probabilities exp(logit - m_new) (0 where masked).
    ///   visible(r):  keys [0, visible(r)) of the tile are visible to row r (a prefix); pass
    ///                `masked = false` when every row sees the whole tile (the fast path).
    ///   values:      [k x value_dim] the value rows of the tile.
    template <typename Logits, typename Values, typename Visible>
    void update(Logits&& logits, T logit_scale, const Values& values, bool masked, const Visible& visible) {
        const Index k = logits.cols();
        assert(logits.rows() == rows_ && values.rows() == k && values.cols() == value_dim_);
        Index min_visible = k;
        for (Index r = 0; r < rows_; ++r) {
            const Index n = masked ? visible(r) : k;
            min_visible = std::min(min_visible, n);
            auto row = logits.row(r);
            if (n < k) row.tail(k - n).setZero();
            if (n == 0) continue;  // nothing visible: state unchanged, probabilities all zero
            auto seen = row.head(n).array();
            const T tile_max = logit_scale * seen.maxCoeff();
            const T new_max = std::max(row_max_[r], tile_max);
            // exp(-inf) = 0 on the first tile; NaN logits propagate into this row only.
            const T rescale = std::exp(row_max_[r] - new_max);
            seen = (seen * logit_scale - new_max).exp();
            row_sum_[r] = row_sum_[r] * rescale + seen.sum();
            row_max_[r] = new_max;
            if (rescale != T(1)) accumulator().row(r) *= rescale;
        }
        // acc += P V. Masked probabilities are exact zeros, so one GEMM over the whole tile is exact
        // unless a value row hidden from some query holds Inf/NaN (0 * NaN = NaN would leak into a
        // row that must not depend on it): then each row multiplies only its visible prefix.
        const bool hidden_values_finite =
            !masked || min_visible == k || values.bottomRows(k - min_visible).allFinite();
        if (hidden_values_finite) {
            detail::tile_product<true>(accumulator(), logits, values);
        } else {
            for (Index r = 0; r < rows_; ++r) {
                const Index n = visible(r);
                if (n > 0) accumulator().row(r).noalias() += logits.row(r).head(n) * values.topRows(n);
            }
        }
    }

    /// 1 / l_r, or 0 for a row that saw no key (so it normalises to zeros).
    T inverse_sum(Index r) const { return row_sum_[r] > T(0) ? T(1) / row_sum_[r] : T(0); }

    /// Row r of the normalised output O = acc / l (an expression; evaluate it into a destination).
    auto normalized_row(Index r) const { return accumulator().row(r) * inverse_sum(r); }

    /// Writes the normalised output of every row: out [rows x value_dim].
    template <typename Out>
    void normalize_into(Out&& out) const {
        for (Index r = 0; r < rows_; ++r) out.row(r) = normalized_row(r);
    }

    Index rows() const { return rows_; }
    /// Final running maximum of row r (scaled logits) and sum: A[r, j] = exp(logit_j - m_r) / l_r.
    T row_max(Index r) const { return row_max_[r]; }
    T row_sum(Index r) const { return row_sum_[r]; }
    /// The same for every row of the block: [rows] segments.
    auto row_maxima() const { return row_max_.head(rows_); }
    auto row_sums() const { return row_sum_.head(rows_); }

private:
    auto accumulator() { return acc_.topLeftCorner(rows_, value_dim_); }
    auto accumulator() const { return acc_.topLeftCorner(rows_, value_dim_); }

    RowMatrix<T> acc_;  // [max_rows x max_value_dim], used top-left [rows x value_dim]
    Vector<T> row_max_;  // [max_rows] running max of the scaled logits
    Vector<T> row_sum_;  // [max_rows] running sum of exp(logit - row_max)
    Index rows_ = 0;
    Index value_dim_ = 0;
};

}  // namespace diffattn
