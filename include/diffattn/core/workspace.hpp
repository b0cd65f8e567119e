// Scratch memory of the attention kernels, sized once and reused across calls.
//
// A kernel call grows the workspace at its entry if it is too small (the only place kernels
// allocate); reserve() it up front and the tiled loops allocate nothing. A workspace serves one
// call at a time: give each thread its own.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/online_softmax.hpp"

#include <algorithm>
#include <array>

namespace diffattn {

/// Query rows per block and keys per tile of the tiled core.
inline constexpr Index kQueryTile = 64;
inline constexpr Index kKeyTile = 128;

template <typename T>
class AttentionWorkspace {
public:
    AttentionWorkspace() = default;
    AttentionWorkspace(Index seq_len_q, Index seq_len_kv, Index head_dim, Index value_dim) {
        reserve(seq_len_q, seq_len_kv, head_dim, value_dim);
    }

    /// Makes room for calls up to these sizes. Memory: O(kQueryTile * (kKeyTile + 3 * value_dim) + seq_len_kv);
    /// nothing grows with seq_len_q (no N x S buffer anywhere).
    void reserve(Index /*seq_len_q*/, Index seq_len_kv, Index /*head_dim*/, Index value_dim) {
        if (logits_.rows() < kQueryTile || logits_.cols() < kKeyTile) logits_.resize(kQueryTile, kKeyTile);
        for (auto& state : states_) state.reserve(kQueryTile, value_dim);
        if (row_accumulator_.size() < value_dim) {
            row_accumulator_.resize(value_dim);
            row_compensation_.resize(value_dim);
        }
        if (column_accumulator_.size() < seq_len_kv) column_accumulator_.resize(seq_len_kv);
    }

    /// [kQueryTile x kKeyTile] logits / probabilities of one tile.
    RowMatrix<T>& logits() { return logits_; }
    /// Online-softmax state of map i (0: map 1, 1: map 2, 2: DINT's integral map).
    OnlineSoftmaxState<T>& state(std::size_t i) { return states_[i]; }
    /// [value_dim] running sum of O1 rows (DINT causal_mean / global_mean), in the wider Accumulator<T>.
    Vector<Accumulator<T>>& row_accumulator() { return row_accumulator_; }
    /// [value_dim] Kahan compensation of row_accumulator().
    Vector<Accumulator<T>>& row_compensation() { return row_compensation_; }
    /// [seq_len_kv] running column sums of A1 (DINT causal_softmax without a history).
    Vector<T>& column_accumulator() { return column_accumulator_; }

private:
    RowMatrix<T> logits_;
    std::array<OnlineSoftmaxState<T>, 3> states_;
    Vector<Accumulator<T>> row_accumulator_;
    Vector<Accumulator<T>> row_compensation_;
    Vector<T> column_accumulator_;
};

}  // namespace diffattn
