// Whole-model logits against the golden files of tests/data/models/<name>/ (float64 logits from
// the independent PyTorch transcription tools/torch_reference.py), in double and in float, the
// way llm.c's test_gpt2 checks against its PyTorch dump: print the largest difference per model.
//
// Tolerances, relative to the logit magnitude m = max(1, max |golden logit|):
//   double: 1e-9 m   (the double forward agrees to ~1e-15; anything near 1e-9 is a real bug)
//   float:  64 eps_float m = 7.6e-6 m. A float forward of these models chains two layers of ~10
//           operations (norms, projections of width <= 43, softmax, subln, SwiGLU) plus the final
//           norm and lm_head, each adding a few eps relative to the O(1) residual stream; the
//           largest error seen is ~8 eps m, so 64 eps m leaves room for other compilers and SIMD
//           widths while any formula error (>= 1e-3) still fails.
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

namespace {

struct Golden {
    std::vector<Token> tokens;
    RowMatrix<double> logits;  // [T x V]
};

Golden read_golden(const std::filesystem::path& dir) {
    const SafetensorsFile file(dir / "golden.safetensors");
    const Vector<double> tokens = file.vector<double>("tokens");  // integer ids stored as F64
    Golden golden;
    for (Index i = 0; i < tokens.size(); ++i) golden.tokens.push_back(static_cast<Token>(tokens(i)));
    golden.logits = file.matrix<double>("logits");
    return golden;
}

template <typename T>
double tolerance(double magnitude) {
    return (std::is_same_v<T, double> ? 1e-9 : 64 * static_cast<double>(std::numeric_limits<float>::epsilon())) *
           magnitude;
}

}  // namespace

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
                    golden.logits.cwiseAbs().maxCoeff(), max_diff, tolerance<T>(magnitude));
        CHECK(max_diff <= tolerance<T>(magnitude));

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
