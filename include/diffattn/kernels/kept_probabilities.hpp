// What a call of few query rows keeps of one map between its passes (diff_few_rows.hpp,
// dint_few_rows.hpp): each key tile's probabilities as the online softmax folded them,
// exp(logit - m_t) with m_t the row's running max after the tile, and m_t itself, per row and tile.
//
// Pass 1 computes those exps anyway (for the row sums, OnlineSoftmaxState::fold), so keeping them
// rather than the logits spares the later passes an exp per key: once the final max m and sum l
// are known, A[r, j] = kept[r, j] exp(m_t[r] - m[r]) / l[r] (docs/math.md §7: exp(x - m_t) exp(m_t
// - m) is exp(x - m) to a rounding or two), one exp per row and tile.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/online_softmax.hpp"

#include <Eigen/Core>

#include <cassert>
#include <cmath>

namespace diffattn::detail {

/// One map's kept probabilities over the keys [0, S) of `rows` query rows, in tiles of `tile` keys
/// (the tiles of kernels/key_split.hpp's for_each_few_rows_tile, which start at multiples of it).
template <typename T>
struct KeptProbabilities {
    Eigen::Map<RowMatrix<T>> probabilities;  ///< [rows x S] exp(logit - m_t), 0 where hidden
    Eigen::Map<RowMatrix<T>> tile_maxima;    ///< [tiles x rows] m_t of each tile (a row per tile)
    Index tile = 0;

    /// Keeps the tile of keys from k_begin, `folded` [rows x keys] as fold() left it, and the row
    /// maxima of `statistics` after that fold.
    template <typename Tile>
    void keep(Index k_begin, const Tile& folded, const OnlineSoftmaxState<T>& statistics) {
        assert(k_begin % tile == 0 && folded.rows() == statistics.rows());
        probabilities.middleCols(k_begin, folded.cols()) = folded;
        tile_maxima.row(k_begin / tile) = statistics.row_maxima().transpose();
    }

    /// exp(m_t - m) / l for row r in the tile from k_begin, m and l the row's final max and sum in
    /// `statistics`: what turns its kept probabilities into the map's A[r, j] = exp(logit - m) / l.
    /// 0 for a row that saw no key (l = 0), whose kept probabilities are all 0.
    T normalizer(Index r, Index k_begin, const OnlineSoftmaxState<T>& statistics) const {
        const T sum = statistics.row_sum(r);
        return sum == T(0) ? T(0) : std::exp(tile_maxima(k_begin / tile, r) - statistics.row_max(r)) / sum;
    }
};

}  // namespace diffattn::detail
