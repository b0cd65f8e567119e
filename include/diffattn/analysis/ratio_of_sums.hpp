// A figure of many rows as a ratio of sums, R = sum_i x_i / sum_i y_i, with its standard error
// (docs/analysis.md, "Averaging and standard errors"). A mean is the case y_i = 1.
//
// Why a ratio of sums and not the mean of the per-row ratios x_i / y_i: where y_i varies (DIFF
// V2's row sum at the question row is 0.14 for some keys and 0.8 for others) a few rows of small
// y_i would dominate a mean of ratios; the ratio of sums weighs every row by its y_i, which is
// what "the share of the weight that lands on the answer, over these rows" means.
//
// Standard error: the first-order (delta-method) error of a ratio estimator, the rows taken as
// independent draws,
//   se(R) = sqrt( sum_i (x_i - R y_i)^2 / (n (n - 1)) ) / |mean y|,
// which for y_i = 1 is the standard error of a mean, s / sqrt(n). The sums are kept as Welford's
// running means and centred co-moments (one pass, O(1) memory): sum_i (x_i - R y_i)^2 =
// Cxx - 2 R Cxy + R^2 Cyy, as mean x = R mean y. Where every row has nearly the same ratio that
// difference cancels: the standard error then carries an absolute error of up to about
// 2 sqrt(epsilon) s_x / (sqrt(n) |mean y|), s_x the spread of the x_i and sqrt(epsilon) = 1.5e-8,
// far below any digit a table prints.
#pragma once

#include "diffattn/core/types.hpp"

#include <cmath>
#include <limits>

namespace diffattn::analysis {

/// A figure and its standard error over `rows` rows; NaN where undefined (no rows, a zero
/// denominator, a NaN term; the error needs two rows).
struct Estimate {
    double value = std::numeric_limits<double>::quiet_NaN();
    double standard_error = std::numeric_limits<double>::quiet_NaN();
    Index rows = 0;
};

class RatioOfSums {
public:
    /// Adds one row's numerator x and denominator y.
    void add(double x, double y) {
        ++n_;
        const double n = static_cast<double>(n_);
        const double dx = x - mean_x_, dy = y - mean_y_;
        mean_x_ += dx / n;
        mean_y_ += dy / n;
        cxx_ += dx * (x - mean_x_);
        cyy_ += dy * (y - mean_y_);
        cxy_ += dx * (y - mean_y_);
    }

    Index count() const { return n_; }

    Estimate estimate() const {
        Estimate e;
        e.rows = n_;
        if (n_ == 0 || mean_y_ == 0) return e;
        e.value = mean_x_ / mean_y_;
        if (n_ < 2) return e;
        const double r = e.value;
        double squares = cxx_ - 2 * r * cxy_ + r * r * cyy_;
        if (squares < 0) squares = 0;  // rounding, when every residual is 0; a NaN stays NaN
        const double n = static_cast<double>(n_);
        e.standard_error = std::sqrt(squares / (n * (n - 1))) / std::abs(mean_y_);
        return e;
    }

private:
    Index n_ = 0;
    double mean_x_ = 0, mean_y_ = 0;
    double cxx_ = 0, cyy_ = 0, cxy_ = 0;  // centred sums of squares and products
};

}  // namespace diffattn::analysis
