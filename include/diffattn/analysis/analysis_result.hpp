// The result of an attention analysis (analysis/attention_analysis.hpp): the figures of every
// (layer, head, asked row), the full maps of the rows that asked for them, and the means of the
// figures over rows (how the per-layer tables average: docs/analysis.md).
#pragma once

#include "diffattn/analysis/row_measure.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <vector>

namespace diffattn::analysis {

/// The figures of one (layer, head, row).
struct HeadRowFigures {
    RowMeasure measure;             ///< of the combined map (row sum, answer, noise, negatives)
    double entropy_a1 = 0;          ///< entropy (nats) of softmax map 1 (softmax: the map)
    double entropy_a2 = 0;          ///< of map 2; NaN for softmax
    double entropy_integral = 0;    ///< of DINT's I when it is a softmax (causal_softmax); NaN otherwise
    double weight = 0;              ///< lambda (diff, shared_diff, dint), the row's gate (diff_v2), 0 (softmax)
};

/// The full maps of one kept (layer, head, row), over the row's visible keys.
struct KeptMaps {
    Index layer = 0, head = 0;
    Index row = 0;        ///< index into the asked rows
    Index position = 0;   ///< the query row n
    Vector<double> a1, a2, integral, combined;  ///< [visible]; a2 / integral empty when the kind has none
};

struct AnalysisResult {
    Index n_layers = 0, n_heads = 0, n_rows = 0;
    AttentionKind kind = AttentionKind::softmax;
    std::vector<double> lambda;           ///< [layers] the layer's lambda as the kernels use it; NaN without one
    std::vector<HeadRowFigures> figures;  ///< [layers x heads x rows], row fastest
    std::vector<KeptMaps> maps;           ///< rows with keep_maps, by layer, head, row

    const HeadRowFigures& at(Index layer, Index head, Index row) const {
        return figures[static_cast<std::size_t>((layer * n_heads + head) * n_rows + row)];
    }
    HeadRowFigures& at(Index layer, Index head, Index row) {
        return figures[static_cast<std::size_t>((layer * n_heads + head) * n_rows + row)];
    }
};

/// Means of the figures over analysed rows, per (layer, head), across any number of results of
/// one model (a set of episodes): every row weighs the same (arithmetic mean over rows), and the
/// mean of a layer is the mean over its heads of the per-head means. A NaN figure (a row sum of
/// 0, an entropy the kind does not have) makes its mean NaN.
class RowMeans {
public:
    /// Adds every row of `result` (same layers and heads as the results added before).
    void add(const AnalysisResult& result) {
        require<ShapeError>(rows_ == 0 || (result.n_layers == layers_ && result.n_heads == heads_),
                            "RowMeans::add: a result of ", result.n_layers, " layers and ", result.n_heads,
                            " heads after results of ", layers_, " and ", heads_);
        if (rows_ == 0) {
            layers_ = result.n_layers;
            heads_ = result.n_heads;
            sums_.assign(static_cast<std::size_t>(layers_ * heads_), zero());
        }
        for (Index l = 0; l < layers_; ++l)
            for (Index h = 0; h < heads_; ++h)
                for (Index r = 0; r < result.n_rows; ++r) add_scaled(sums_[index(l, h)], result.at(l, h, r), 1.0);
        rows_ += result.n_rows;
    }

    Index rows() const { return rows_; }
    Index layers() const { return layers_; }
    Index heads() const { return heads_; }

    /// The mean over the rows of (layer, head); head -1: the mean over the layer's heads.
    HeadRowFigures mean(Index layer, Index head = -1) const {
        HeadRowFigures out = zero();
        const Index first = head < 0 ? 0 : head, last = head < 0 ? heads_ : head + 1;
        const double per_row = 1.0 / (static_cast<double>(rows_) * static_cast<double>(last - first));
        for (Index h = first; h < last; ++h) add_scaled(out, sums_[index(layer, h)], per_row);
        return out;
    }

    /// into += w f, figure by figure.
    static void add_scaled(HeadRowFigures& into, const HeadRowFigures& f, double w) {
        into.measure.row_sum += w * f.measure.row_sum;
        into.measure.answer += w * f.measure.answer;
        into.measure.noise += w * f.measure.noise;
        into.measure.negative_mass += w * f.measure.negative_mass;
        into.measure.negative_fraction += w * f.measure.negative_fraction;
        into.measure.answer_raw += w * f.measure.answer_raw;
        into.measure.noise_raw += w * f.measure.noise_raw;
        into.entropy_a1 += w * f.entropy_a1;
        into.entropy_a2 += w * f.entropy_a2;
        into.entropy_integral += w * f.entropy_integral;
        into.weight += w * f.weight;
    }

private:
    static HeadRowFigures zero() { return HeadRowFigures{RowMeasure{}, 0, 0, 0, 0}; }
    std::size_t index(Index layer, Index head) const { return static_cast<std::size_t>(layer * heads_ + head); }

    Index layers_ = 0, heads_ = 0, rows_ = 0;
    std::vector<HeadRowFigures> sums_;  // [layers x heads] sums over the rows
};

}  // namespace diffattn::analysis
