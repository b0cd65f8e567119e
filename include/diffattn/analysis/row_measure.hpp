// The attention measure of one row of a combined attention map: how much of the row lands on an
// answer span and on the noise context, and how much of it is negative. The one place the
// definition lives (docs/analysis.md, "The measure"; the same as docs/retrieval.md's, which the
// PyTorch figures of the retrieval models use).
//
// The combined map of a row (docs/math.md §2: A, A1 - lambda A2, A1 - lambda A2 + lambda I, or
// diff_v2's A1 - g A2) sums to `row_sum`: 1 for softmax and DINT, 1 - lambda for DIFF, 1 - g for
// diff_v2. Raw masses would make a map whose rows sum to less look as if it attended less to
// everything, noise included, so every mass is divided by the row sum:
//   answer            = sum_{j in answer} c_j / row_sum
//   noise             = sum_{j in noise}  c_j / row_sum
//   negative_mass     = -sum_{c_j < 0} c_j / row_sum        (>= 0 when row_sum > 0)
//   negative_fraction = #{j visible : c_j < 0} / #visible
// Negative entries count with their sign in `answer` and `noise` (a negative weight on a noise
// token cancels some of the positive one: that is what the combined map does to the values).
// Only the keys the row may see count (the others are exact zeros). A row sum of 0 makes the
// normalised figures NaN, never a division by a stand-in.
#pragma once

#include "diffattn/core/types.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace diffattn::analysis {

/// The measure of one row (see the header comment). Raw masses are kept beside the normalised ones.
struct RowMeasure {
    double row_sum = 0;            ///< sum of the combined row over the visible keys
    double answer = 0;             ///< answer mass / row_sum
    double noise = 0;              ///< noise mass / row_sum
    double negative_mass = 0;      ///< -(sum of the negative entries) / row_sum
    double negative_fraction = 0;  ///< negative entries / visible keys
    double answer_raw = 0;         ///< answer mass, not normalised
    double noise_raw = 0;          ///< noise mass, not normalised
};

/// Sum of row[j] over the positions j of `positions` below row.size() (the visible keys; later
/// positions are exact zeros of the map). `positions` is strictly increasing.
inline double mass_on(const Eigen::Ref<const Vector<double>>& row, const std::vector<Index>& positions) {
    double sum = 0;
    for (const Index j : positions) {
        if (j >= row.size()) break;
        sum += row[j];
    }
    return sum;
}

/// The measure of a combined row over its visible keys, row [visible]; answer and noise are
/// strictly increasing key positions (checked where they enter, analysis/analysis_request.hpp).
inline RowMeasure measure_row(const Eigen::Ref<const Vector<double>>& row, const std::vector<Index>& answer,
                              const std::vector<Index>& noise) {
    RowMeasure m;
    double negative = 0;
    Index negatives = 0;
    for (Index j = 0; j < row.size(); ++j) {
        m.row_sum += row[j];
        if (row[j] < 0) {
            negative += row[j];
            ++negatives;
        }
    }
    m.answer_raw = mass_on(row, answer);
    m.noise_raw = mass_on(row, noise);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const bool normalisable = m.row_sum != 0;
    m.answer = normalisable ? m.answer_raw / m.row_sum : nan;
    m.noise = normalisable ? m.noise_raw / m.row_sum : nan;
    m.negative_mass = normalisable ? -negative / m.row_sum : nan;
    m.negative_fraction = row.size() > 0 ? static_cast<double>(negatives) / static_cast<double>(row.size()) : 0.0;
    return m;
}

/// Shannon entropy -sum p ln p (nats) of a probability row (a softmax map); zeros add nothing.
inline double entropy(const Eigen::Ref<const Vector<double>>& p) {
    double h = 0;
    for (Index j = 0; j < p.size(); ++j) {
        if (p[j] > 0) h -= p[j] * std::log(p[j]);
    }
    return h;
}

}  // namespace diffattn::analysis
