// DINT's causal_softmax integral for a call of few query rows (a decode step: one token or a small
// chunk), reading K1, K2 and V once each and multiplying V once.
//
// The integral map's logits G are built from A1 = softmax(s Q1 K1^T), and a tile of A1 needs map
// 1's final row max and sum (docs/math.md §2.3). The grouped path therefore reads K1 and V twice:
// once for the DIFF maps, once more for the integral map. A call of fewer than kMinPackedRows rows
// instead keeps its logits (one scalar per row, key and map; diff_few_rows.hpp) in three passes:
//   1. s Q1 K1^T and s Q2 K2^T over K1 and K2, kept, and folded into each map's row max and sum;
//   2. G from A1, rebuilt from the kept map-1 logits and pass 1's statistics (no keys read), kept
//      and folded the same way;
//   3. one pass over V with the weights A1 - lambda A2 + lambda softmax(G) (multiply_values_once).
// Every pass splits its keys over the threads (key_split.hpp). Only the order of the sums changes,
// so results agree with the grouped path within docs/math.md §7.
#pragma once

#include "diffattn/kernels/dint_integral.hpp"

#include <array>

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

/// out rows [0, q_rows) = O1 - lambda O2 + lambda softmax(G) V for a call of q_rows < kMinPackedRows
/// query rows, all of them (the file comment's passes), on `threads` threads. column_sum and
/// rows_before as IntegralLogits; the workspace reserved for q_rows x S (its stored_logits).
template <typename T, typename S, typename Mask>
void dint_softmax_few_rows(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2,
                           const Mask& mask, const ConstMatrixRef<S>& v, T lambda, VectorRef<T> column_sum,
                           Index rows_before, Index q_rows, int threads, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    assert(q_rows < kMinPackedRows && q_rows == out.rows());
    BlockScratch<T>& scratch = ws.block(0);
    // 1. Both maps' logits, over K1 and K2.
    keep_two_maps(logits1, logits2, mask, q_rows, v.rows(), threads, ws, scratch);
    const Eigen::Map<RowMatrix<T>> kept1 = ws.stored_logits(q_rows, v.rows(), 0);
    const Eigen::Map<RowMatrix<T>> kept2 = ws.stored_logits(q_rows, v.rows(), 1);
    Eigen::Map<RowMatrix<T>> kept_integral = ws.stored_logits(q_rows, v.rows(), 2);
    const OnlineSoftmaxState<T>& statistics1 = scratch.states[0];
    const OnlineSoftmaxState<T>& statistics2 = scratch.states[1];
    OnlineSoftmaxState<T>& integral_statistics = scratch.states[2];
    // 2. The integral map's logits G, from A1 rebuilt from map 1's kept logits and final statistics
    //    (each run adds its own keys' column sums).
    const StoredLogits<T> map1_logits(kept1, 0);
    const A1Tiles<T, Mask, StoredLogits<T>> a1(map1_logits, mask, 0, statistics1.row_maxima(), statistics1.row_sums());
    IntegralLogits<T, Mask, StoredLogits<T>> integral_logits(a1, column_sum, rows_before);
    fold_key_runs<1, S>(mask, 0, q_rows, threads, ws, scratch, {&integral_statistics},
                     [&](KeyRange keys, BlockScratch<T>& mine, const auto& states) {
                         using Map = MapToKeep<T, decltype(integral_logits)>;
                         const std::array<Map, 1> maps{Map{integral_logits, kept_integral, *states[0]}};
                         keep_map_logits<S>(maps, mask, 0, q_rows, mine, keys);
                     });
    // 3. One pass over V with the three maps' weights combined.
    const std::array<KeptMap<T>, 3> maps{KeptMap<T>{kept1, statistics1, T(1), {}},
                                         KeptMap<T>{kept2, statistics2, -lambda, {}},
                                         KeptMap<T>{kept_integral, integral_statistics, lambda, {}}};
    multiply_values_once(maps, mask, q_rows, v, threads, ws, scratch, out);
}

}  // namespace diffattn::detail
