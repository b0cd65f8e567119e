// The accuracy cost of a half-precision KV cache (docs/math.md §6), as docs/benchmarks.md
// ("Half-precision KV caches") states it: the float logits of the golden models (tests/data/models)
// and of the trained retrieval models (models/retrieval/, over the accuracy episodes of
// tests/data/retrieval/episodes.json) with the keys and values stored as f16 and as bf16, against
// the same float model with an f32 cache. Each sequence is prefilled through an empty cache in one
// call, so every token attends to rounded keys and values (tests/model/test_kv_cache.cpp shows
// decode steps give the same logits). Prints max |logit difference| (absolute and relative to
// m = max(1, max |f32 logit|)) and, for the retrieval models, how many answers (argmax at the
// scored positions) change.
//
// Shared by the full report (bench/half_kv_accuracy.cpp, every episode) and the test that holds
// its bounds on a subset (tests/analysis/test_half_kv_accuracy.cpp); no Catch2 here.
#pragma once

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/kv_cache.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace half_kv_accuracy {

using namespace diffattn;
namespace fs = std::filesystem;

/// Float logits [T x V] of `tokens` prefilled through an empty cache storing `precision`.
inline RowMatrix<float> prefill_logits(const DecoderModel<float>& model, const std::vector<Token>& tokens,
                                       KvPrecision precision) {
    const auto n = static_cast<Index>(tokens.size());
    KvCache<float> cache = model.make_cache(n, precision);
    ForwardState<float> state = model.make_state(n);
    return model.forward(tokens, state, &cache);
}

/// Largest differences of one precision over a set of sequences: absolute and relative to m; the
/// smallest one (every difference must be finite and nonzero: the rows were rounded).
struct Worst {
    double absolute = 0;
    double relative = 0;
    double smallest = INFINITY;
    bool all_finite = true;
    Index changed_answers = 0;
    Index answers = 0;

    void add(const RowMatrix<float>& half, const RowMatrix<float>& f32) {
        const double diff = static_cast<double>((half - f32).cwiseAbs().maxCoeff());
        const double m = std::max(1.0, static_cast<double>(f32.cwiseAbs().maxCoeff()));
        all_finite = all_finite && std::isfinite(diff);
        smallest = std::min(smallest, diff);
        absolute = std::max(absolute, diff);
        relative = std::max(relative, diff / m);
    }
};

/// The report over every causal golden model under data_dir/models and every retrieval model under
/// models_dir/retrieval on every `episode_stride`-th episode of each accuracy set (1: all of
/// them); prints one line per model and precision. Returns the worst figures of f16 and bf16.
struct Report {
    Worst f16, bf16;
};

inline Report run_report(const fs::path& data_dir, const fs::path& models_dir, std::size_t episode_stride) {
    const KvPrecision halves[] = {KvPrecision::f16, KvPrecision::bf16};
    Worst worst[2];
    std::vector<fs::path> goldens;
    for (const auto& entry : fs::directory_iterator(data_dir / "models")) {
        if (fs::exists(entry.path() / "golden.safetensors")) goldens.push_back(entry.path());
    }
    std::sort(goldens.begin(), goldens.end());
    for (const fs::path& dir : goldens) {
        const DecoderModel<float> model = DecoderModel<float>::load(dir);
        if (!model.config().causal) continue;  // encoders have no KV cache
        const Vector<double> ids = SafetensorsFile(dir / "golden.safetensors").vector<double>("tokens");
        std::vector<Token> tokens;
        for (Index i = 0; i < ids.size(); ++i) tokens.push_back(static_cast<Token>(ids(i)));
        const RowMatrix<float> f32 = prefill_logits(model, tokens, KvPrecision::f32);
        for (int p = 0; p < 2; ++p) {
            const RowMatrix<float> half = prefill_logits(model, tokens, halves[p]);
            Worst one;
            one.add(half, f32);
            worst[p].add(half, f32);
            std::printf("half_kv golden %-24s %-4s max |diff| %.3e (%.2e m)\n", dir.filename().string().c_str(),
                        to_string(halves[p]), one.absolute, one.relative);
        }
    }

    std::ifstream in(data_dir / "retrieval" / "episodes.json");
    if (!in) throw std::runtime_error("half_kv_accuracy: cannot read " + (data_dir / "retrieval" / "episodes.json").string());
    const nlohmann::json episodes = nlohmann::json::parse(in);
    for (const char* kind : {"diff", "diff_v2", "dint_causal_mean", "dint_causal_softmax", "shared_diff", "softmax"}) {
        const DecoderModel<float> model = DecoderModel<float>::load(models_dir / "retrieval" / kind);
        Worst model_worst[2];
        for (const nlohmann::json& set : episodes.at("sets")) {
            if (set.at("purpose") != "accuracy") continue;
            const nlohmann::json& list = set.at("episodes");
            for (std::size_t e = 0; e < list.size(); e += episode_stride) {
                const std::vector<Token> tokens = list[e].at("tokens").get<std::vector<Token>>();
                const std::vector<Index> score = list[e].at("score_pos").get<std::vector<Index>>();
                const RowMatrix<float> f32 = prefill_logits(model, tokens, KvPrecision::f32);
                for (int p = 0; p < 2; ++p) {
                    const RowMatrix<float> half = prefill_logits(model, tokens, halves[p]);
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
    std::printf("half_kv all: f16 %.2e m (answers changed %d of %d), bf16 %.2e m (answers changed %d)\n",
                worst[0].relative, static_cast<int>(worst[0].changed_answers), static_cast<int>(worst[0].answers),
                worst[1].relative, static_cast<int>(worst[1].changed_answers));
    return {worst[0], worst[1]};
}

}  // namespace half_kv_accuracy
