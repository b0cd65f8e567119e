// The named figures of an attention analysis: for each, what one (layer, head, row) adds to its
// numerator and its denominator, so that the figure of many rows is the ratio of the sums
// (analysis/ratio_of_sums.hpp, analysis/row_summary.hpp) and of one row the ratio of its terms.
// The definitions are docs/analysis.md's ("The measures"); `definition` is the text
// diffattn-analyze prints and writes beside them.
#pragma once

#include "diffattn/analysis/analysis_result.hpp"

#include <array>
#include <utility>

namespace diffattn::analysis {

enum class Figure {
    answer_share,       ///< |P| share of the answer: the headline (docs/analysis.md)
    noise_share,        ///< |P| share of the noise
    negative_share,     ///< |P| share of the negative entries
    answer_mass,        ///< signed answer mass, raw
    noise_mass,         ///< signed noise mass, raw
    noise_positive,     ///< its positive part
    noise_negative,     ///< its negative part (<= 0)
    row_sum,            ///< S
    abs_sum,            ///< W = sum |c|
    answer_normalised,  ///< signed answer mass over S (secondary)
    noise_normalised,   ///< signed noise mass over S (secondary)
    negative_fraction,  ///< negative entries over visible keys
    a1_answer, a1_noise, a2_answer, a2_noise, integral_answer, integral_noise,  ///< masses of each map
    entropy_a1, entropy_a2, entropy_integral,
    weight,             ///< lambda, or diff_v2's gate
};
constexpr std::size_t kFigureCount = static_cast<std::size_t>(Figure::weight) + 1;

struct FigureInfo {
    Figure figure;
    const char* name;        ///< the JSON key
    const char* definition;  ///< over rows i; c is row i's combined map over its visible keys
};

/// Every figure, in enum order.
inline const std::array<FigureInfo, kFigureCount>& figure_list() {
    static const std::array<FigureInfo, kFigureCount> list{{
        {Figure::answer_share, "answer_share", "sum_i sum_{j in answer} |c_j| / sum_i sum_j |c_j|"},
        {Figure::noise_share, "noise_share", "sum_i sum_{j in noise} |c_j| / sum_i sum_j |c_j|"},
        {Figure::negative_share, "negative_share", "sum_i sum_{c_j < 0} |c_j| / sum_i sum_j |c_j|"},
        {Figure::answer_mass, "answer_mass", "mean_i sum_{j in answer} c_j"},
        {Figure::noise_mass, "noise_mass", "mean_i sum_{j in noise} c_j (= noise_positive + noise_negative)"},
        {Figure::noise_positive, "noise_positive", "mean_i sum_{j in noise, c_j > 0} c_j"},
        {Figure::noise_negative, "noise_negative", "mean_i sum_{j in noise, c_j < 0} c_j (<= 0)"},
        {Figure::row_sum, "row_sum", "mean_i sum_j c_j"},
        {Figure::abs_sum, "abs_sum", "mean_i sum_j |c_j|"},
        {Figure::answer_normalised, "answer_normalised", "sum_i sum_{j in answer} c_j / sum_i sum_j c_j"},
        {Figure::noise_normalised, "noise_normalised", "sum_i sum_{j in noise} c_j / sum_i sum_j c_j"},
        {Figure::negative_fraction, "negative_fraction", "sum_i #{j : c_j < 0} / sum_i #{visible j}"},
        {Figure::a1_answer, "a1_answer", "mean_i sum_{j in answer} A1_j"},
        {Figure::a1_noise, "a1_noise", "mean_i sum_{j in noise} A1_j"},
        {Figure::a2_answer, "a2_answer", "mean_i sum_{j in answer} A2_j (no map 2: null)"},
        {Figure::a2_noise, "a2_noise", "mean_i sum_{j in noise} A2_j (no map 2: null)"},
        {Figure::integral_answer, "integral_answer", "mean_i sum_{j in answer} I_j (DINT only)"},
        {Figure::integral_noise, "integral_noise", "mean_i sum_{j in noise} I_j (DINT only)"},
        {Figure::entropy_a1, "entropy_a1", "mean_i -sum_j A1_j ln A1_j (nats)"},
        {Figure::entropy_a2, "entropy_a2", "mean_i -sum_j A2_j ln A2_j (no map 2: null)"},
        {Figure::entropy_integral, "entropy_integral", "mean_i -sum_j I_j ln I_j (DINT causal_softmax only)"},
        {Figure::weight, "weight", "mean_i of lambda (diff, shared_diff, dint) or of the row's gate (diff_v2); 0 (softmax)"},
    }};
    return list;
}

inline const FigureInfo& figure_info(Figure f) { return figure_list()[static_cast<std::size_t>(f)]; }

/// What one row adds to the figure's numerator and denominator (a mean: denominator 1).
inline std::pair<double, double> figure_terms(Figure f, const HeadRowFigures& r) {
    const RowMeasure& m = r.measure;
    switch (f) {
        case Figure::answer_share: return {m.answer_abs(), m.abs_sum};
        case Figure::noise_share: return {m.noise_abs(), m.abs_sum};
        case Figure::negative_share: return {m.negative_abs, m.abs_sum};
        case Figure::answer_mass: return {m.answer_mass(), 1};
        case Figure::noise_mass: return {m.noise_mass(), 1};
        case Figure::noise_positive: return {m.noise_positive, 1};
        case Figure::noise_negative: return {m.noise_negative, 1};
        case Figure::row_sum: return {m.row_sum, 1};
        case Figure::abs_sum: return {m.abs_sum, 1};
        case Figure::answer_normalised: return {m.answer_mass(), m.row_sum};
        case Figure::noise_normalised: return {m.noise_mass(), m.row_sum};
        case Figure::negative_fraction: return {static_cast<double>(m.negatives), static_cast<double>(m.visible)};
        case Figure::a1_answer: return {r.a1.answer, 1};
        case Figure::a1_noise: return {r.a1.noise, 1};
        case Figure::a2_answer: return {r.a2.answer, 1};
        case Figure::a2_noise: return {r.a2.noise, 1};
        case Figure::integral_answer: return {r.integral.answer, 1};
        case Figure::integral_noise: return {r.integral.noise, 1};
        case Figure::entropy_a1: return {r.entropy_a1, 1};
        case Figure::entropy_a2: return {r.entropy_a2, 1};
        case Figure::entropy_integral: return {r.entropy_integral, 1};
        case Figure::weight: return {r.weight, 1};
    }
    return {0, 0};  // not reached: every enumerator has its case
}

/// The figure of one row: the ratio of its terms (NaN for a zero denominator).
inline double figure_of(Figure f, const HeadRowFigures& r) {
    const auto [num, den] = figure_terms(f, r);
    return ratio_or_nan(num, den);
}

}  // namespace diffattn::analysis
