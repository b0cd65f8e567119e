// Attention analysis (include/diffattn/analysis/): the maps of every kind against the plain double
// transcription (tests/layers/naive_reference.hpp) fed with the layer inputs of the model's own
// forward; the combined rows times the values against the attention module's real head outputs;
// the row sums of each kind; every measure and figure, with its standard error, on hand-made rows
// whose answers are worked out by hand (analysis/row_measure.hpp, figures.hpp, row_summary.hpp);
// bad rows and spans.
#include "diffattn/analysis/attention_analysis.hpp"

#include "../error_messages.hpp"
#include "../layers/naive_reference.hpp"
#include "../model/model_files.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using namespace diffattn::analysis;

namespace {

struct AnalysisCase {
    std::string name;
    ModelConfig config;
};

/// Every kind, DINT's three integrals, GQA in both pairings, an encoder, two geometries.
std::vector<AnalysisCase> analysis_cases() {
    std::vector<AnalysisCase> out;
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::shared_diff,
                               AttentionKind::diff_v2, AttentionKind::gda}) {
        out.push_back({std::string(to_string(kind)) + " small", test::small_config(kind)});
        out.push_back({std::string(to_string(kind)) + " tiny", test::tiny_config(kind, 64)});
    }
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        out.push_back({std::string("dint ") + to_string(integral), test::small_config(AttentionKind::dint, integral)});
        out.push_back({std::string("dint tiny ") + to_string(integral), test::tiny_config(AttentionKind::dint, 64)});
        out.back().config.dint_integral = integral;
    }
    out.push_back({"dint global_mean encoder", test::small_config(AttentionKind::dint, DintIntegral::global_mean)});
    out.back().config.causal = false;
    out.push_back({"diff per_subhead", test::small_config(AttentionKind::diff)});
    out.back().config.diff_gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back({"diff_v2 encoder", test::small_config(AttentionKind::diff_v2)});
    out.back().config.causal = false;
    return out;
}

std::vector<Token> seeded_tokens(Index count, Index vocab, std::uint64_t seed) {
    SeededUniform random(seed);
    std::vector<Token> tokens;
    for (Index i = 0; i < count; ++i) {
        tokens.push_back(static_cast<Token>(std::min<double>(vocab - 1, (random.next() + 1) * 0.5 * vocab)));
    }
    return tokens;
}

/// Every row of the sequence, each keeping its maps; answer = the first few keys, noise = the rest.
std::vector<AnalysisRow> all_rows(Index n) {
    std::vector<AnalysisRow> rows;
    for (Index r = 0; r < n; ++r) {
        AnalysisRow row;
        row.position = r;
        for (Index j = 0; j < n; ++j) (j < 3 ? row.answer : row.noise).push_back(j);
        row.keep_maps = true;
        rows.push_back(row);
    }
    return rows;
}

/// The attention-module input of every layer (RMSNorm_in of the residual stream), by the model's
/// own layers run one by one: the oracle's inputs, without the analysis code.
template <typename T>
std::vector<naive::Mat> layer_inputs(const DecoderModel<T>& model, const std::vector<Token>& tokens) {
    const Index n = static_cast<Index>(tokens.size());
    RowMatrix<T> x(n, model.config().hidden_size), normed(n, model.config().hidden_size);
    for (Index i = 0; i < n; ++i) x.row(i) = model.embed_tokens.dense().row(tokens[static_cast<std::size_t>(i)]);
    LayerScratch<T> scratch(model.config(), n, 1);
    std::vector<naive::Mat> inputs;
    for (const DecoderLayer<T>& layer : model.layers) {
        layer.input_layernorm(x, normed);
        inputs.push_back(normed.template cast<double>());
        layer.forward(x, scratch, ExecutionContext{});
    }
    return inputs;
}

double max_abs_diff(const Vector<double>& a, const naive::Mat& b, Index row) {
    REQUIRE(a.size() <= b.cols());
    double worst = 0;
    for (Index j = 0; j < b.cols(); ++j) worst = std::max(worst, std::abs((j < a.size() ? a[j] : 0.0) - b(row, j)));
    return worst;
}

/// Map tolerance: a map entry is exp of a logit s q.k rounded in T (the queries and keys are
/// stored in T after projections and rotary, a few epsilon of an O(1) logit), so it carries a few
/// epsilon of T; the largest error seen is below 10 epsilon. 64 epsilon of T, as the module tests.
template <typename T>
double map_tolerance() {
    return 64 * std::numeric_limits<T>::epsilon();
}

}  // namespace

TEMPLATE_TEST_CASE("analysis maps match the plain transcription, every kind", "[analysis]", float, double) {
    using T = TestType;
    for (const AnalysisCase& c : analysis_cases()) {
        for (Index n : {Index(1), Index(9), Index(23)}) {
            INFO(c.name << ", N = " << n);
            DecoderModel<T> model = DecoderModel<T>::seeded(c.config, 100 + static_cast<std::uint64_t>(n));
            // Larger lambda vectors, so lambda differs visibly from lambda_init.
            for (DecoderLayer<T>& layer : model.layers) layer.self_attn.weights().lambda.q1 *= T(3);
            const std::vector<Token> tokens = seeded_tokens(n, c.config.vocab_size, 7 + static_cast<std::uint64_t>(n));
            AttentionAnalyzer<T> analyzer(model.config(), 30);
            AnalysisResult result;
            analyzer.run(model, tokens, all_rows(n), result);

            const std::vector<naive::Mat> inputs = layer_inputs(model, tokens);
            ParameterList<T> list = model.parameters();
            double worst = 0;
            std::size_t kept = 0;
            for (Index l = 0; l < c.config.num_hidden_layers; ++l) {
                const std::string prefix = "model.layers." + std::to_string(l) + ".self_attn.";
                naive::Tensors all = naive::tensors_of(list);
                naive::Tensors p;
                for (const auto& entry : all) {
                    if (entry.first.rfind(prefix, 0) == 0) p[entry.first.substr(prefix.size())] = entry.second;
                }
                const AttentionConfig ac = model.layers[static_cast<std::size_t>(l)].self_attn.config();
                const naive::ModuleMaps expected = naive::attention_maps(ac, p, inputs[static_cast<std::size_t>(l)]);
                if (ac.has_lambda()) {
                    CHECK(std::abs(result.lambda[static_cast<std::size_t>(l)] - expected.lambda) <=
                          4 * std::numeric_limits<T>::epsilon());
                }
                for (const KeptMaps& m : result.maps) {
                    if (m.layer != l) continue;
                    ++kept;
                    const std::size_t h = static_cast<std::size_t>(m.head);
                    CHECK(m.a1.size() == (c.config.causal ? m.position + 1 : n));
                    worst = std::max(worst, max_abs_diff(m.a1, expected.a1[h], m.position));
                    worst = std::max(worst, max_abs_diff(m.combined, expected.combined[h], m.position));
                    if (!expected.a2.empty()) worst = std::max(worst, max_abs_diff(m.a2, expected.a2[h], m.position));
                    CHECK(m.a2.size() == (expected.a2.empty() ? 0 : m.a1.size()));
                    if (!expected.integral.empty()) {
                        worst = std::max(worst, max_abs_diff(m.integral, expected.integral[h], m.position));
                    }
                    CHECK(m.integral.size() == (expected.integral.empty() ? 0 : m.a1.size()));
                }
            }
            CHECK(kept == static_cast<std::size_t>(c.config.num_hidden_layers * c.config.num_attention_heads * n));
            INFO("largest map difference " << worst);
            CHECK(worst <= map_tolerance<T>());
        }
    }
}

TEMPLATE_TEST_CASE("combined rows times the values give the module's head outputs", "[analysis]", float, double) {
    using T = TestType;
    for (const AnalysisCase& c : analysis_cases()) {
        const Index n = 17;
        INFO(c.name);
        DecoderModel<T> model = DecoderModel<T>::seeded(c.config, 5);
        const std::vector<Token> tokens = seeded_tokens(n, c.config.vocab_size, 11);
        AttentionAnalyzer<T> analyzer(model.config(), n);
        AnalysisResult result;
        analyzer.run(model, tokens, all_rows(n), result);

        // The module's values and head outputs per layer, from the real forward.
        std::vector<RowMatrix<T>> values, heads;
        ForwardState<T> state = model.make_state(n);
        RowMatrix<T> logits(n, c.config.vocab_size);
        model.forward_observed(tokens, state, logits, [&](Index, const AttentionScratch<T>& s) {
            values.push_back(s.v.topRows(n));
            heads.push_back(s.heads.topRows(n));
        });
        REQUIRE(static_cast<Index>(values.size()) == c.config.num_hidden_layers);
        // The hook's forward is the plain forward.
        CHECK((logits - model.logits(tokens)).cwiseAbs().maxCoeff() == T(0));

        double worst = 0;
        for (const KeptMaps& m : result.maps) {
            const MultiHeadAttention<T>& module = model.layers[static_cast<std::size_t>(m.layer)].self_attn;
            const AttentionConfig& ac = module.config();
            const Index dv = ac.value_dim();
            const RowMatrix<double> v = values[static_cast<std::size_t>(m.layer)]
                                            .middleCols(ac.value_head(m.head, 0) * dv, dv)
                                            .template cast<double>();
            Eigen::RowVectorXd o = m.combined.transpose() * v.topRows(m.combined.size());
            if (ac.has_subln()) {  // docs/math.md §3.1: subln over the head's 2d outputs, then the factor
                const double rms = std::sqrt(o.squaredNorm() / static_cast<double>(dv) + module.weights().subln.eps);
                o = (o.array() / rms * module.weights().subln.weight.transpose().template cast<double>().array() *
                     ac.output_scale())
                        .matrix();
            }
            const Eigen::RowVectorXd actual =
                heads[static_cast<std::size_t>(m.layer)].row(m.position).segment(m.head * dv, dv).template cast<double>();
            worst = std::max(worst, (o - actual).cwiseAbs().maxCoeff());
        }
        INFO("largest head-output difference " << worst);
        CHECK(worst <= map_tolerance<T>() * 4);
    }
}

TEMPLATE_TEST_CASE("row sums: softmax 1, diff and gda 1 - lambda, dint 1, diff_v2 1 - gate", "[analysis]", float,
                   double) {
    using T = TestType;
    for (const AnalysisCase& c : analysis_cases()) {
        INFO(c.name);
        const Index n = 12;
        DecoderModel<T> model = DecoderModel<T>::seeded(c.config, 3);
        AttentionAnalyzer<T> analyzer(model.config(), n);
        AnalysisResult result;
        analyzer.run(model, seeded_tokens(n, c.config.vocab_size, 4), all_rows(n), result);
        for (Index l = 0; l < result.n_layers; ++l) {
            for (Index h = 0; h < result.n_heads; ++h) {
                for (Index r = 0; r < result.n_rows; ++r) {
                    const HeadRowFigures& f = result.at(l, h, r);
                    double expected = 1;
                    switch (c.config.attention) {
                        case AttentionKind::softmax: expected = 1; CHECK(f.weight == 0); break;
                        case AttentionKind::dint: expected = 1; break;
                        case AttentionKind::diff:
                        case AttentionKind::shared_diff:
                        case AttentionKind::gda:
                            expected = 1 - result.lambda[static_cast<std::size_t>(l)];
                            CHECK(f.weight == result.lambda[static_cast<std::size_t>(l)]);
                            break;
                        case AttentionKind::diff_v2:
                            expected = 1 - f.weight;
                            CHECK(f.weight > 0);
                            CHECK(f.weight < 1);
                            break;
                    }
                    CHECK(std::abs(f.measure.row_sum - expected) < 1e-12);
                    // answer + noise cover every key: together they are the whole row, by sign and by weight.
                    CHECK(std::abs(f.measure.answer_mass() + f.measure.noise_mass() - f.measure.row_sum) < 1e-12);
                    CHECK(std::abs(f.measure.answer_share() + f.measure.noise_share() - 1) < 1e-12);
                    CHECK(std::abs(f.a1.answer + f.a1.noise - 1) < 1e-12);
                    const bool two_maps = c.config.attention != AttentionKind::softmax;
                    CHECK((two_maps ? std::abs(f.a2.answer + f.a2.noise - 1) < 1e-12 : std::isnan(f.a2.answer)));
                    const bool dint = c.config.attention == AttentionKind::dint;
                    CHECK((dint ? std::abs(f.integral.answer + f.integral.noise - 1) < 1e-12 : std::isnan(f.integral.noise)));
                    CHECK(f.entropy_a1 >= 0);
                    CHECK(f.entropy_a1 <= std::log(static_cast<double>(n)) + 1e-12);
                    CHECK(std::isnan(f.entropy_a2) == (c.config.attention == AttentionKind::softmax));
                }
            }
        }
    }
}

TEST_CASE("the measure of a hand-made row", "[analysis]") {
    // c = [0.5, -0.1, 0.2, 0.3, -0.2, 0.0]: sum 0.7, absolute weight 1.3, negatives -0.3 on 2 of 6 keys.
    Vector<double> row(6);
    row << 0.5, -0.1, 0.2, 0.3, -0.2, 0.0;
    const RowMeasure m = measure_row(row, {2, 3}, {0, 1, 4, 5, 9});  // position 9: past the row, no weight
    CHECK(m.row_sum == Approx(0.7));
    CHECK(m.abs_sum == Approx(1.3));
    CHECK(m.answer_mass() == Approx(0.5));
    CHECK(m.answer_negative == 0);
    CHECK(m.noise_positive == Approx(0.5));   // 0.5 + 0.0
    CHECK(m.noise_negative == Approx(-0.3));  // -0.1 - 0.2
    CHECK(m.noise_mass() == Approx(0.2));
    CHECK(m.answer_share() == Approx(0.5 / 1.3));
    CHECK(m.noise_share() == Approx(0.8 / 1.3));  // a negative entry counts by its weight
    CHECK(m.negative_share() == Approx(0.3 / 1.3));
    CHECK(m.answer_normalised() == Approx(0.5 / 0.7));
    CHECK(m.noise_normalised() == Approx(0.2 / 0.7));
    CHECK(m.negatives == 2);
    CHECK(m.visible == 6);
    CHECK(m.negative_fraction() == Approx(2.0 / 6.0));

    // A negative entry on the answer: its share counts 0.55 of weight, its signed mass 0.45.
    Vector<double> cancelled(5);
    cancelled << 0.6, -0.05, 0.5, -0.1, 0.05;
    const RowMeasure a = measure_row(cancelled, {1, 2}, {3, 4});
    CHECK(a.answer_positive == Approx(0.5));
    CHECK(a.answer_negative == Approx(-0.05));
    CHECK(a.answer_mass() == Approx(0.45));
    CHECK(a.answer_share() == Approx(0.55 / 1.3));
    CHECK(a.noise_share() == Approx(0.15 / 1.3));

    // A row that sums to 0: the normalised figures are undefined, the shares are not.
    Vector<double> zero_sum(2);
    zero_sum << 0.5, -0.5;
    const RowMeasure z = measure_row(zero_sum, {0}, {1});
    CHECK(z.row_sum == 0);
    CHECK(std::isnan(z.answer_normalised()));
    CHECK(z.answer_share() == Approx(0.5));
    CHECK(z.negative_fraction() == 0.5);
    const RowMeasure none = measure_row(Vector<double>::Zero(3), {0}, {1, 2});  // no weight at all
    CHECK(std::isnan(none.answer_share()));
    CHECK(std::isnan(none.noise_share()));

    Vector<double> p(4);
    p << 0.25, 0.25, 0.5, 0.0;
    CHECK(entropy(p) == Approx(-2 * 0.25 * std::log(0.25) - 0.5 * std::log(0.5)));
}

TEST_CASE("a ratio of sums and its standard error", "[analysis]") {
    // A mean (y = 1) of 1, 2, 3, 4: 2.5, sample deviation sqrt(5/3), standard error sqrt(5/3) / 2.
    RatioOfSums mean;
    for (const double x : {1.0, 2.0, 3.0, 4.0}) mean.add(x, 1);
    CHECK(mean.estimate().value == Approx(2.5));
    CHECK(mean.estimate().standard_error == Approx(std::sqrt(5.0 / 3.0) / 2));
    CHECK(mean.estimate().rows == 4);
    // Two rows x / y = 0.8 / 1 and 0.12 / 0.1 (a row that sums to 0.1): R = 0.92 / 1.1, not the
    // mean of the ratios (1.0). Residuals x - R y = -0.04 / 1.1 and +0.04 / 1.1, so
    // se = sqrt(2 (0.04 / 1.1)^2 / (2 * 1)) / 0.55 = 0.04 / (1.1 * 0.55).
    RatioOfSums ratio;
    ratio.add(0.8, 1.0);
    ratio.add(0.12, 0.1);
    CHECK(ratio.estimate().value == Approx(0.92 / 1.1));
    CHECK(ratio.estimate().standard_error == Approx(0.04 / (1.1 * 0.55)));
    // Rows of equal ratio: no spread, error 0 up to the one-pass sums' cancellation, at most about
    // 2 sqrt(epsilon) s_x / (sqrt(n) mean y) = 2 * 1.5e-8 * 0.36 / (1.73 * 0.7) = 9e-9 here
    // (analysis/ratio_of_sums.hpp); never NaN, never a negative square.
    RatioOfSums exact;
    for (const double y : {0.3, 0.7, 1.1}) exact.add(0.9 * y, y);
    CHECK(exact.estimate().value == Approx(0.9));
    CHECK(exact.estimate().standard_error >= 0);
    CHECK(exact.estimate().standard_error <= 9e-9);
    // Undefined: one row has no error, no rows or a zero denominator no value, a NaN term neither.
    RatioOfSums one;
    one.add(0.5, 1);
    CHECK(one.estimate().value == 0.5);
    CHECK(std::isnan(one.estimate().standard_error));
    CHECK(std::isnan(RatioOfSums{}.estimate().value));
    RatioOfSums zero;
    zero.add(1, 0);
    zero.add(-1, 0);
    CHECK(std::isnan(zero.estimate().value));
    RatioOfSums nan = mean;
    nan.add(std::numeric_limits<double>::quiet_NaN(), 1);
    CHECK(std::isnan(nan.estimate().value));
    CHECK(std::isnan(nan.estimate().standard_error));
}

namespace {

/// A result of one layer and two heads whose rows' combined maps are `maps[head][row]`, the answer
/// key 1 and the noise keys 2 and 3 (key 0 is neither: a BOS).
AnalysisResult hand_made_result(const std::vector<std::vector<std::vector<double>>>& maps) {
    AnalysisResult r;
    r.n_layers = 1;
    r.n_heads = static_cast<Index>(maps.size());
    r.n_rows = static_cast<Index>(maps[0].size());
    r.figures.resize(static_cast<std::size_t>(r.n_heads * r.n_rows));
    for (Index h = 0; h < r.n_heads; ++h) {
        for (Index i = 0; i < r.n_rows; ++i) {
            const std::vector<double>& c = maps[static_cast<std::size_t>(h)][static_cast<std::size_t>(i)];
            const Vector<double> row = Eigen::Map<const Vector<double>>(c.data(), static_cast<Index>(c.size()));
            r.at(0, h, i).measure = measure_row(row, {1}, {2, 3});
            r.at(0, h, i).weight = 0.25 * static_cast<double>(h + 1);
        }
    }
    return r;
}

}  // namespace

TEST_CASE("figures of hand-made maps: ratios of sums over rows, heads pooled", "[analysis]") {
    // Head 0: a softmax-like row (sum 1) and a DIFF-like row that sums to 0.1 and over-subtracts
    // the noise. Head 1: one row, twice, of sum 0.5.
    const AnalysisResult first = hand_made_result({{{0.1, 0.8, 0.06, 0.04}, {0.0, 0.12, -0.01, -0.01}},
                                                   {{0.0, 0.4, 0.1, 0.0}, {0.0, 0.4, 0.1, 0.0}}});
    RowSummary summary;
    summary.add(first);
    CHECK(summary.rows() == 2);
    const auto value = [&](Index head, Figure f) { return summary.estimate(0, head, f).value; };
    // Head 0 by hand: answer |c| 0.8 + 0.12, noise |c| 0.1 + 0.02, weight 1.0 + 0.14.
    CHECK(value(0, Figure::answer_share) == Approx(0.92 / 1.14));
    CHECK(value(0, Figure::noise_share) == Approx(0.12 / 1.14));
    CHECK(value(0, Figure::negative_share) == Approx(0.02 / 1.14));
    CHECK(value(0, Figure::answer_mass) == Approx(0.46));        // (0.8 + 0.12) / 2
    CHECK(value(0, Figure::noise_mass) == Approx(0.04));         // (0.1 - 0.02) / 2
    CHECK(value(0, Figure::noise_positive) == Approx(0.05));
    CHECK(value(0, Figure::noise_negative) == Approx(-0.01));
    CHECK(value(0, Figure::row_sum) == Approx(0.55));            // (1 + 0.1) / 2
    CHECK(value(0, Figure::answer_normalised) == Approx(0.92 / 1.1));  // not (0.8 + 1.2) / 2
    CHECK(value(0, Figure::noise_normalised) == Approx(0.08 / 1.1));
    CHECK(value(0, Figure::negative_fraction) == Approx(2.0 / 8.0));
    CHECK(value(0, Figure::weight) == Approx(0.25));
    // The per-row figure of the small row is what a mean of ratios would have averaged in.
    CHECK(figure_of(Figure::answer_normalised, first.at(0, 0, 1)) == Approx(1.2));
    CHECK(figure_of(Figure::answer_share, first.at(0, 0, 1)) == Approx(0.12 / 0.14));
    // The layer pools its heads: answer |c| 0.92 + 0.8 over weight 1.14 + 1.0; means over rows and heads.
    CHECK(value(-1, Figure::answer_share) == Approx(1.72 / 2.14));
    CHECK(value(-1, Figure::row_sum) == Approx((1 + 0.1 + 0.5 + 0.5) / 4));
    CHECK(value(-1, Figure::weight) == Approx((0.25 + 0.25 + 0.5 + 0.5) / 4));
    // Errors: head 1's rows are equal (0); the layer's by hand from the per-row pooled terms
    // x = 0.8 + 0.4, 0.12 + 0.4 and y = 1.0 + 0.5, 0.14 + 0.5 (answer share).
    CHECK(summary.estimate(0, 1, Figure::answer_share).standard_error == Approx(0.0).margin(1e-15));  // equal rows: exact
    const double r = 1.72 / 2.14;
    const double e1 = 1.2 - r * 1.5, e2 = 0.52 - r * 0.64;
    CHECK(summary.estimate(0, -1, Figure::answer_share).standard_error ==
          Approx(std::sqrt((e1 * e1 + e2 * e2) / 2) / (2.14 / 2)));
    // Maps the rows did not have are NaN, value and error.
    CHECK(std::isnan(summary.estimate(0, 0, Figure::a1_answer).value));

    // A second result adds rows: head 0 gets a third row of sum 1 all on the answer.
    const AnalysisResult second = hand_made_result({{{0.0, 1.0, 0.0, 0.0}}, {{0.0, 0.4, 0.1, 0.0}}});
    summary.add(second);
    CHECK(summary.rows() == 3);
    CHECK(value(0, Figure::answer_share) == Approx(1.92 / 2.14));
    CHECK(value(0, Figure::answer_mass) == Approx(1.92 / 3));
    AnalysisResult other = second;
    other.n_heads = 1;
    other.figures.resize(1);
    CHECK_ERROR(ShapeError, summary.add(other), "RowSummary::add: a result of 1 layers and 1 heads after results of 1 and 2");
    CHECK_ERROR(ShapeError, summary.estimate(1, 0, Figure::answer_share), "RowSummary::estimate: layer 1 head 0");
}

TEST_CASE("analysis rows and spans are checked", "[analysis]") {
    const ModelConfig config = test::tiny_config(AttentionKind::dint, 64);
    const DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    AttentionAnalyzer<float> analyzer(config, 16);
    AnalysisResult result;
    const std::vector<Token> tokens = seeded_tokens(10, 64, 2);
    const auto rows_at = [](std::vector<Index> positions) {
        std::vector<AnalysisRow> rows;
        for (Index p : positions) rows.push_back(AnalysisRow{p, {}, {}, false});
        return rows;
    };
    CHECK_ERROR(ShapeError, analyzer.run(model, tokens, rows_at({3, 10}), result), "rows[1] is query row 10, outside the sequence of 10 tokens");
    CHECK_ERROR(OptionError, analyzer.run(model, tokens, rows_at({3, 3}), result), "rows must be strictly increasing");
    std::vector<AnalysisRow> rows = rows_at({9});
    rows[0].answer = {2, 11};
    CHECK_ERROR(ShapeError, analyzer.run(model, tokens, rows, result), "rows[0].answer[1] is 11, outside the sequence of 10 tokens");
    rows[0].answer = {2, 3};
    rows[0].noise = {5, 4};
    CHECK_ERROR(OptionError, analyzer.run(model, tokens, rows, result), "rows[0].noise[1] is 4 after 5");
    rows[0].noise = {0, 1, 3, 8};  // 3 is also an answer position
    CHECK_ERROR(OptionError, analyzer.run(model, tokens, rows, result),
                "rows[0].answer[1] and noise[2] are both position 3; a position is answer or noise, not both");
    rows[0].noise = {0, 1, 4, 8};
    analyzer.run(model, tokens, rows, result);
    CHECK_ERROR(ShapeError, analyzer.run(model, seeded_tokens(17, 64, 2), rows_at({1}), result), "17 tokens but the analyzer holds at most 16");
    const DecoderModel<float> other = DecoderModel<float>::seeded(test::tiny_config(AttentionKind::softmax, 64), 1);
    CHECK_ERROR(ShapeError, analyzer.run(other, tokens, rows_at({1}), result), "made for another configuration");
    // Every row's maps kept: n (n + 1) / 2 keys * 4 maps * layers * heads doubles, checked against
    // the machine's memory before anything runs (n: the fewest tokens whose maps pass it).
    const long double per_key = 4.0L * static_cast<long double>(config.num_hidden_layers * config.num_attention_heads);
    const std::vector<AnalysisRow> one_kept = {AnalysisRow{9, {}, {}, true}, AnalysisRow{11, {}, {}, false}};
    CHECK(AttentionAnalyzer<float>::kept_map_entries(config, one_kept, 12) == 10 * per_key);
    const auto n_over = static_cast<Index>(std::sqrt(2 * memory_limit_bytes() / (per_key * sizeof(double)))) + 1;
    if (n_over <= 100000) {  // this machine's memory is passed by the maps of a sequence the test can hold
        std::vector<AnalysisRow> all_rows;
        for (Index p = 0; p < n_over; ++p) all_rows.push_back(AnalysisRow{p, {}, {}, true});
        REQUIRE(AttentionAnalyzer<float>::kept_map_entries(config, all_rows, n_over) * sizeof(double) >
                memory_limit_bytes());
        AttentionAnalyzer<float> long_analyzer(config, n_over);
        const std::string expected = "AttentionAnalyzer::run: the kept maps of " + std::to_string(n_over) + " tokens";
        CHECK_ERROR(ShapeError, long_analyzer.run(model, seeded_tokens(n_over, 64, 2), all_rows, result),
                    expected.c_str(), "rows would take");
    }
    // No rows: nothing to measure, not an error.
    analyzer.run(model, tokens, {}, result);
    CHECK(result.figures.empty());
}
