// Whole-model logits against the golden files of tests/data/models/<name>/ (float64 logits from
// the independent PyTorch transcription tools/torch_reference.py), in double and in float, the
// way llm.c's test_gpt2 checks against its PyTorch dump: print the largest difference per model.
//
// Tolerances: model_test::golden_tolerance (golden_files.hpp): 1e-9 m in double, 64 eps_float m in
// float, m = max(1, max |golden logit|).
#include "golden_files.hpp"
#include "model_files.hpp"

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/decoder_model.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;
using model_test::golden_model_dirs;

using model_test::Golden;
using model_test::read_golden;

TEST_CASE("golden model directories are present", "[model][golden]") {
    CHECK(golden_model_dirs().size() >= 1);
}

TEMPLATE_TEST_CASE("model logits match the golden files", "[model][golden]", double, float) {
    using T = TestType;
    for (const std::filesystem::path& dir : golden_model_dirs()) {
        const std::string name = dir.filename().string();
        INFO("model " << name << " (" << (std::is_same_v<T, double> ? "double" : "float") << ")");
        std::vector<std::string> warnings;
        const DecoderModel<T> model = DecoderModel<T>::load(dir, &warnings);
        CHECK(warnings.empty());
        const Golden golden = read_golden(dir);
        REQUIRE(golden.logits.rows() == static_cast<Index>(golden.tokens.size()));
        REQUIRE(golden.logits.cols() == model.config().vocab_size);

        const RowMatrix<T> logits = model.logits(golden.tokens);
        const double magnitude = std::max(1.0, golden.logits.cwiseAbs().maxCoeff());
        const double max_diff = (logits.template cast<double>() - golden.logits).cwiseAbs().maxCoeff();
        std::printf("golden %-26s %-6s T=%3d max|logit| %.4f  max diff %.3e  (tolerance %.1e)\n", name.c_str(),
                    std::is_same_v<T, double> ? "double" : "float", static_cast<int>(golden.tokens.size()),
                    golden.logits.cwiseAbs().maxCoeff(), max_diff, model_test::golden_tolerance<T>(magnitude));
        CHECK(max_diff <= model_test::golden_tolerance<T>(magnitude));

        // The documented parameter count equals the number of scalars in model.safetensors.
        const SafetensorsFile weights(dir / "model.safetensors");
        Index in_file = 0;
        for (const auto& tensor_name : weights.names()) {
            Index size = 1;
            for (Index extent : weights.shape(tensor_name)) size *= extent;
            in_file += size;
        }
        CHECK(model.parameter_count() == in_file);
    }
}

TEST_CASE("golden: the dint_causal_softmax config omits every defaulted key", "[model][golden]") {
    const std::filesystem::path dir = std::filesystem::path(DIFFATTN_TEST_DATA_DIR) / "models/dint_causal_softmax";
    if (!std::filesystem::exists(dir / "config.json")) return;
    const ModelConfig config = read_model_config(dir / "config.json");
    CHECK(config.kv_heads() == config.num_attention_heads);
    CHECK(config.rms_norm_eps == 1e-5);
    CHECK(config.rope_theta == 10000.0);
    CHECK(config.dint_integral == DintIntegral::causal_softmax);
    CHECK(config.diff_gqa_pairing == DiffGqaPairing::per_head);
    CHECK(config.causal);
}
