// The accuracy cost of a half-precision KV cache (docs/math.md §6), as docs/benchmarks.md states it:
// the float logits of the golden models (tests/data/models) and of the trained retrieval models
// (models/retrieval/, over the accuracy episodes of tests/data/retrieval/episodes.json) with the
// keys and values stored as f16 and as bf16, against the same float model with an f32 cache. Each
// sequence is prefilled through an empty cache in one call, so every token attends to rounded
// keys and values (tests/model/test_kv_cache.cpp shows decode steps give the same logits). Prints
// max |logit difference| (absolute and relative to m = max(1, max |f32 logit|)) and, for the
// retrieval models, how many answers (argmax at the scored positions) change.
//
// Checks: every difference is finite and nonzero (the rows were rounded), and over all models f16
// (11 significant bits) is closer to f32 than bf16 (8 bits): its largest relative difference is
// below bf16's (by about 2^3 in the measurements; the changed answers are near ties and not
// ordered by precision, so they are reported, not checked).
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include "../model/golden_files.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace diffattn;
namespace fs = std::filesystem;

namespace half_kv_accuracy {

/// Float logits [T x V] of `tokens` prefilled through an empty cache storing `precision`.
RowMatrix<float> prefill_logits(const DecoderModel<float>& model, const std::vector<Token>& tokens,
                                KvPrecision precision) {
    const auto n = static_cast<Index>(tokens.size());
    KvCache<float> cache = model.make_cache(n, precision);
    ForwardState<float> state = model.make_state(n);
    return model.forward(tokens, state, &cache);
}

/// Largest differences of one precision over all models: absolute and relative to m.
struct Worst {
    double absolute = 0;
    double relative = 0;
    Index changed_answers = 0;
    Index answers = 0;

    void add(const RowMatrix<float>& half, const RowMatrix<float>& f32) {
        const double diff = static_cast<double>((half - f32).cwiseAbs().maxCoeff());
        const double m = std::max(1.0, static_cast<double>(f32.cwiseAbs().maxCoeff()));
        CHECK(std::isfinite(diff));
        CHECK(diff > 0);
        absolute = std::max(absolute, diff);
        relative = std::max(relative, diff / m);
    }
};

}  // namespace half_kv_accuracy

TEST_CASE("half-precision KV caches: logit differences against f32 on the goldens and the retrieval models",
          "[analysis][half_kv][accuracy]") {
    using half_kv_accuracy::Worst;
    const KvPrecision halves[] = {KvPrecision::f16, KvPrecision::bf16};
    Worst worst[2];
    for (const fs::path& dir : model_test::golden_model_dirs()) {
        const DecoderModel<float> model = DecoderModel<float>::load(dir);
        if (!model.config().causal) continue;  // encoders have no KV cache
        const std::vector<Token> tokens = model_test::read_golden(dir).tokens;
        const RowMatrix<float> f32 = half_kv_accuracy::prefill_logits(model, tokens, KvPrecision::f32);
        for (int p = 0; p < 2; ++p) {
            const RowMatrix<float> half = half_kv_accuracy::prefill_logits(model, tokens, halves[p]);
            INFO(dir.filename().string() << " " << to_string(halves[p]));
            worst[p].add(half, f32);
            std::printf("half_kv golden %-24s %-4s max |diff| %.3e (%.2e m)\n", dir.filename().string().c_str(),
                        to_string(halves[p]), static_cast<double>((half - f32).cwiseAbs().maxCoeff()),
                        static_cast<double>((half - f32).cwiseAbs().maxCoeff()) /
                            std::max(1.0, static_cast<double>(f32.cwiseAbs().maxCoeff())));
        }
    }

    std::ifstream in(fs::path(DIFFATTN_TEST_DATA_DIR) / "retrieval" / "episodes.json");
    REQUIRE(in.good());
    const nlohmann::json episodes = nlohmann::json::parse(in);
    for (const char* kind : {"diff", "diff_v2", "dint_causal_mean", "dint_causal_softmax", "shared_diff", "softmax"}) {
        const DecoderModel<float> model = DecoderModel<float>::load(fs::path(DIFFATTN_MODELS_DIR) / "retrieval" / kind);
        Worst model_worst[2];
        for (const nlohmann::json& set : episodes.at("sets")) {
            if (set.at("purpose") != "accuracy") continue;
            for (const nlohmann::json& ep : set.at("episodes")) {
                const std::vector<Token> tokens = ep.at("tokens").get<std::vector<Token>>();
                const std::vector<Index> score = ep.at("score_pos").get<std::vector<Index>>();
                const RowMatrix<float> f32 = half_kv_accuracy::prefill_logits(model, tokens, KvPrecision::f32);
                for (int p = 0; p < 2; ++p) {
                    const RowMatrix<float> half = half_kv_accuracy::prefill_logits(model, tokens, halves[p]);
                    INFO(kind << " " << to_string(halves[p]));
                    for (Worst* w : {&worst[p], &model_worst[p]}) {
                        w->add(half, f32);
                        for (Index position : score) {
                            ++w->answers;
                            if (top_logit(half.row(position)) != top_logit(f32.row(position))) ++w->changed_answers;
                        }
                    }
                }
            }
        }
        for (int p = 0; p < 2; ++p) {
            std::printf("half_kv retrieval %-20s %-4s max |diff| %.3e (%.2e m), answers changed %d of %d\n", kind,
                        to_string(halves[p]), model_worst[p].absolute, model_worst[p].relative,
                        static_cast<int>(model_worst[p].changed_answers), static_cast<int>(model_worst[p].answers));
        }
    }
    std::printf("half_kv all: f16 %.2e m (answers changed %d), bf16 %.2e m (answers changed %d)\n", worst[0].relative,
                static_cast<int>(worst[0].changed_answers), worst[1].relative,
                static_cast<int>(worst[1].changed_answers));
    CHECK(worst[0].answers > 100);
    CHECK(worst[0].relative < worst[1].relative);
}
