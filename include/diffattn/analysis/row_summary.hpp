// The figures of many analysed rows (analysis/figures.hpp), per (layer, head) and per layer, across
// any number of results of one model (a set of episodes): each figure is the ratio of the sums of
// its per-row terms over the rows, with its standard error (analysis/ratio_of_sums.hpp;
// docs/analysis.md, "Averaging and standard errors").
//
// A layer's figure pools its heads: each row adds the sum over the heads of their numerators and
// the sum of their denominators (a mean: the mean over rows and heads). The row stays the unit of
// the standard error, as the heads of one row are not independent draws.
#pragma once

#include "diffattn/analysis/figures.hpp"
#include "diffattn/analysis/ratio_of_sums.hpp"
#include "diffattn/core/error.hpp"

#include <vector>

namespace diffattn::analysis {

class RowSummary {
public:
    /// Adds every row of `result` (ShapeError unless it has the layers and heads of the results
    /// added before).
    void add(const AnalysisResult& result) {
        require<ShapeError>(rows_ == 0 || (result.n_layers == layers_ && result.n_heads == heads_),
                            "RowSummary::add: a result of ", result.n_layers, " layers and ", result.n_heads,
                            " heads after results of ", layers_, " and ", heads_);
        if (rows_ == 0) {
            layers_ = result.n_layers;
            heads_ = result.n_heads;
            stats_.assign(static_cast<std::size_t>(layers_ * (heads_ + 1)) * kFigureCount, RatioOfSums{});
        }
        for (Index l = 0; l < layers_; ++l) {
            for (Index r = 0; r < result.n_rows; ++r) {
                for (const FigureInfo& info : figure_list()) {
                    double layer_num = 0, layer_den = 0;
                    for (Index h = 0; h < heads_; ++h) {
                        const auto [num, den] = figure_terms(info.figure, result.at(l, h, r));
                        stat(l, h, info.figure).add(num, den);
                        layer_num += num;
                        layer_den += den;
                    }
                    stat(l, -1, info.figure).add(layer_num, layer_den);
                }
            }
        }
        rows_ += result.n_rows;
    }

    Index rows() const { return rows_; }
    Index layers() const { return layers_; }
    Index heads() const { return heads_; }

    /// Figure `f` over the rows of (layer, head); head -1: of the layer, its heads pooled.
    Estimate estimate(Index layer, Index head, Figure f) const {
        require<ShapeError>(layer >= 0 && layer < layers_ && head >= -1 && head < heads_, "RowSummary::estimate: layer ",
                            layer, " head ", head, " of a summary of ", layers_, " layers and ", heads_, " heads");
        return stats_[index(layer, head, f)].estimate();
    }

private:
    std::size_t index(Index layer, Index head, Figure f) const {
        const Index slot = head < 0 ? heads_ : head;  // the pooled figures after the heads
        return static_cast<std::size_t>(layer * (heads_ + 1) + slot) * kFigureCount + static_cast<std::size_t>(f);
    }
    RatioOfSums& stat(Index layer, Index head, Figure f) { return stats_[index(layer, head, f)]; }

    Index layers_ = 0, heads_ = 0, rows_ = 0;
    std::vector<RatioOfSums> stats_;  // [layers x (heads + 1) x figures]
};

}  // namespace diffattn::analysis
