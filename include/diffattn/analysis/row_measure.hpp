// The attention measure of one row of a combined attention map: the sums over the row's keys that
// every figure of the analysis is built from (docs/analysis.md, "The measures", the one place the
// definitions are written out; tools/retrieval_figures.py computes the same in PyTorch).
//
// The combined map of a row c (docs/math.md §2: A, A1 - lambda A2, A1 - lambda A2 + lambda I, or
// diff_v2's A1 - g A2) is signed and its sum S is 1 for softmax and DINT, 1 - lambda for DIFF,
// 1 - g for diff_v2. Two readings of "how much of the row lands on the answer" follow:
//   - by absolute weight, |c_j| / sum_j |c_j|: a share in [0, 1] that counts a negative entry as
//     weight (it moves the head's output by |c_j| v_j as a positive one does), comparable across
//     kinds; the headline figure;
//   - signed, divided by S: answer + noise + the rest = 1, so a row that over-subtracts the noise
//     reads as "more than all of it on the answer"; kept only as a secondary figure.
// A row only stores sums (additive over rows, so the figures of many rows are ratios of sums,
// analysis/row_summary.hpp); the per-row ratios are the members below. Only the keys the row may
// see count (the others are exact zeros of the map).
#pragma once

#include "diffattn/core/types.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace diffattn::analysis {

/// num / den, NaN when den is 0 (never a division by a stand-in).
inline double ratio_or_nan(double num, double den) {
    return den != 0 ? num / den : std::numeric_limits<double>::quiet_NaN();
}

/// The sums of one combined row c over its visible keys (docs/analysis.md, "The measures").
struct RowMeasure {
    double row_sum = 0;          ///< S = sum_j c_j
    double abs_sum = 0;          ///< W = sum_j |c_j|, the row's absolute weight
    double answer_positive = 0;  ///< sum of the c_j > 0 over the answer positions
    double answer_negative = 0;  ///< sum of the c_j < 0 over the answer positions (<= 0)
    double noise_positive = 0;   ///< sum of the c_j > 0 over the noise positions
    double noise_negative = 0;   ///< sum of the c_j < 0 over the noise positions (<= 0)
    double negative_abs = 0;     ///< -(sum of the c_j < 0 over every visible key) (>= 0)
    Index negatives = 0;         ///< #{visible j : c_j < 0}
    Index visible = 0;           ///< visible keys

    double answer_mass() const { return answer_positive + answer_negative; }  ///< signed, raw
    double noise_mass() const { return noise_positive + noise_negative; }     ///< signed, raw
    double answer_abs() const { return answer_positive - answer_negative; }   ///< sum of |c_j|, answer
    double noise_abs() const { return noise_positive - noise_negative; }      ///< sum of |c_j|, noise
    /// |P| shares, in [0, 1]; NaN for a row of zeros.
    double answer_share() const { return ratio_or_nan(answer_abs(), abs_sum); }
    double noise_share() const { return ratio_or_nan(noise_abs(), abs_sum); }
    double negative_share() const { return ratio_or_nan(negative_abs, abs_sum); }
    /// Signed masses over the row sum (secondary: unbounded when S is small); NaN when S is 0.
    double answer_normalised() const { return ratio_or_nan(answer_mass(), row_sum); }
    double noise_normalised() const { return ratio_or_nan(noise_mass(), row_sum); }
    double negative_fraction() const {
        return ratio_or_nan(static_cast<double>(negatives), static_cast<double>(visible));
    }
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
/// strictly increasing key positions (checked where they enter, analysis/analysis_rows.hpp).
inline RowMeasure measure_row(const Eigen::Ref<const Vector<double>>& row, const std::vector<Index>& answer,
                              const std::vector<Index>& noise) {
    RowMeasure m;
    m.visible = row.size();
    for (Index j = 0; j < row.size(); ++j) {
        m.row_sum += row[j];
        m.abs_sum += std::abs(row[j]);
        if (row[j] < 0) {
            m.negative_abs -= row[j];
            ++m.negatives;
        }
    }
    const auto split = [&](const std::vector<Index>& positions, double& positive, double& negative) {
        for (const Index j : positions) {
            if (j >= row.size()) break;
            (row[j] > 0 ? positive : negative) += row[j];  // a zero adds nothing to either
        }
    };
    split(answer, m.answer_positive, m.answer_negative);
    split(noise, m.noise_positive, m.noise_negative);
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
