// The result of an attention analysis (analysis/attention_analysis.hpp): the figures of every
// (layer, head, asked row) and the full maps of the rows that asked for them. Figures of many rows:
// analysis/row_summary.hpp.
#pragma once

#include "diffattn/analysis/row_measure.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/layers/attention_config.hpp"

#include <limits>
#include <vector>

namespace diffattn::analysis {

/// The answer and noise mass of one softmax map of a row (non-negative entries that sum to 1).
struct MapMass {
    double answer = std::numeric_limits<double>::quiet_NaN();
    double noise = std::numeric_limits<double>::quiet_NaN();
};

/// The figures of one (layer, head, row).
struct HeadRowFigures {
    RowMeasure measure;             ///< of the combined map (analysis/row_measure.hpp)
    MapMass a1, a2, integral;       ///< of map 1, map 2 (NaN for softmax), DINT's I (NaN otherwise)
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

}  // namespace diffattn::analysis
