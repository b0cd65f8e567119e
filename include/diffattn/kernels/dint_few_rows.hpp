// DINT's causal_softmax integral for a call of few query rows (a decode step: one token or a small
// chunk), reading K1, K2 and V once each and multiplying V once.
//
// The integral map's logits G are built from A1 = softmax(s Q1 K1^T), and a tile of A1 needs map
// 1's final row max and sum (docs/math.md §2.3). The grouped path therefore reads K1 and V twice:
// once for the DIFF maps, once more for the integral map. A call of fewer than kMinPackedRows rows
// instead keeps its probabilities (one scalar per row, key and map, and one per row and tile:
// kept_probabilities.hpp) in three passes:
//   1. s Q1 K1^T and s Q2 K2^T over K1 and K2, folded into each map's row max and sum, their
//      probabilities kept;
//   2. G from A1, rebuilt from map 1's kept probabilities and pass 1's statistics (no keys read,
//      no exp per key), folded the same way and kept;
//   3. one pass over V with the weights A1 - lambda A2 + lambda softmax(G) (multiply_values_once).
// Every pass splits its keys over the threads (key_split.hpp). Only the order of the sums and a
// rounding of each weight change, so results agree with the grouped path within docs/math.md §7.
#pragma once

#include "diffattn/kernels/dint_integral.hpp"

#include <array>

namespace diffattn::detail {

/// A1 tiles of the call's rows [0, rows) in pass 2 (IntegralLogits' A1 policy), from map 1's kept
/// probabilities and final row max and sum: A1[r, j] = kept[r, j] exp(m_t - m_r) / l_r, and 0
/// where the mask hides key j from row r or the row saw no key. Serves unpacked (few-rows) tiles.
template <typename T, typename Mask>
class KeptA1Tiles {
public:
    KeptA1Tiles(const KeptProbabilities<T>& kept, const Mask& mask, const OnlineSoftmaxState<T>& statistics)
        : kept_(kept), mask_(mask), statistics_(statistics) {}

    template <typename Tile>
    void operator()([[maybe_unused]] Index q_begin, Index /*group_begin*/, Index k_begin, Tile& tile,
                    [[maybe_unused]] const PackedTiles<T>* packed, RowMatrix<T>& /*key_tile*/) const {
        assert(packed == nullptr && q_begin == 0);
        const Index keys = tile.cols();
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            const Index visible = visible_keys_in_tile(mask_, r, k_begin, keys);
            if (visible > 0) {
                row.head(visible) = kept_.normalizer(r, k_begin, statistics_) *
                                    kept_.probabilities.row(r).segment(k_begin, visible);
            }
            row.tail(keys - visible).setZero();
        }
    }

private:
    const KeptProbabilities<T>& kept_;
    const Mask& mask_;
    const OnlineSoftmaxState<T>& statistics_;
};

/// out rows [0, q_rows) = O1 - lambda O2 + lambda softmax(G) V for a call of q_rows < kMinPackedRows
/// query rows, all of them (the file comment's passes), on `threads` threads. column_sum and
/// rows_before as IntegralLogits; the workspace reserved for q_rows x S (its kept_probabilities).
template <typename T, typename S, typename Mask>
void dint_softmax_few_rows(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2,
                           const Mask& mask, const ConstMatrixRef<S>& v, T lambda, VectorRef<T> column_sum,
                           Index rows_before, Index q_rows, int threads, AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    assert(q_rows < kMinPackedRows && q_rows == out.rows());
    BlockScratch<T>& scratch = ws.block(0);
    // 1. Both maps' logits, over K1 and K2.
    keep_two_maps(logits1, logits2, mask, q_rows, v.rows(), threads, ws, scratch);
    constexpr Index kTile = kFewRowsKeyTileOf<S>;
    const KeptProbabilities<T> kept1 = ws.kept_probabilities(q_rows, v.rows(), kTile, 0);
    const KeptProbabilities<T> kept2 = ws.kept_probabilities(q_rows, v.rows(), kTile, 1);
    KeptProbabilities<T> kept_integral = ws.kept_probabilities(q_rows, v.rows(), kTile, 2);
    const OnlineSoftmaxState<T>& statistics1 = scratch.states[0];
    const OnlineSoftmaxState<T>& statistics2 = scratch.states[1];
    OnlineSoftmaxState<T>& integral_statistics = scratch.states[2];
    // 2. The integral map's logits G, from A1 rebuilt from map 1's kept probabilities and final
    //    statistics (each run adds its own keys' column sums).
    const KeptA1Tiles<T, Mask> a1(kept1, mask, statistics1);
    IntegralLogits<T, KeptA1Tiles<T, Mask>> integral_logits(a1, column_sum, rows_before);
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
