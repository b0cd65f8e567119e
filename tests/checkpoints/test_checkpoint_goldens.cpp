// Released DiffLlama and Motif checkpoints (docs/checkpoints.md) read unchanged from the golden
// directories of tests/data/checkpoints (tools/make_checkpoint_goldens.py: float64 logits and
// greedy continuations from the independent transcription tools/checkpoint_reference.py, never
// from this code) and from the README's demo model models/diffllama_tiny_text (a DiffLlama trained
// by tools/train_text_demo.py, its golden by the same transcription): logits in double and float, greedy continuations with and without the KV cache
// stopping at generation_config.json's end-of-sequence ids, the step logits of a cached decode,
// and feeding the sequence token by token and in chunks. Prints the largest difference per
// directory, as test_golden_models does for our own format.
//
// Tolerances: model_test::golden_tolerance (tests/model/golden_files.hpp), the same as for our own
// format: 1e-9 m in double, 64 eps_float m in float, m = max(1, max |golden logit|). These models
// are as deep as ours (2 layers, widths <= 64; float error seen <= 8 eps m), BF16 weights are
// widened exactly (no extra error), and each convention a reader could get wrong moves the logits
// by more than 1e-2 = 100 times the float tolerance (asserted by the generator for each,
// tests/data/checkpoints/README.md "Sensitivity"). Cached against full forward: the criterion of
// tests/model/test_kv_cache.cpp (double 1e-12 m; float 2 e_full + 16 eps m).
#include "../model/golden_files.hpp"
#include "../model/model_files.hpp"

#include "diffattn/io/safetensors.hpp"
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/generation_config.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace diffattn;
using model_test::cached_logits;
using model_test::checkpoint_golden_dirs;
using model_test::golden_tolerance;
using model_test::kEpsFloat;
using model_test::magnitude;
using model_test::max_abs_diff;

namespace {

/// A golden directory's continuation: generated ids, their step logits, and the metadata.
struct Continuation {
    std::vector<Token> generated;        // [n]
    RowMatrix<double> generated_logits;  // [n x V]: the last-row logits that chose each id
    Index max_new_tokens = 0;
    std::vector<Token> eos_ids;          // sorted
    bool stopped_on_eos = false;
    std::string family;
};

Continuation read_continuation(const std::filesystem::path& dir) {
    const SafetensorsFile file(dir / "golden.safetensors");
    Continuation c;
    c.generated = model_test::golden_tokens(file, "generated");
    c.generated_logits = file.matrix<double>("generated_logits");
    const auto& meta = file.metadata();
    c.max_new_tokens = std::stoi(meta.at("max_new_tokens"));
    for (const auto& id : nlohmann::json::parse(meta.at("eos_token_ids"))) c.eos_ids.push_back(id.get<Token>());
    c.stopped_on_eos = meta.at("stopped_on_eos") == "true";
    c.family = meta.at("family");
    return c;
}

const char* precision_name(bool is_double) { return is_double ? "double" : "float"; }

/// The README's demo model: a trained DiffLlama in the Hub layout with a golden of the same form.
std::filesystem::path demo_model_dir() { return std::filesystem::path(DIFFATTN_MODELS_DIR) / "diffllama_tiny_text"; }

/// Every directory this file checks against its golden: tests/data/checkpoints' and the demo model.
std::vector<std::filesystem::path> golden_dirs() {
    std::vector<std::filesystem::path> dirs = checkpoint_golden_dirs();
    dirs.push_back(demo_model_dir());
    return dirs;
}

}  // namespace

TEST_CASE("released checkpoints: the golden directories are present", "[checkpoints][golden]") {
    CHECK(checkpoint_golden_dirs().size() == 10);
    CHECK(std::filesystem::exists(demo_model_dir() / "golden.safetensors"));
}

TEMPLATE_TEST_CASE("released checkpoints: logits match the golden files", "[checkpoints][golden]", double, float) {
    using T = TestType;
    for (const std::filesystem::path& dir : golden_dirs()) {
        const std::string name = dir.filename().string();
        INFO("checkpoint " << name << " (" << precision_name(std::is_same_v<T, double>) << ")");
        std::vector<std::string> warnings;
        const DecoderModel<T> model = DecoderModel<T>::load(dir, &warnings);
        CHECK(warnings.empty());
        CHECK(to_string(model.config().conventions.family) == read_continuation(dir).family);
        const model_test::Golden golden = model_test::read_golden(dir);
        REQUIRE(golden.logits.cols() == model.config().vocab_size);

        const double m = magnitude(golden.logits);
        const double diff = max_abs_diff(model.logits(golden.tokens).template cast<double>(), golden.logits);
        std::printf("checkpoint %-32s %-6s T=%3d max|logit| %.4f  max diff %.3e  (tolerance %.1e)\n", name.c_str(),
                    precision_name(std::is_same_v<T, double>), static_cast<int>(golden.tokens.size()),
                    golden.logits.cwiseAbs().maxCoeff(), diff, golden_tolerance<T>(m));
        CHECK(diff <= golden_tolerance<T>(m));

        // The parameter count is the number of scalars over every file (shards included), the
        // ignored rotary buffers aside.
        const SafetensorsCheckpoint files(dir);
        Index in_files = 0;
        for (const SafetensorsFile& file : files.files()) {
            for (const auto& [tensor, info] : file.tensors()) {
                if (!detail::ends_with(tensor, ".rotary_emb.inv_freq")) in_files += info.num_elements;
            }
        }
        CHECK(model.parameter_count() == in_files);
    }
}

TEMPLATE_TEST_CASE("released checkpoints: greedy generation stops at generation_config.json's eos",
                   "[checkpoints][golden][generate]", double, float) {
    using T = TestType;
    for (const std::filesystem::path& dir : golden_dirs()) {
        INFO("checkpoint " << dir.filename().string());
        const DecoderModel<T> model = DecoderModel<T>::load(dir);
        const model_test::Golden golden = model_test::read_golden(dir);
        const Continuation expected = read_continuation(dir);
        const std::vector<Token> eos = read_eos_token_ids(dir, model.config().vocab_size);
        CHECK(eos == expected.eos_ids);
        for (bool use_cache : {true, false}) {
            INFO((use_cache ? "with" : "without") << " the KV cache");
            const std::vector<Token> generated =
                generate(model, golden.tokens, expected.max_new_tokens, use_cache, 1, eos);
            CHECK(generated == expected.generated);
        }
        CHECK((static_cast<Index>(expected.generated.size()) < expected.max_new_tokens) == expected.stopped_on_eos);

        // The step logits of a cached decode (prefill, then one generated token per call) are the
        // golden rows that chose each token.
        const Index prompt = static_cast<Index>(golden.tokens.size());
        const Index steps = static_cast<Index>(expected.generated.size());
        KvCache<T> cache = model.make_cache(prompt + steps);
        ForwardState<T> state = model.make_state(prompt);
        RowMatrix<double> step_logits(steps, model.config().vocab_size);
        step_logits.row(0) = model.forward(golden.tokens, state, &cache).row(prompt - 1).template cast<double>();
        for (Index s = 1; s < steps; ++s) {
            const std::vector<Token> next{expected.generated[static_cast<std::size_t>(s - 1)]};
            step_logits.row(s) = model.forward(next, state, &cache).row(0).template cast<double>();
        }
        const double m = magnitude(expected.generated_logits);
        CHECK(max_abs_diff(step_logits, expected.generated_logits) <= golden_tolerance<T>(m));
    }
}

TEST_CASE("released checkpoints: cached logits match the full forward", "[checkpoints][kv_cache]") {
    for (const std::filesystem::path& dir : golden_dirs()) {
        INFO("checkpoint " << dir.filename().string());
        const DecoderModel<double> model_d = DecoderModel<double>::load(dir);
        const DecoderModel<float> model_f = DecoderModel<float>::load(dir);
        // The prompt and its continuation: past the prompt, as generation runs.
        std::vector<Token> tokens = model_test::read_golden(dir).tokens;
        for (Token id : read_continuation(dir).generated) tokens.push_back(id);
        const RowMatrix<double> full_d = model_d.logits(tokens);
        const double m = magnitude(full_d);
        const double e_full = max_abs_diff(model_f.logits(tokens).cast<double>(), full_d);
        for (const model_test::Schedule& schedule : model_test::schedules(static_cast<Index>(tokens.size()))) {
            INFO("schedule " << schedule.name);
            const double e_double = max_abs_diff(cached_logits(model_d, tokens, schedule.chunks), full_d);
            const double e_float = max_abs_diff(cached_logits(model_f, tokens, schedule.chunks).cast<double>(), full_d);
            std::printf("kv checkpoint %-32s %-16s T=%3d  double %.2e m  float %.2f eps m (full float %.2f eps m)\n",
                        dir.filename().string().c_str(), schedule.name, static_cast<int>(tokens.size()),
                        e_double / m, e_float / (kEpsFloat * m), e_full / (kEpsFloat * m));
            CHECK(e_double <= 1e-12 * m);
            CHECK(e_float <= 2 * e_full + 16 * kEpsFloat * m);
        }
    }
}
