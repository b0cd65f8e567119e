// Ranking the logits of one position: which token ids come first.
//
// The order is total, so that sorting with it is defined for any input (a comparator that is not
// a strict weak ordering, as `a > b` is not once NaN appears, makes std::sort and
// std::partial_sort undefined behaviour): a larger logit first; every NaN after every number,
// -infinity included; equal logits, and NaNs among themselves, by the lower id.
// NaN logits come from NaN weights or inputs, which the model propagates without an error
// (README, "NaN or Inf in weights").
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace diffattn {

/// True when logit `a` (of id `a_id`) ranks before logit `b` (of id `b_id`): the order above.
template <typename T>
bool logit_ranks_before(T a, Index a_id, T b, Index b_id) {
    const bool a_nan = a != a, b_nan = b != b;
    if (a_nan != b_nan) return b_nan;  // a number before NaN
    if (!a_nan && a != b) return a > b;
    return a_id < b_id;
}

/// The id of the first logit of the ranking: the largest, the lowest id among equal ones; a NaN
/// only when every logit is NaN (then 0).
///   logits [V] (a row or column of a logits matrix), V >= 1
template <typename Derived>
Index top_logit(const Eigen::DenseBase<Derived>& logits) {
    require<ShapeError>(logits.size() > 0, "top_logit: the logits are empty");
    Index best = 0;
    for (Index i = 1; i < logits.size(); ++i) {
        if (logit_ranks_before(logits(i), i, logits(best), best)) best = i;
    }
    return best;
}

/// The ids of the k first logits of the ranking, first first (all V of them when k > V).
///   logits [V] (a row or column of a logits matrix)
template <typename Derived>
std::vector<Index> top_logits(const Eigen::DenseBase<Derived>& logits, Index k) {
    require<ShapeError>(k >= 0, "top_logits: k must be >= 0, got ", k);
    std::vector<Index> ids(static_cast<std::size_t>(logits.size()));
    std::iota(ids.begin(), ids.end(), Index(0));
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(std::min<Index>(k, logits.size()));
    std::partial_sort(ids.begin(), first, ids.end(),
                      [&](Index a, Index b) { return logit_ranks_before(logits(a), a, logits(b), b); });
    ids.erase(first, ids.end());
    return ids;
}

}  // namespace diffattn
