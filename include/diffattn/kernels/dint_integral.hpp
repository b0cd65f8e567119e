// DINT's integral term (docs/math.md §2.3) as an epilogue on top of the DIFF block step, using the
// docs/math.md §2.3 identities:
//   causal_mean:    I V = running mean of the rows of O1 = A1 V          (O(N dv) extra work)
//   global_mean:    I V = mean of all rows of O1                          (O(N dv) extra work)
//   causal_softmax: I = softmax_M(G), G = running column mean of A1; I V is one more pass of
//                   the tiled core whose logits policy rebuilds A1 tiles from map 1's final
//                   {m, l} and turns them into G rows with O(S) running column sums.
// Here: the logits policies of the causal_softmax pass (A1Tiles, IntegralLogits), the compensated
// sum of the mean modes (KahanSum) and the mean modes themselves (dint_mean_integral; a call of few
// rows takes diff_few_rows.hpp's passes, with O1 from the same value tiles).
// dint_attention.hpp runs the causal_softmax pass, on several threads through dint_schedule.hpp.
#pragma once

#include "diffattn/kernels/diff_attention.hpp"

namespace diffattn::detail {

/// A1 tiles of the query rows [first_row, first_row + rows), rebuilt from map 1's final statistics
/// of those rows: A1[n, j] = exp(s q1_n . k1_j - m_n) / l_n, and 0 where the mask hides key j from
/// row n. The logits come from map 1's own policy Logits1 (same packing, same products), so a
/// rebuilt tile matches the probabilities map 1 normalised. (A call of few rows rebuilds A1 from
/// what it kept instead: dint_few_rows.hpp's KeptA1Tiles.)
template <typename T, typename Mask, typename Logits1 = DotProductLogits<T>>
class A1Tiles {
public:
    /// row_max, row_sum: map 1's final m and l of the rows [first_row, first_row + row_max.size()).
    A1Tiles(const Logits1& logits1, const Mask& mask, Index first_row, ConstVectorRef<T> row_max,
            ConstVectorRef<T> row_sum)
        : logits1_(logits1), mask_(mask), first_row_(first_row), row_max_(row_max), row_sum_(row_sum) {}

    /// Packing as DotProductLogits (the core's three-step logits protocol).
    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        logits1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed, RowMatrix<T>& key_tile) const {
        logits1_.pack_keys(k_begin, keys, packed, key_tile);
    }

    /// tile [rows x keys] = A1[q_begin + r, k_begin + j]; group_begin and packed as DotProductLogits.
    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed,
                    RowMatrix<T>& key_tile) const {
        const Index keys = tile.cols();
        logits1_(q_begin, group_begin, k_begin, tile, packed, key_tile);
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            const Index i = q_begin - first_row_ + r;
            const Index visible = visible_keys_in_tile(mask_, q_begin + r, k_begin, keys);
            const T inverse_sum = row_sum_[i] > T(0) ? T(1) / row_sum_[i] : T(0);
            row.tail(keys - visible).setZero();
            if (visible > 0) {
                row.head(visible) = ((row.head(visible).array() - row_max_[i]).exp() * inverse_sum).matrix();
            }
        }
    }

private:
    const Logits1& logits1_;  // s Q1 K1^T
    const Mask& mask_;
    Index first_row_;
    ConstVectorRef<T> row_max_;
    ConstVectorRef<T> row_sum_;
};

/// Logits policy of DINT's causal_softmax integral map (dint-transformer-v2 eq. 5-6).
/// For a tile it rebuilds the A1 tile, adds each row into the running column sums of A1 and writes
/// G[r, j] = column_sum[j] / (rows so far) — values in [0, 1], used with logit scale 1.
/// Rows must reach each key tile in order: column sum j must hold every earlier row of the
/// sequence when a row reads it. The core visits key tiles in the outer loop and the blocks of a
/// group in order in the inner one, and the sums of one key tile depend only on that tile, so a
/// whole group can run at once: each block finds the earlier blocks' rows already added to the
/// tile's columns (a block that skips a tile wholly in its future would only have added zeros).
/// It reads A1 through the policy A1 (A1Tiles, which packs Q1 and K1 as map 1 does, or the tiles a
/// call of few rows rebuilds from what it kept: dint_few_rows.hpp).
template <typename T, typename A1>
class IntegralLogits {
public:
    IntegralLogits(const A1& a1, VectorRef<T> column_sum, Index rows_before)
        : a1_(a1), column_sum_(column_sum), rows_before_(rows_before) {}

    void pack_queries(Index q_begin, Index q_rows, PackedTiles<T>& packed) const {
        a1_.pack_queries(q_begin, q_rows, packed);
    }
    void pack_keys(Index k_begin, Index keys, PackedTiles<T>& packed, RowMatrix<T>& key_tile) const {
        a1_.pack_keys(k_begin, keys, packed, key_tile);
    }

    template <typename Tile>
    void operator()(Index q_begin, Index group_begin, Index k_begin, Tile& tile, const PackedTiles<T>* packed,
                    RowMatrix<T>& key_tile) {
        a1_(q_begin, group_begin, k_begin, tile, packed, key_tile);
        auto column_sum = column_sum_.segment(k_begin, tile.cols());
        for (Index r = 0; r < tile.rows(); ++r) {
            auto row = tile.row(r);
            column_sum += row.transpose();  // the row is final: later keys are masked for it (docs/math.md §6)
            row = column_sum.transpose() / static_cast<T>(rows_before_ + q_begin + r + 1);
        }
    }

private:
    const A1& a1_;
    VectorRef<T> column_sum_;  // [S] column sums of A1 over all rows so far
    Index rows_before_;        // query rows of earlier calls (the cache)
};

/// Kahan's compensated sum of vectors [size] in the scalar Wide, over caller-owned storage (the
/// workspace's, so adding allocates nothing): `sum` is the running sum and `error` what rounding
/// took from it, subtracted from the next term. Identical terms (the rows of a one-hot map) then
/// add up without piling up rounding errors.
template <typename Wide>
class KahanSum {
public:
    KahanSum(VectorRef<Wide> sum, VectorRef<Wide> error) : sum_(sum), error_(error) {}

    void set_zero() {
        sum_.setZero();
        error_.setZero();
    }

    /// sum += value, entry by entry; value [size], of any scalar that converts to Wide.
    template <typename Value>
    void add(const Value& value) {
        for (Index j = 0; j < sum_.size(); ++j) add(j, Wide(value[j]));
    }

    /// sum[j] += value.
    void add(Index j, Wide value) {
        const Wide term = value - error_[j];
        const Wide total = sum_[j] + term;
        error_[j] = (total - sum_[j]) - term;
        sum_[j] = total;
    }

    /// The compensated value of entry j: sum - error.
    Wide compensated(Index j) const { return sum_[j] - error_[j]; }

    /// The running sum (without the compensation) [size].
    VectorRef<Wide>& sum() { return sum_; }
    const VectorRef<Wide>& sum() const { return sum_; }

private:
    VectorRef<Wide> sum_;    // [size]
    VectorRef<Wide> error_;  // [size]
};

/// The integral of the mean modes (docs/math.md §2.3: I V is the running or global mean of the rows of
/// O1 = A1 V), in three steps so that query groups can run on several threads and the result does
/// not depend on the thread count:
///   1. each group writes its DIFF rows (differential_block, as diff_attention) and, per block of
///      kQueryTile rows, the Kahan sum of the block's O1 rows (causal_mean also adds the part of
///      each row's running mean that comes from rows of its own block);
///   2. exclusive prefix sums over the blocks, continuing the history (sequential, O(blocks dv));
///   3. each row gets the part that comes from earlier blocks (causal_mean) or the global mean.
/// Sums run in Accumulator<T> with Kahan compensation, so identical rows (one-hot maps) do not pile
/// up rounding errors.
template <typename T, typename S, typename Mask>
void dint_mean_integral(const DotProductLogits<T, S>& logits1, const DotProductLogits<T, S>& logits2, const Mask& mask,
                        const ConstMatrixRef<S>& v, T lambda, DintIntegral integral,
                        const ResolvedOptions& resolved, Index seq_len_q, DintHistory<T>* history,
                        AttentionWorkspace<T>& ws, MatrixRef<T>& out) {
    using Wide = Accumulator<T>;
    const Index value_dim = v.cols();
    const Index rows_before = history != nullptr ? history->rows : 0;
    const bool causal = integral == DintIntegral::causal_mean;
    RowMatrix<Wide>& block_sums = ws.block_row_sums();            // [blocks x dv]
    RowMatrix<Wide>& block_errors = ws.block_row_compensation();  // [blocks x dv]
    const auto block_sum = [&](Index block) {
        return KahanSum<Wide>(block_sums.row(block).head(value_dim), block_errors.row(block).head(value_dim));
    };
    const auto row_weight = [&](Index n) { return Wide(lambda) / Wide(rows_before + n + 1); };

    const int key_threads = key_split_threads(seq_len_q, resolved.threads);
    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>& scratch) {
        // Sums per block rather than per group: a row's in-block running sum then adds at most
        // kQueryTile terms. Groups and blocks are fixed runs of rows, so the sums do not depend on
        // the thread count. o1_row(r): O1's row r of the group.
        const auto add_block_sums = [&](const auto& o1_row) {
            for (Index b_offset = 0; b_offset < group_rows; b_offset += kQueryTile) {
                const Index q_begin = group_begin + b_offset, q_rows = std::min(kQueryTile, group_rows - b_offset);
                KahanSum<Wide> sum = block_sum(q_begin / kQueryTile);
                sum.set_zero();
                for (Index r = 0; r < q_rows; ++r) {
                    sum.add(o1_row(b_offset + r));
                    // docs/math.md §1: a query allowed no key gets an all-zero row (the DIFF part already is).
                    if (causal && mask.key_end(q_begin + r) > 0) {
                        out.row(q_begin + r) += (row_weight(q_begin + r) * sum.sum().transpose()).template cast<T>();
                    }
                }
            }
        };
        if (group_begin == 0 && group_rows < kMinPackedRows) {
            // A call of few rows (a decode step): diff_few_rows' passes, reading K1, K2 and V once,
            // with O1 = A1 V from the same value tiles, into the integral map's unused state.
            OnlineSoftmaxState<T>& o1 = scratch.states[2];
            o1.reset(group_rows, value_dim);
            diff_few_rows(logits1, logits2, mask, v, lambda, RowFactors<T>{}, group_rows, key_threads, ws, scratch, out,
                          o1.accumulator_rows(0, group_rows));
            add_block_sums([&](Index r) { return o1.accumulator_rows(0, group_rows).row(r); });
            return;
        }
        differential_block(logits1, logits2, mask, group_begin, group_rows, v, lambda, scratch, out);
        const OnlineSoftmaxState<T>& map1 = scratch.states[0];  // the group's rows
        add_block_sums([&](Index r) { return map1.normalized_row(r); });
    });

    // Block b's row becomes the sum of the O1 rows of every earlier row (history and blocks < b).
    KahanSum<Wide> running(ws.running_row_sum().head(value_dim), ws.running_row_error().head(value_dim));
    running.set_zero();
    if (causal && history != nullptr && history->rows > 0) running.sum() = history->o1_row_sum.template cast<Wide>();
    const Index blocks = query_block_count(seq_len_q);
    for (Index b = 0; b < blocks; ++b) {
        const KahanSum<Wide> block = block_sum(b);
        for (Index j = 0; j < value_dim; ++j) {
            const Wide block_total = block.compensated(j);
            block_sums(b, j) = running.sum()[j];
            running.add(j, block_total);
        }
    }

    const Wide global_weight = seq_len_q > 0 ? Wide(lambda) / Wide(seq_len_q) : Wide(0);
    for_each_query_group(seq_len_q, resolved.threads, mask, ws, [&](Index group_begin, Index group_rows,
                                                                     BlockScratch<T>&) {
        for (Index n = group_begin; n < group_begin + group_rows; ++n) {
            if (mask.key_end(n) == 0) continue;  // docs/math.md §1: stays an all-zero row
            if (causal) {
                const Index block = n / kQueryTile;
                if (block > 0 || rows_before > 0) {
                    out.row(n) += (row_weight(n) * block_sums.row(block).head(value_dim)).template cast<T>();
                }
            } else {
                out.row(n) += (global_weight * running.sum().transpose()).template cast<T>();
            }
        }
    });
    if (causal && history != nullptr) history->o1_row_sum = running.sum().template cast<T>();
}

}  // namespace diffattn::detail
