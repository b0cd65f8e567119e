// Sequence-parallel softmax, DIFF and DINT attention over MPI (docs/distributed.md): ring
// attention, with DINT's integral terms (docs/math.md §2.3) carried across ranks.
//
// Each rank holds one contiguous slice of the rows of Q, K and V of one sequence (S = N, no KV
// cache). Key / value blocks travel between the ranks (ring_pass.hpp) and fold into one
// online-softmax state per query group and map (ring_maps.hpp). Per kernel:
//   DIFF:                 both maps ride one pass (K1, K2, V).
//   DINT causal_mean:     the O1 row sums of the ranks before, by MPI_Exscan.
//   DINT global_mean:     the O1 row sums of all ranks, by MPI_Allreduce.
//   DINT causal_softmax:  the column sums of A1 over the rows of the ranks before (a vector over
//                         keys), by MPI_Iexscan; the integral map rides map 2's pass.
#pragma once

#include "diffattn/distributed/ring_integrals.hpp"
#include "diffattn/distributed/ring_maps.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace diffattn::distributed {

/// What a row of each rank costs in RingAttention::dint with `integral` over `ranks` ranks, for
/// balanced_slices: in map passes over its rows' keys. causal_softmax's three passes of maps; its
/// middle ranks (1 .. R-2) also add up their A1 columns, a pass that rebuilds every A1 tile (the
/// products and the exponentials, most of a map's work): about one more. The mean modes: two.
inline std::vector<double> dint_rank_costs(DintIntegral integral, int ranks) {
    std::vector<double> cost(static_cast<std::size_t>(std::max(ranks, 0)), 2.0);
    if (integral != DintIntegral::causal_softmax) return cost;
    for (int r = 0; r < ranks; ++r) cost[static_cast<std::size_t>(r)] = r > 0 && r < ranks - 1 ? 4.0 : 3.0;
    return cost;
}

template <typename T>
class RingAttention : public RingMaps<T> {
    using Base = RingMaps<T>;
    using Base::buffers_, Base::causal_, Base::comm_, Base::group_rows,
        Base::groups, Base::lambda_, Base::rank_, Base::rows_, Base::slices_, Base::start, Base::start_differential,
        Base::stats_, Base::totals_, Base::with_block_mask, Base::write_differential, Base::ws_;

public:
    /// comm: the ranks that share the sequence, rank order = slice order. first_row: where this
    /// rank's slice must start in the sequence (checked on every call), or -1 for anywhere.
    explicit RingAttention(MPI_Comm comm, Index first_row = -1) : RingMaps<T>(comm, first_row) {}

    /// softmax_attention (docs/math.md §2.1) of this rank's rows: q, k, v [n x d], [n x d], [n x dv],
    /// the slice's rows; out [n x dv]. Collective: every rank of comm calls it.
    void softmax(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v, MatrixRef<T> out,
                 const AttentionOptions& options = {}) {
        constexpr const char* function = "ring softmax_attention";
        detail::ResolvedOptions resolved{};
        lambda_ = 0;
        start(function, q, k, v, options, -1, [&] {
            resolved = detail::check_attention<T>(function, "Q", "K", "V", q, k, v, out, options);
            return resolved;
        });
        const std::array<ConstMatrixRef<T>, 1> queries{q};
        this->template attend_maps<1>(queries, std::array<ConstMatrixRef<T>, 2>{k, v}, resolved);
        for (Index g = 0; g < groups(); ++g) totals_[0][g].normalize_into(out.middleRows(g * kGroupRows, group_rows(g)));
    }

    /// diff_attention (docs/math.md §2.2) of this rank's rows; shapes as softmax. Collective.
    void diff(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
              const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, MatrixRef<T> out,
              const AttentionOptions& options = {}) {
        constexpr const char* function = "ring diff_attention";
        const detail::ResolvedOptions resolved = start_differential(function, q1, k1, q2, k2, v, lambda, out, options, -1);
        this->template attend_maps<2>({q1, q2}, std::array<ConstMatrixRef<T>, 3>{k1, k2, v}, resolved);
        write_differential(lambda, out);
    }

    /// dint_attention (docs/math.md §2.3) of this rank's rows, every integral; shapes as softmax.
    /// No history: the sequence starts at rank 0's first row. Collective.
    void dint(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
              const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda, DintIntegral integral,
              MatrixRef<T> out, const AttentionOptions& options = {}) {
        constexpr const char* function = "ring dint_attention";
        const detail::ResolvedOptions resolved =
            start_differential(function, q1, k1, q2, k2, v, lambda, out, options, static_cast<int>(integral), [&](
                                   const detail::ResolvedOptions& r) {
                detail::check_dint<T>(integral, r, detail::named("Q1", q1), detail::named("K1", k1), v.cols(), nullptr);
            });
        if (integral == DintIntegral::causal_softmax) {
            softmax_integral(q1, k1, q2, k2, v, lambda, resolved, out);
        } else {
            this->template attend_maps<2>({q1, q2}, std::array<ConstMatrixRef<T>, 3>{k1, k2, v}, resolved);
            write_differential(lambda, out);
            stats_.wait_seconds += add_mean_integral(totals_[0], rows_, integral, lambda, slices_.first(rank_),
                                                     slices_.length(), comm_, ws_, local_total_, other_total_, out);
        }
    }

private:
    using Wide = Accumulator<T>;

    /// DINT causal_softmax (docs/math.md §2.3) in three passes, ordered so that no rank waits for
    /// another's blocks or column sums while it has work (docs/distributed.md):
    ///   1. map 1 (K1, V);
    ///   2. (K1, V): ranks 1 .. R-2 add up their rows' A1 columns over every block (the last rank's
    ///      sums are needed by nobody); with mask none rank 0, whose rows have no earlier rows,
    ///      runs its integral map here, which leaves its column sums. Then MPI_Iexscan of the sums
    ///      (a vector over keys) starts;
    ///   3. (K1, K2, V): map 2 and the integral map. Under a causal mask rank 0 has only its own
    ///      block: it runs its integral map first and starts the prefix from there, so the others
    ///      have it by the time they reach an earlier rank's block. No earlier row sees a rank's
    ///      own keys, so the diagonal block's integral needs no prefix.
    void softmax_integral(const ConstMatrixRef<T>& q1, const ConstMatrixRef<T>& k1, const ConstMatrixRef<T>& q2,
                          const ConstMatrixRef<T>& k2, const ConstMatrixRef<T>& v, T lambda,
                          const detail::ResolvedOptions& resolved, MatrixRef<T>& out) {
        constexpr const char* function = "ring dint_attention";
        const int ranks = slices_.ranks(), last = ranks - 1;
        const Index length = slices_.length();
        VectorRef<T> column_sum(ws_.column_sum().head(length));  // the prefix, then this rank's rows added
        local_sums_.setZero(length);                             // this rank's rows only (ranks 1 .. R-2)
        prefix_sums_.setZero(length);
        column_sum.setZero();
        const bool rank0_integral_late = causal_ && rank_ == 0;  // in pass 3, before its map 2

        // 1. Map 1.
        this->template attend_maps<1>(std::array<ConstMatrixRef<T>, 1>{q1}, std::array<ConstMatrixRef<T>, 2>{k1, v},
                                      resolved);

        // 2. Column sums (ranks 1 .. R-2), rank 0's integral map with mask none; blocks travel as
        //    far as the last rank that uses them.
        ring_pass<T>(comm_, slices_, std::array<ConstMatrixRef<T>, 2>{k1, v}, causal_, causal_ ? std::max(0, last - 1) : last,
                     buffers_, stats_, [&](const RingBlock<T>& block, const auto& progress) {
                         if (rank_ == 0 && !causal_) {
                             integral_block(q1, block, resolved, column_sum, progress);
                         } else if (rank_ > 0 && rank_ < last) {
                             column_sums(q1, block, resolved, local_sums_, progress);
                         }
                     });
        MPI_Request& prefix = buffers_.background;  // driven by the passes' progress() calls
        const auto start_prefix = [&] {
            if (ranks == 1) return;
            const T* send = rank_ == 0 ? column_sum.data() : local_sums_.data();
            check_mpi(MPI_Iexscan(send, prefix_sums_.data(), int(length), mpi_type<T>(), MPI_SUM, comm_, &prefix),
                      function, "MPI_Iexscan");
        };
        bool have_prefix = false;
        const auto wait_prefix = [&] {
            if (have_prefix) return;
            have_prefix = true;
            const double start = MPI_Wtime();
            check_mpi(MPI_Wait(&prefix, MPI_STATUS_IGNORE), function, "MPI_Wait");
            stats_.wait_seconds += MPI_Wtime() - start;
            const Index earlier = causal_ ? slices_.first(rank_) : length;  // the keys the prefix covers
            if (rank_ > 0) column_sum.head(earlier) += prefix_sums_.head(earlier);
        };
        if (!rank0_integral_late) start_prefix();

        // 3. Map 2 and the integral map, block by block.
        ring_pass<T>(comm_, slices_, std::array<ConstMatrixRef<T>, 3>{k1, k2, v}, causal_, last, buffers_, stats_,
                     [&](const RingBlock<T>& block, const auto& progress) {
                         if (rank0_integral_late) {
                             integral_block(q1, block, resolved, column_sum, progress);
                             start_prefix();
                         }
                         this->template fold_maps<1>(std::array<ConstMatrixRef<T>, 1>{q2}, block, resolved, 1, 1,
                                                     progress);
                         if (rank_ > 0) {
                             if (!causal_ || block.origin != rank_) wait_prefix();
                             integral_block(q1, block, resolved, column_sum, progress);
                         }
                     });
        wait_prefix();
        write_differential(lambda, out);
        for (Index g = 0; g < groups(); ++g) {
            for (Index r = 0; r < group_rows(g); ++r) out.row(g * kGroupRows + r) += lambda * totals_[2][g].normalized_row(r);
        }
    }

    /// The integral map's part over `block`, folded into totals_[2] (ring_integrals.hpp).
    template <typename Progress>
    void integral_block(const ConstMatrixRef<T>& q1, const RingBlock<T>& block, const detail::ResolvedOptions& resolved,
                        VectorRef<T>& column_sum, const Progress& progress) {
        const ConstMatrixRef<T> k1(block.piece(0)), v(block.last_piece());
        with_block_mask(block, [&](const auto& mask) {
            integral_map_part(q1, k1, v, mask, T(resolved.scale), totals_[0], slices_.first(rank_),
                              VectorRef<T>(column_sum.segment(block.first, block.rows)), ws_.block(0), totals_[2],
                              progress);
        });
    }

    /// sums[key] += the A1 columns of this slice's rows over the keys of `block` (ring_integrals.hpp).
    template <typename Progress>
    void column_sums(const ConstMatrixRef<T>& q1, const RingBlock<T>& block, const detail::ResolvedOptions& resolved,
                     Vector<T>& sums, const Progress& progress) {
        const ConstMatrixRef<T> k1(block.piece(0));
        with_block_mask(block, [&](const auto& mask) {
            add_a1_column_sums(q1, k1, mask, T(resolved.scale), totals_[0],
                               VectorRef<T>(sums.segment(block.first, block.rows)), ws_.block(0), progress);
        });
    }

    Vector<T> local_sums_, prefix_sums_;   ///< causal_softmax: [S] A1 column sums
    Vector<Wide> local_total_, other_total_;  ///< mean modes: [dv] O1 row sums
};

}  // namespace diffattn::distributed
