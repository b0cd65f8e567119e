// Attention-map analysis of a decoder model: for a token sequence and chosen query rows, per
// layer and head, the attention maps (A1, A2, DINT's integral, the combined map; docs/math.md §2)
// and their figures: the sums of analysis/row_measure.hpp (the combined row's answer and noise
// mass, split by sign, its absolute weight, its row sum), the answer and noise mass of each softmax
// map, the entropy of each, and the layer's lambda or the row's diff_v2 gate.
//
//   AttentionAnalyzer<float> analyzer(model.config(), max_len);
//   AnalysisResult result;
//   analyzer.run(model, tokens, rows, result);       // rows: analysis/analysis_rows.hpp
//   result.at(layer, head, r).measure.answer_share(); // r indexes `rows`
//   RowSummary summary; summary.add(result);          // figures of many rows (analysis/row_summary.hpp)
//
// The model runs its plain forward (DecoderModel::forward_observed); after each layer the rows'
// maps are computed from the layer's rotated queries and keys, as the kernels saw them, one row at
// a time (analysis/head_rows.hpp). Memory is O(N): the forward state (O(N) per layer, reused) and
// O(N) doubles for the streamed rows, never an N x S map; full maps are copied out only for the
// rows that ask for them (keep_maps). Once the analyzer has run once with a given number of rows,
// another run of at most that size allocates nothing but the kept maps (tested).
#pragma once

#include "diffattn/analysis/analysis_result.hpp"
#include "diffattn/analysis/analysis_rows.hpp"
#include "diffattn/analysis/head_rows.hpp"
#include "diffattn/analysis/row_measure.hpp"
#include "diffattn/analysis/row_summary.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/memory_limit.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/model/decoder_model.hpp"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace diffattn::analysis {

template <typename T>
class AttentionAnalyzer {
public:
    /// Buffers for sequences of up to max_len tokens of models of `config` (ForwardState's
    /// checks and errors), the forward's heads on `threads` threads.
    AttentionAnalyzer(const ModelConfig& config, Index max_len, int threads = 1)
        : state_(config, max_len, threads), pass_(max_len, config.attention_config().head_dim()) {}

    Index max_len() const { return state_.max_len(); }

    /// Bytes of the analyzer's buffers per token of max_len: the forward state's plus the streamed rows'.
    static std::size_t bytes_per_token(const ModelConfig& config) {
        return ForwardState<T>::bytes_per_token(config) + 5 * sizeof(double);
    }

    /// The doubles the kept maps of `rows` take in a run over n tokens of a model of `config`: per
    /// row with keep_maps, layer and head, four maps (A1, A2, the integral, the combined map) of the
    /// keys the row sees (a causal row: its position + 1).
    static long double kept_map_entries(const ModelConfig& config, const std::vector<AnalysisRow>& rows, Index n) {
        long double keys = 0;
        for (const AnalysisRow& row : rows) {
            if (row.keep_maps) keys += static_cast<long double>(config.causal ? row.position + 1 : n);
        }
        return keys * 4 * static_cast<long double>(config.num_hidden_layers * config.num_attention_heads);
    }

    /// kept_map_entries(config, rows, n), after a ShapeError that starts with `what` when those
    /// doubles exceed the machine's memory (require_memory). The one check of the kept maps' size:
    /// run() makes it, and a program that must refuse before it writes anything makes it earlier.
    template <typename... What>
    static long double require_kept_maps_fit(const ModelConfig& config, const std::vector<AnalysisRow>& rows, Index n,
                                             What&&... what) {
        const long double entries = kept_map_entries(config, rows, n);
        require_memory(entries * sizeof(double), std::forward<What>(what)...);
        return entries;
    }

    /// Analyses `rows` (check_rows: ShapeError / OptionError naming a bad row or position) of the
    /// plain forward of `tokens` (DecoderModel::forward's checks: ShapeError for a token id outside
    /// the vocabulary or more tokens than max_len) into `result`, whose storage is reused. ShapeError,
    /// before anything is computed, when the kept maps exceed the machine's memory (require_kept_maps_fit).
    void run(const DecoderModel<T>& model, const std::vector<Token>& tokens, const std::vector<AnalysisRow>& rows,
             AnalysisResult& result) {
        constexpr const char* function = "AttentionAnalyzer::run";
        const Index n = static_cast<Index>(tokens.size());
        require<ShapeError>(n <= max_len(), function, ": ", n, " tokens but the analyzer holds at most ", max_len());
        check_rows(function, rows, n);
        const ModelConfig& config = model.config();
        require_kept_maps_fit(config, rows, n, function, ": the kept maps of ", n, " tokens' rows");
        require<ShapeError>(state_.fits(config) && config.attention_config().head_dim() == pass_.head_dim(),
                            function, ": the analyzer was made for another configuration (make it from this model's config())");
        result.kind = config.attention;
        result.n_layers = config.num_hidden_layers;
        result.n_heads = config.num_attention_heads;
        result.n_rows = static_cast<Index>(rows.size());
        result.lambda.assign(static_cast<std::size_t>(result.n_layers), std::numeric_limits<double>::quiet_NaN());
        result.figures.resize(static_cast<std::size_t>(result.n_layers * result.n_heads * result.n_rows));
        result.maps.clear();
        positions_.clear();
        for (const AnalysisRow& row : rows) positions_.push_back(row.position);

        model.forward_observed(tokens, state_, state_.logits.topRows(n),
                               [&](Index layer, const AttentionScratch<T>& scratch) {
                                   analyse_layer(model.layers[static_cast<std::size_t>(layer)].self_attn, layer,
                                                 scratch, n, rows, result);
                               });
    }

    /// The logits of the last run [N x V] (valid until the next run).
    ConstMatrixRef<T> logits(Index n) const { return state_.logits.topRows(n); }

private:
    void analyse_layer(const MultiHeadAttention<T>& module, Index layer, const AttentionScratch<T>& scratch, Index n,
                       const std::vector<AnalysisRow>& rows, AnalysisResult& result) {
        const AttentionConfig& c = module.config();
        const Index d = c.head_dim();
        // The kernels take lambda rounded to T (MultiHeadAttention::forward).
        const double lambda = static_cast<double>(static_cast<T>(module.lambda()));
        if (c.has_lambda()) result.lambda[static_cast<std::size_t>(layer)] = lambda;
        const ConstMatrixRef<T> q = scratch.q.topRows(n);  // [N x q_width] rotated queries
        const ConstMatrixRef<T> k = scratch.k.topRows(n);  // [N x k_width] rotated keys
        const bool two_maps = c.kind != AttentionKind::softmax;
        const double nan = std::numeric_limits<double>::quiet_NaN();
        for (Index h = 0; h < c.n_heads; ++h) {
            const Index m2 = two_maps ? 1 : 0;
            HeadInputs<T> in{c.kind,
                             c.dint_integral,
                             c.causal,
                             q.middleCols(c.query_map(h, 0) * d, d),
                             k.middleCols(c.key_map(h, 0) * d, d),
                             q.middleCols(c.query_map(h, m2) * d, d),
                             k.middleCols(c.key_map(h, m2) * d, d),
                             lambda,
                             c.kind == AttentionKind::diff_v2 ? scratch.lambda_gate.data() + h : nullptr,
                             c.kind == AttentionKind::diff_v2 ? scratch.lambda_gate.outerStride() : 0};
            Index r = 0;
            pass_.run(in, positions_, [&](const RowMaps& maps) {
                const AnalysisRow& row = rows[static_cast<std::size_t>(r)];
                HeadRowFigures& f = result.at(layer, h, r);
                f.measure = measure_row(maps.combined, row.answer, row.noise);
                f.a1 = map_mass(maps.a1, row);
                f.a2 = two_maps ? map_mass(maps.a2, row) : MapMass{};
                f.integral = c.kind == AttentionKind::dint ? map_mass(maps.integral, row) : MapMass{};
                f.entropy_a1 = entropy(maps.a1);
                f.entropy_a2 = two_maps ? entropy(maps.a2) : nan;
                const bool softmax_integral =
                    c.kind == AttentionKind::dint && c.dint_integral == DintIntegral::causal_softmax;
                f.entropy_integral = softmax_integral ? entropy(maps.integral) : nan;
                f.weight = maps.weight;
                if (row.keep_maps) result.maps.push_back(KeptMaps{layer, h, r, maps.row, maps.a1, maps.a2,
                                                                  maps.integral, maps.combined});
                ++r;
            });
        }
    }

    static MapMass map_mass(const Eigen::Ref<const Vector<double>>& map, const AnalysisRow& row) {
        return MapMass{mass_on(map, row.answer), mass_on(map, row.noise)};
    }

    ForwardState<T> state_;      // the model's plain forward, reused by every run
    HeadRowPass pass_;           // the streamed rows, O(max_len)
    std::vector<Index> positions_;  // the asked rows' positions, reused
};

}  // namespace diffattn::analysis
