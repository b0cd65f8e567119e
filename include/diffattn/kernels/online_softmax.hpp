// Online-softmax state of one block of query rows (FlashAttention's {o, m, l}).
//
// For each row r it keeps the running maximum m_r of the logits seen so far, the running sum
// l_r = sum_j exp(logit_j - m_r) and the un-normalised output acc_r = sum_j exp(logit_j - m_r) v_j.
// A new tile of logits rescales the old values by exp(m_old - m_new) (docs/math.md §7: softmax subtracts
// the row max). A row that saw no key has l_r = 0 and normalises to an all-zero row, never NaN.
// A state serves a whole query group (kGroupRows); the core folds it one block of rows at a time.
#pragma once

#include "diffattn/core/types.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <type_traits>

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
            new_max_.resize(max_rows);
            rescale_.resize(max_rows);
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

    /// Folds one tile of logits into rows [row_begin, row_begin + logits.rows()) of the state: updates
    /// m and l and rescales acc, but leaves acc += P V to the caller (the core runs that product on
    /// packed operands), through accumulator_rows().
    ///   logits:      [rows x k] logits, already scaled (the logical logits), with rows padded: its
    ///                outer stride is at least k rounded up to a SIMD packet, and the padding is scratch.
    ///                Overwritten with the probabilities exp(logit - m_new) (0 where masked).
    ///   visible(r):  keys [0, visible(r)) of the tile are visible to row r of the tile (a prefix);
    ///                pass `masked = false` when every row sees the whole tile (the fast path).
    ///   bf16:        write the probabilities rounded to BF16 (the widened BF16 products' P,
    ///                docs/math.md §7.1); the row sums take them unrounded either way.
    /// Returns the fewest keys any row sees (k when unmasked): value rows past it are hidden from some row.
    template <typename Logits, typename Visible>
    Index fold(Index row_begin, Logits&& logits, bool masked, const Visible& visible, bool bf16 = false) {
        namespace ei = Eigen::internal;
        using Packet = typename ei::packet_traits<T>::type;
        constexpr Index lanes = ei::packet_traits<T>::size;
        constexpr Index chunk_rows = 16;  // rows whose rescale factors share one vector exp
        constexpr T minus_inf = -std::numeric_limits<T>::infinity();
        const Index k = logits.cols();
        // Whole packets only, so no scalar exp for a tail of odd keys: hidden and padding lanes
        // hold -inf for the max, and are zeroed after the exp.
        const Index width = (k + lanes - 1) / lanes * lanes;
        assert(row_begin + logits.rows() <= rows_ && logits.outerStride() >= width);
        const auto keys_seen = [&](Index r) { return masked ? visible(r) : k; };
        Index min_visible = k;
        for (Index r0 = 0; r0 < logits.rows(); r0 += chunk_rows) {
            const Index chunk = std::min(chunk_rows, logits.rows() - r0), i0 = row_begin + r0;
            // Pass 1, per row: hide the masked keys and find the new running max.
            for (Index r = r0; r < r0 + chunk; ++r) {
                const Index n = keys_seen(r), i = row_begin + r;
                T* row = &logits(r, 0);
                min_visible = std::min(min_visible, n);
                new_max_[i] = row_max_[i];
                if (n == 0) continue;
                std::fill(row + n, row + width, minus_inf);
                Packet packet_max = ei::pset1<Packet>(minus_inf);
                for (Index j = 0; j < width; j += lanes) packet_max = ei::pmax(packet_max, ei::ploadu<Packet>(row + j));
                new_max_[i] = std::max(row_max_[i], ei::predux_max(packet_max));
            }
            // exp(m_old - m_new) of the chunk's rows in one vector exp rather than a scalar exp per
            // row and tile; exp(-inf) = 0 on the first tile.
            rescale_.segment(i0, chunk) = (row_max_.segment(i0, chunk) - new_max_.segment(i0, chunk)).array().exp();
            // Pass 2, per row while it is in L1: exp and its sum in one loop. NaN logits propagate
            // into their own row only.
            for (Index r = r0; r < r0 + chunk; ++r) {
                const Index n = keys_seen(r), i = row_begin + r;
                T* row = &logits(r, 0);
                if (n == 0) {  // nothing visible: state unchanged, probabilities all zero
                    std::fill(row, row + k, T(0));
                    continue;
                }
                const Packet shift = ei::pset1<Packet>(new_max_[i]);
                Packet packet_sum = ei::pset1<Packet>(T(0));
                const Index full_end = n / lanes * lanes;  // packets of visible keys only
                for (Index j = 0; j < full_end; j += lanes) {
                    const Packet p = ei::pexp(ei::psub(ei::ploadu<Packet>(row + j), shift));
                    ei::pstoreu(row + j, bf16 ? rounded_to_bf16(p) : p);
                    packet_sum = ei::padd(packet_sum, p);
                }
                if (full_end < n) ei::pstoreu(row + full_end, ei::pexp(ei::psub(ei::ploadu<Packet>(row + full_end), shift)));
                // Hidden and padding lanes become exact zeros: Eigen's exp(-inf) is ~1e-38, not 0, and
                // a hidden key must add nothing to the sum or to P V, however large its value.
                std::fill(row + n, row + width, T(0));
                if (full_end < n) {
                    const Packet tail = ei::ploadu<Packet>(row + full_end);
                    packet_sum = ei::padd(packet_sum, tail);
                    if (bf16) ei::pstoreu(row + full_end, rounded_to_bf16(tail));
                }
                const T rescale = rescale_[i];
                row_sum_[i] = row_sum_[i] * rescale + ei::predux(packet_sum);
                row_max_[i] = new_max_[i];
                if (rescale != T(1)) accumulator().row(i) *= rescale;
            }
        }
        return min_visible;
    }

    /// Becomes the state of the same rows over the union of the keys that `parts` saw (disjoint
    /// runs of keys, each folded into its own state, e.g. a decode call's key split): the parts
    /// merged one by one. The parts have this state's reserved sizes or less.
    void merge(const OnlineSoftmaxState* parts, Index count) {
        assert(count > 0);
        reset(parts[0].rows(), parts[0].value_dim_);
        for (Index s = 0; s < count; ++s) merge(parts[s]);
    }

    /// Folds in `part`, the state of the same rows over other keys (a key split), keeping the
    /// result un-normalised: the merge of add_merged_row, m = max, l and acc rescaled by exp(m_s - m).
    /// A row `part` saw no key of (l = 0) is unchanged; a NaN in either reaches the row.
    void merge(const OnlineSoftmaxState& part) {
        assert(part.rows_ == rows_ && part.value_dim_ == value_dim_);
        for (Index r = 0; r < rows_; ++r) {
            const T part_sum = part.row_sum_[r], part_max = part.row_max_[r];
            if (part_sum == T(0)) continue;
            if (row_sum_[r] == T(0)) {
                row_max_[r] = part_max;
                row_sum_[r] = part_sum;
                accumulator().row(r) = part.accumulator().row(r);
                continue;
            }
            const T merged = part_max > row_max_[r] || std::isnan(part_max) ? part_max : row_max_[r];
            const T mine = std::exp(row_max_[r] - merged), theirs = std::exp(part_max - merged);
            row_sum_[r] = row_sum_[r] * mine + part_sum * theirs;
            accumulator().row(r) = accumulator().row(r) * mine + part.accumulator().row(r) * theirs;
            row_max_[r] = merged;
        }
    }

    /// acc rows [row_begin, row_begin + rows) [rows x value_dim]: where the caller adds P V.
    auto accumulator_rows(Index row_begin, Index rows) { return accumulator().middleRows(row_begin, rows); }

    /// 1 / l_r, or 0 for a row that saw no key (so it normalises to zeros).
    T inverse_sum(Index r) const { return row_sum_[r] > T(0) ? T(1) / row_sum_[r] : T(0); }

    /// Row r of the normalised output O = acc / l (an expression; evaluate it into a destination).
    auto normalized_row(Index r) const { return accumulator().row(r) * inverse_sum(r); }

    /// Writes the normalised output of every row: out [rows x value_dim].
    template <typename Out>
    void normalize_into(Out&& out) const {
        for (Index r = 0; r < rows_; ++r) out.row(r) = normalized_row(r);
    }

    /// Row r of the un-normalised output acc [value_dim].
    auto accumulator_row(Index r) const { return accumulator().row(r); }

    Index rows() const { return rows_; }
    /// Final running maximum of row r (scaled logits) and sum: A[r, j] = exp(logit_j - m_r) / l_r.
    T row_max(Index r) const { return row_max_[r]; }
    T row_sum(Index r) const { return row_sum_[r]; }
    /// The same for every row of the block: [rows] segments.
    auto row_maxima() const { return row_max_.head(rows_); }
    auto row_sums() const { return row_sum_.head(rows_); }

private:
    /// p rounded to BF16 (float states only: the BF16 products are float kernels').
    template <typename Packet>
    static Packet rounded_to_bf16(const Packet& p) {
        if constexpr (std::is_same_v<T, float>) {
            return detail::round_probabilities_to_bf16(p);
        } else {
            return p;
        }
    }
    auto accumulator() { return acc_.topLeftCorner(rows_, value_dim_); }
    auto accumulator() const { return acc_.topLeftCorner(rows_, value_dim_); }

    RowMatrix<T> acc_;  // [max_rows x max_value_dim], used top-left [rows x value_dim]
    Vector<T> row_max_;  // [max_rows] running max of the scaled logits
    Vector<T> row_sum_;  // [max_rows] running sum of exp(logit - row_max)
    Vector<T> new_max_;  // [max_rows] fold()'s scratch: the max after the tile
    Vector<T> rescale_;  // [max_rows] fold()'s scratch: exp(old max - new max)
    Index rows_ = 0;
    Index value_dim_ = 0;
};

/// out_row += scale * row r of the softmax output over the union of the keys that `parts` saw: the
/// states of the same query rows over disjoint runs of keys (a key split, as in FlashDecoding),
/// merged in their order: m = max_s m_s, l = sum_s l_s exp(m_s - m), acc = sum_s acc_s exp(m_s - m).
/// A part whose row saw no key (l = 0) adds nothing; if no part saw one, out_row is unchanged (the
/// all-zero row of docs/math.md §1). A NaN in a part reaches the whole row, as in one state.
template <typename T, typename OutRow>
void add_merged_row(const OnlineSoftmaxState<T>* parts, Index count, Index r, T scale, OutRow&& out_row) {
    T merged_max = -std::numeric_limits<T>::infinity();
    bool seen = false;
    for (Index s = 0; s < count; ++s) {
        if (parts[s].row_sum(r) == T(0)) continue;
        const T m = parts[s].row_max(r);
        merged_max = seen && !(m > merged_max) && !std::isnan(m) ? merged_max : m;  // NaN wins
        seen = true;
    }
    if (!seen) return;
    T merged_sum = T(0);
    for (Index s = 0; s < count; ++s) {
        if (parts[s].row_sum(r) != T(0)) merged_sum += parts[s].row_sum(r) * std::exp(parts[s].row_max(r) - merged_max);
    }
    const T weight = scale / merged_sum;
    for (Index s = 0; s < count; ++s) {
        if (parts[s].row_sum(r) != T(0)) {
            out_row += (weight * std::exp(parts[s].row_max(r) - merged_max)) * parts[s].accumulator_row(r);
        }
    }
}

}  // namespace diffattn
