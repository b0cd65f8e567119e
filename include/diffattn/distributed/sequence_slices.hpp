// How one sequence is split across the ranks of a communicator (docs/distributed.md, "Split").
//
// Rank r holds the contiguous rows [begin(r), begin(r + 1)) of the queries, keys and values. The
// causal integrals of DINT (docs/math.md §2.3) need sums over all earlier rows, which over
// contiguous slices are one exclusive prefix across ranks (MPI_Exscan). Causal work is balanced by
// where the slices end, not by striping: rows [a, b) cost about b^2 - a^2 under a causal mask, so
// boundaries at N sqrt(r / R) give every rank the same tile work; a rank whose rows cost more (the
// middle ranks of DINT causal_softmax) gets fewer.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace diffattn::distributed {

struct SequenceSlices {
    std::vector<Index> begin;  ///< [R + 1] first row of each rank's slice, then the sequence length

    int ranks() const { return static_cast<int>(begin.size()) - 1; }
    Index length() const { return begin.back(); }
    Index first(int rank) const { return begin[static_cast<std::size_t>(rank)]; }
    Index rows(int rank) const { return first(rank + 1) - first(rank); }
    Index max_rows() const {
        Index most = 0;
        for (int r = 0; r < ranks(); ++r) most = std::max(most, rows(r));
        return most;
    }
};

/// Slices of `length` rows over `ranks` ranks, each at least one row, that give every rank the
/// same work when a row of rank r costs cost[r] times a row's attention work of one map pass
/// (`cost` empty: all equal). Under a causal mask rows [a, b) cost about b^2 - a^2, so the
/// boundaries satisfy cost[r] (b_{r+1}^2 - b_r^2) = const (with equal costs: length sqrt(r /
/// ranks)); else rows proportional to 1 / cost[r] (equal costs: equal rows).
/// Throws ShapeError when there are fewer rows than ranks, OptionError for costs that are not one
/// finite value > 0 per rank.
inline SequenceSlices balanced_slices(Index length, int ranks, bool causal, const std::vector<double>& cost = {}) {
    require<ShapeError>(ranks >= 1 && length >= ranks, "balanced_slices: a sequence of ", length,
                        " tokens cannot be split over ", ranks, " ranks (need at least one token per rank)");
    require<OptionError>(cost.empty() || cost.size() == static_cast<std::size_t>(ranks), "balanced_slices: ",
                         cost.size(), " costs for ", ranks, " ranks (need one per rank, or none)");
    std::vector<double> share(static_cast<std::size_t>(ranks) + 1, 0.0);  // share[r]: work before rank r
    for (int r = 0; r < ranks; ++r) {
        const double c = cost.empty() ? 1.0 : cost[static_cast<std::size_t>(r)];
        require<OptionError>(std::isfinite(c) && c > 0, "balanced_slices: rank ", r, "'s cost is ", c,
                             " (need a finite value > 0)");
        share[static_cast<std::size_t>(r) + 1] = share[static_cast<std::size_t>(r)] + 1.0 / c;
    }
    SequenceSlices slices;
    slices.begin.resize(static_cast<std::size_t>(ranks) + 1);
    for (int r = 0; r <= ranks; ++r) {
        const double fraction = r == ranks ? 1.0 : share[static_cast<std::size_t>(r)] / share.back();
        const double boundary = static_cast<double>(length) * (causal ? std::sqrt(fraction) : fraction);
        // Round, then keep at least one row for every rank on either side.
        const Index lowest = r, highest = length - (ranks - r);
        slices.begin[static_cast<std::size_t>(r)] =
            std::clamp<Index>(static_cast<Index>(std::llround(boundary)), lowest, highest);
    }
    return slices;
}

}  // namespace diffattn::distributed
