// Scratch memory of the attention kernels, sized once and reused across calls.
//
// A kernel call grows the workspace at its entry if it is too small (the only place kernels
// allocate); reserve() it up front and the tiled loops allocate nothing. A workspace serves one
// call at a time: a call with AttentionOptions::threads = T uses T sets of block scratch inside
// it, but two concurrent calls need two workspaces.
#pragma once

#include "diffattn/core/compute.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/dint_pipeline.hpp"
#include "diffattn/kernels/kept_probabilities.hpp"
#include "diffattn/kernels/online_softmax.hpp"
#include "diffattn/kernels/packed_tiles.hpp"
#include "diffattn/kernels/tiling.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <vector>

namespace diffattn {

/// Resizes `m` to at least [rows x cols] if it is smaller (never shrinks; the kernels' entry-time allocation).
template <typename Matrix>
void grow_to(Matrix& m, Index rows, Index cols) {
    if (m.rows() < rows || m.cols() < cols) m.resize(std::max(rows, m.rows()), std::max(cols, m.cols()));
}
template <typename Scalar>
void grow_to(Vector<Scalar>& v, Index size) {
    if (v.size() < size) v.resize(size);
}

/// What one thread needs to run one query group: a logits tile, the packed operands and the
/// online-softmax states of up to three maps, and the key and value tiles of operands stored in a
/// narrower scalar (a half-precision KV cache, converted tile by tile: docs/math.md §6).
/// O(kGroupRows * (head_dim + 3 * value_dim) + kQueryTile * value_dim + kKeyTile * kQueryTile +
/// kFewRowsKeyTile * (2 * kMinPackedRows + head_dim + value_dim)).
template <typename T>
struct BlockScratch {
    RowMatrix<T> logits;                           ///< [kQueryTile x kKeyTile] logits / probabilities of one tile
    /// [2 kMinPackedRows x kFewRowsKeyTile] the same for a call of few rows (two sets of rows: DINT's
    /// mean modes' two outputs' weights, DIFF V2's two maps' logits; diff_few_rows.hpp), apart so
    /// that the packed tile keeps short rows.
    RowMatrix<T> few_rows_logits;
    PackedTiles<T> packed;                         ///< packed operands of the tile products (packed_tiles.hpp)
    std::array<OnlineSoftmaxState<T>, 3> states;   ///< map 1, map 2, DINT's integral map (a group each)
    /// [kFewRowsKeyTile x head_dim] a key tile stored in another scalar or layout, as T rows
    RowMatrix<T> key_tile;
    /// [kFewRowsKeyTile x value_dim] a value tile stored in another scalar, as T
    RowMatrix<T> value_tile;

    /// bf16_dot: also room for the packings of the bf16_dot path.
    void reserve(Index head_dim, Index value_dim, bool bf16_dot = false) {
        grow_to(logits, kQueryTile, kKeyTile);
        grow_to(few_rows_logits, 2 * kMinPackedRows, kFewRowsKeyTile);
        grow_to(key_tile, kFewRowsKeyTile, head_dim);
        grow_to(value_tile, kFewRowsKeyTile, value_dim);
        packed.reserve(head_dim, value_dim, bf16_dot);
        for (auto& state : states) state.reserve(kGroupRows, value_dim);
    }
};

/// The scratch of softmax, DIFF and DINT calls up to the sizes it was reserved for.
template <typename T>
class AttentionWorkspace {
public:
    AttentionWorkspace() = default;
    AttentionWorkspace(Index seq_len_q, Index seq_len_kv, Index head_dim, Index value_dim, int threads = 1,
                       Compute compute = Compute::scalar) {
        reserve(seq_len_q, seq_len_kv, head_dim, value_dim, threads, 0, compute);
    }

    /// Makes room for calls up to these sizes with up to `threads` threads. Memory:
    /// threads * O(kGroupRows * (head_dim + 3 * value_dim)) (BlockScratch) + O(seq_len_kv) for DINT
    /// causal_softmax (+ DintPipeline's O((6 + 4 threads) * kGroupRows * value_dim) with several threads)
    /// + O(seq_len_q / kQueryTile * value_dim) for DINT's mean modes
    /// + O(threads * kMinPackedRows * value_dim) for the key split of few rows; nothing grows as
    /// seq_len_q * seq_len_kv (no N x S buffer anywhere)
    /// + O(3 * min(seq_len_q, kMinPackedRows) * seq_len_kv) for the probabilities that a call of few
    /// rows keeps: DIFF's two maps (kernels/diff_few_rows.hpp), DINT causal_softmax's three
    /// (kernels/dint_few_rows.hpp); at least kept_rows rows of them (GDA's decode step keeps gr + 1:
    /// kernels/gda_attention.hpp)
    /// + threads * O(kGroupRows * head_dim + kKeyTile * value_dim) BF16 packings where `compute`
    /// takes the bf16_dot or bf16_amx path (kernels/packed_tiles.hpp). The tiled core's products then follow
    /// `compute` until the next reserve() (each kernel call reserves with its own first).
    void reserve(Index seq_len_q, Index seq_len_kv, Index head_dim, Index value_dim, int threads = 1,
                 Index kept_rows = 0, Compute compute = Compute::scalar) {
        const int t = std::max(threads, 1);
        if (blocks_.size() < static_cast<std::size_t>(t)) blocks_.resize(static_cast<std::size_t>(t));
        const ProductPath path = product_path(compute);
        for (auto& block : blocks_) {
            block.reserve(head_dim, value_dim, uses_pair_packings(path));
            block.packed.path = path;
        }
        grow_to(block_row_sums_, query_block_count(seq_len_q), value_dim);
        grow_to(block_row_compensation_, query_block_count(seq_len_q), value_dim);
        grow_to(running_row_sum_, value_dim);
        grow_to(running_row_error_, value_dim);
        grow_to(column_sum_, seq_len_kv);
        kept_rows = std::max(kept_rows, kKeptMaps * std::min(seq_len_q, kMinPackedRows - 1));
        grow_to(kept_probabilities_, kept_rows * seq_len_kv);
        grow_to(kept_tile_maxima_, kept_rows * tiles_of(seq_len_kv, kShortestFewRowsKeyTile));
        if (t > 1) dint_pipeline_.reserve(seq_len_q, value_dim, t);
        // Key split of a call of few rows (kernels/key_split.hpp): up to three maps at once (DINT's
        // few rows: kernels/dint_few_rows.hpp), each in up to kKeySegmentsPerThread runs per thread.
        const auto parts = static_cast<std::size_t>(t > 1 ? 3 * kKeySegmentsPerThread * t : 0);
        if (key_split_parts_.size() < parts) key_split_parts_.resize(parts);
        // Twice the rows: DINT causal_mean keeps O1 = A1 V beside its output (multiply_values_once).
        for (auto& part : key_split_parts_) part.reserve(2 * kMinPackedRows, value_dim);
    }

    /// Block scratch of thread `thread` (0 for a single-threaded call).
    BlockScratch<T>& block(int thread) { return blocks_[static_cast<std::size_t>(thread)]; }

    /// DINT causal_mean / global_mean: per query block, the sum of its O1 rows and the Kahan
    /// compensation of that sum, in the wider Accumulator<T>: [blocks x value_dim] each.
    RowMatrix<Accumulator<T>>& block_row_sums() { return block_row_sums_; }
    RowMatrix<Accumulator<T>>& block_row_compensation() { return block_row_compensation_; }
    /// [value_dim] running sum of O1 rows over the blocks, and its Kahan compensation.
    Vector<Accumulator<T>>& running_row_sum() { return running_row_sum_; }
    Vector<Accumulator<T>>& running_row_error() { return running_row_error_; }

    /// DINT causal_softmax: running column sums of A1 [seq_len_kv].
    Vector<T>& column_sum() { return column_sum_; }
    /// DINT causal_softmax with several threads: the states of its pipeline of query groups.
    DintPipeline<T>& dint_pipeline() { return dint_pipeline_; }
    /// A call of few rows on several threads: one state per map and run of keys
    /// [3 * kKeySegmentsPerThread * threads], each of up to kMinPackedRows rows.
    std::vector<OnlineSoftmaxState<T>>& key_split_parts() { return key_split_parts_; }
    /// A call of few rows that keeps its probabilities (kernels/kept_probabilities.hpp): map `map`'s
    /// [rows x seq_len_kv], in tiles of `tile` keys (rows < kMinPackedRows, map < kKeptMaps, tile a
    /// multiple of kShortestFewRowsKeyTile, for which reserve() kept room).
    detail::KeptProbabilities<T> kept_probabilities(Index rows, Index seq_len_kv, Index tile, Index map) {
        assert(map < kKeptMaps);
        return kept_probabilities_from(map * rows, rows, seq_len_kv, tile);
    }
    /// The same for `rows` rows after the first `first_row` kept rows (maps of different row counts:
    /// GDA's gr signal rows, then its noise row).
    detail::KeptProbabilities<T> kept_probabilities_from(Index first_row, Index rows, Index seq_len_kv, Index tile) {
        const Index tiles = tiles_of(seq_len_kv, tile);
        assert(tile % kShortestFewRowsKeyTile == 0 && (first_row + rows) * seq_len_kv <= kept_probabilities_.size() &&
               (first_row + rows) * tiles <= kept_tile_maxima_.size());
        return {Eigen::Map<RowMatrix<T>>(kept_probabilities_.data() + first_row * seq_len_kv, rows, seq_len_kv),
                Eigen::Map<RowMatrix<T>>(kept_tile_maxima_.data() + first_row * tiles, tiles, rows), tile};
    }

private:
    static constexpr Index kKeptMaps = 3;  // the most maps whose probabilities a call of few rows keeps (DINT)
    static Index tiles_of(Index keys, Index tile) { return (keys + tile - 1) / tile; }
    std::vector<BlockScratch<T>> blocks_;
    RowMatrix<Accumulator<T>> block_row_sums_;
    RowMatrix<Accumulator<T>> block_row_compensation_;
    Vector<Accumulator<T>> running_row_sum_;
    Vector<Accumulator<T>> running_row_error_;
    Vector<T> column_sum_;
    DintPipeline<T> dint_pipeline_;
    std::vector<OnlineSoftmaxState<T>> key_split_parts_;
    Vector<T> kept_probabilities_;
    Vector<T> kept_tile_maxima_;
};

}  // namespace diffattn
