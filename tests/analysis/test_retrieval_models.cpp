// The shipped retrieval models (models/retrieval/<kind>/, docs/retrieval.md): every model is
// loaded in float and in double, run over the stored evaluation episodes
// (tests/data/retrieval/episodes.json) by the analysis library, and its accuracy and attention
// figures are compared with the figures tools/retrieval_figures.py computed in float64 PyTorch from
// the same weights on the same episodes (tests/data/retrieval/expected_<kind>.json).
//
// Tolerances (docs/retrieval.md, "Comparing with the expected figures"):
//   - predictions: equal on every row whose float64 top-1 margin is at least `near_tie`;
//     accuracy: equal up to the number of near-tie rows;
//   - top-1 margins (double only): 1e-6, the rounding of the stored margins (6 decimals);
//   - attention figures per set, layer and head (every figure of the expected file, each a ratio
//     of sums over the rows, and its standard error): 1e-9 in double (the stored figures have 10
//     decimals); in float 64 float epsilons (7.6e-6), the bound the checkpoint tests hold float
//     logits to: the maps are computed in double, but from rotated queries and keys that carry the
//     float forward's rounding.
#include "diffattn/analysis/attention_analysis.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include "../address_sanitizer.hpp"
#include "../model/model_files.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace diffattn;
using namespace diffattn::analysis;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr bool kSanitized = diffattn_test::kAddressSanitizer;

json read_json(const fs::path& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

fs::path retrieval_data() { return fs::path(DIFFATTN_TEST_DATA_DIR) / "retrieval"; }
fs::path retrieval_models() { return fs::path(DIFFATTN_MODELS_DIR) / "retrieval"; }

/// Compares the figures of one set (or of all attention sets) with the expected per_layer_head:
/// every figure the file has (tools/retrieval_figures.py, FIGURES), value and standard error.
void check_figures(const std::string& where, const RowSummary& summary, const json& expected, double tolerance) {
    REQUIRE(summary.rows() == expected.at("rows").get<Index>());
    const json& layers = expected.at("per_layer_head");
    REQUIRE(static_cast<Index>(layers.size()) == summary.layers());
    for (Index l = 0; l < summary.layers(); ++l) {
        REQUIRE(static_cast<Index>(layers[l].size()) == summary.heads());
        for (Index h = 0; h < summary.heads(); ++h) {
            Index compared = 0;
            for (const FigureInfo& info : figure_list()) {
                const json& want = layers[l][h];
                if (!want.contains(info.name)) continue;  // a figure PyTorch does not compute (the maps' own masses)
                const Estimate got = summary.estimate(l, h, info.figure);
                const double want_value = want.at(info.name).get<double>();
                const double want_se = want.at(std::string(info.name) + "_se").get<double>();
                INFO(where << " layer " << l << " head " << h << " " << info.name << ": C++ " << got.value << " +- "
                           << got.standard_error << ", PyTorch " << want_value << " +- " << want_se);
                CHECK(std::abs(got.value - want_value) <= tolerance);
                CHECK(std::abs(got.standard_error - want_se) <= tolerance);
                ++compared;
            }
            CHECK(compared * 2 == static_cast<Index>(layers[l][h].size()));  // no expected figure left unread
        }
    }
}

/// Which sets a run checks: in float every set, in double all but the 16x ones (float covers
/// them). Under AddressSanitizer (about 10x slower; the figures are the release run's to check)
/// float runs one attention set and one accuracy set at the training length, double one set.
bool checked_here(const json& set, bool is_double) {
    const std::string name = set.at("name");
    if (kSanitized) return is_double ? name == "att_L64_depth0" : (name == "att_L64_depth50" || name == "acc_L64_N6_R2");
    return !is_double || set.at("context_len").get<Index>() <= 256;
}

template <typename T>
void check_model(const std::string& kind, const json& episodes) {
    constexpr bool is_double = std::is_same_v<T, double>;
    const json expected = read_json(retrieval_data() / ("expected_" + kind + ".json"));
    REQUIRE(expected.at("kind") == kind);
    const double near_tie = expected.at("near_tie").get<double>();
    const double attention_tolerance = is_double ? 1e-9 : 64.0 * std::numeric_limits<float>::epsilon();

    const DecoderModel<T> model = DecoderModel<T>::load(retrieval_models() / kind);
    Index max_len = 0;
    for (const json& set : episodes.at("sets"))
        for (const json& ep : set.at("episodes")) max_len = std::max<Index>(max_len, static_cast<Index>(ep.at("tokens").size()));
    AttentionAnalyzer<T> analyzer(model.config(), max_len);
    AnalysisResult result;
    RowSummary all_depths;
    Index sets_checked = 0;
    for (const json& set : episodes.at("sets")) {
        const std::string name = set.at("name");
        const bool attention = set.at("purpose") == "attention";
        if (!checked_here(set, is_double)) continue;
        const json& want = expected.at("accuracy").at(name);
        const std::vector<Index> want_predicted = want.at("predicted").get<std::vector<Index>>();
        const std::vector<double> want_margin = want.at("margin").get<std::vector<double>>();
        RowSummary means;
        Index correct = 0;
        std::size_t row = 0;
        for (const json& ep : set.at("episodes")) {
            const std::vector<Token> tokens = ep.at("tokens").get<std::vector<Token>>();
            const std::vector<Index> score = ep.at("score_pos").get<std::vector<Index>>();
            const std::vector<Index> targets = ep.at("targets").get<std::vector<Index>>();
            std::vector<AnalysisRow> rows;
            if (attention) {
                for (std::size_t r = 0; r < score.size(); ++r) {
                    rows.push_back(AnalysisRow{score[r], ep.at("answer")[r].get<std::vector<Index>>(),
                                               ep.at("noise").get<std::vector<Index>>(), false});
                }
            }
            analyzer.run(model, tokens, rows, result);
            if (attention) {
                means.add(result);
                all_depths.add(result);
            }
            const ConstMatrixRef<T> logits = analyzer.logits(static_cast<Index>(tokens.size()));
            for (std::size_t r = 0; r < score.size(); ++r, ++row) {
                REQUIRE(row < want_predicted.size());
                const auto row_logits = logits.row(score[r]);
                const std::vector<Index> top = top_logits(row_logits, 2);
                correct += top[0] == targets[r] ? 1 : 0;
                INFO(kind << " " << name << " row " << row << ": C++ predicts " << top[0] << ", PyTorch "
                          << want_predicted[row] << " (float64 margin " << want_margin[row] << ")");
                if (want_margin[row] >= near_tie) CHECK(top[0] == want_predicted[row]);
                if (is_double) {
                    const double margin = static_cast<double>(row_logits(top[0])) - static_cast<double>(row_logits(top[1]));
                    CHECK(std::abs(margin - want_margin[row]) <= 1e-6);
                }
            }
        }
        REQUIRE(row == want_predicted.size());
        INFO(kind << " " << name << ": " << correct << " correct in C++, " << want.at("correct") << " in PyTorch");
        CHECK(std::abs(correct - want.at("correct").get<Index>()) <= want.at("near_ties").get<Index>());
        if (attention) check_figures(kind + " " + name, means, expected.at("attention").at(name), attention_tolerance);
        ++sets_checked;
    }
    CHECK(sets_checked >= (kSanitized ? 1 : 12));  // the attention sets, and the accuracy sets at 64
    if (!kSanitized) {
        check_figures(kind + " all depths", all_depths, expected.at("attention").at("all_depths"), attention_tolerance);
    }
}

/// The kinds shipped: every models/retrieval/<kind>/ directory, which must have expected figures.
std::vector<std::string> shipped_kinds() {
    std::set<std::string> kinds;
    for (const auto& entry : fs::directory_iterator(retrieval_models()))
        if (entry.is_directory()) kinds.insert(entry.path().filename().string());
    return {kinds.begin(), kinds.end()};
}

}  // namespace

TEST_CASE("retrieval models: accuracy and attention figures equal PyTorch's", "[analysis][retrieval]") {
    const json episodes = read_json(retrieval_data() / "episodes.json");
    REQUIRE(episodes.at("format") == "diffattn-retrieval-episodes-1");
    const std::vector<std::string> kinds = shipped_kinds();
    // The six kinds: a missing directory must fail, not shrink the test.
    CHECK(kinds == std::vector<std::string>{"diff", "diff_v2", "dint_causal_mean", "dint_causal_softmax", "shared_diff",
                                            "softmax"});
    for (const std::string& kind : kinds) {
        REQUIRE(fs::exists(retrieval_data() / ("expected_" + kind + ".json")));
        SECTION(kind + " float") { check_model<float>(kind, episodes); }
        SECTION(kind + " double") { check_model<double>(kind, episodes); }
    }
}
