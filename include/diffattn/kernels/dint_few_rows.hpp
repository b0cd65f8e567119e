// DINT's causal_softmax integral for a call of few query rows (a decode step: one token or a small
// chunk), reading K1, K2 and V once each.
//
// The integral map's logits G are built from A1 = softmax(s Q1 K1^T), and a tile of A1 needs map
// 1's final row max and sum (docs/math.md §2.3). The grouped path therefore reads K1 and V twice:
// once for the DIFF maps, once more for the integral map. A call of fewer than kMinPackedRows rows
// instead keeps its map-1 logits (one scalar per row and key: 1/d of K1's bytes) in two passes:
//   1. s Q1 K1^T over K1 alone, kept in the workspace and folded into map 1's row max and sum;
//   2. one pass over K2 and V for three maps at once (attend_few_rows): map 1 from the kept logits,
//      map 2 from K2, and the integral map from A1 rebuilt from the kept logits and pass 1's
//      statistics.
// Both passes split their keys over the threads (key_split.hpp). Only the order of the sums
// changes, so results agree with the grouped path within docs/math.md §7.
#pragma once

#include "diffattn/kernels/dint_integral.hpp"

#include <tuple>

namespace diffattn::detail {

/// Logits policy of map 1 in pass 2: the logits pass 1 kept, [rows x S] for the call's rows
/// [first_row, first_row + rows). Serves unpacked (few-rows) tiles only.
template <typename T>
class StoredLogits {
public:
    StoredLogits(const Eigen::Map<RowMatrix<T>>& logits, Index first_row) : logits_(logits), first_row_(first_row) {}

    template <typename Tile>
    void operator()(Index q_begin, Index /*group_begin*/, Index k_begin, Tile& tile,
                    [[maybe_unused]] const PackedTiles<T>* packed, RowMatrix<T>& /*key_tile*/) const {
        assert(packed == nullptr);
        tile = logits_.block(q_begin - first_row_, k_begin, tile.rows(), tile.cols());
    }

private:
    const Eigen::Map<RowMatrix<T>>& logits_;
    Index first_row_;
};

/// Pass 1 over the keys [keys.begin, keys.end) the rows [q_begin, q_begin + q_rows) see: their
/// map-1 logits into the same columns of `kept` [q_rows x S], folded into `statistics` (value
/// width 0: only the row max and sum).
template <typename T, typename S, typename Mask>
void keep_map_logits(const DotProductLogits<T, S>& logits1, const Mask& mask, Index q_begin, Index q_rows,
                     Eigen::Map<RowMatrix<T>>& kept, BlockScratch<T>& scratch, OnlineSoftmaxState<T>& statistics,
                     KeyRange keys) {
    statistics.reset(q_rows, 0);
    const Index visit_end = std::min(keys.end, block_visit_end(mask, q_begin, q_begin + q_rows));
    for (Index k_begin = keys.begin; k_begin < visit_end; k_begin += kKeyTile) {
        const Index k_count = std::min(kKeyTile, visit_end - k_begin);
        auto tile = scratch.logits.topLeftCorner(q_rows, k_count);  // padded rows, as fold() needs
        logits1(q_begin, q_begin, k_begin, tile, nullptr, scratch.key_tile);
        kept.middleCols(k_begin, k_count) = tile;
        const bool masked = k_begin + k_count > block_unmasked_end(mask, q_begin);
        statistics.fold(0, tile, masked,
                        [&](Index r) { return visible_keys_in_tile(mask, q_begin + r, k_begin, k_count); });
    }
}

/// out rows [0, q_rows) = O1 - lambda O2 + lambda softmax(G) V for a call of q_rows < kMinPackedRows
/// query rows (the file comment's two passes), on `threads` threads. column_sum and rows_before as
/// IntegralLogits; the workspace reserved for q_rows x S (its stored_logits).
template <typename T, typename S, typename Mask>
void dint_softmax_few_rows(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2,
                           const Mask& mask, const ConstMatrixRef<S>& v, T lambda, VectorRef<T> column_sum,
                           Index rows_before, Index q_rows, int threads, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    assert(q_rows < kMinPackedRows);
    Eigen::Map<RowMatrix<T>> kept = ws.stored_logits(q_rows, v.rows());
    OnlineSoftmaxState<T>& map1_statistics = ws.stored_statistics();
    BlockScratch<T>& scratch = ws.block(0);

    fold_key_runs<1>(mask, 0, q_rows, threads, ws, scratch, {&map1_statistics},
                     [&](KeyRange keys, BlockScratch<T>& mine, const auto& states) {
                         keep_map_logits(logits1, mask, 0, q_rows, kept, mine, *states[0], keys);
                     });

    const StoredLogits<T> map1_logits(kept, 0);
    const A1Tiles<T, Mask, StoredLogits<T>> a1(map1_logits, mask, 0, map1_statistics.row_maxima(),
                                               map1_statistics.row_sums());
    IntegralLogits<T, Mask, StoredLogits<T>> integral_logits(a1, column_sum, rows_before);
    OnlineSoftmaxState<T>& map1 = scratch.states[0];
    OnlineSoftmaxState<T>& map2 = scratch.states[1];
    OnlineSoftmaxState<T>& integral = scratch.states[2];
    attend_few_rows_split<T>(std::tie(map1_logits, logits2, integral_logits), mask, 0, q_rows, v, ws, scratch,
                             threads, {&map1, &map2, &integral});
    write_differential_rows(map1, map2, lambda, 0, 0, q_rows, out);
    for (Index r = 0; r < q_rows; ++r) out.row(r) += lambda * integral.normalized_row(r);
}

}  // namespace diffattn::detail
