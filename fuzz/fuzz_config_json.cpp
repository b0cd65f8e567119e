// fuzz_config_json: config.json text of any supported family (our own, DiffLlama, Motif) ->
// ModelConfig (model/checkpoint_config.hpp, model/config_json.hpp), and a tiny model.
//
// Contract checked (docs/math.md §5, docs/checkpoints.md):
//  - any text is either a ModelConfig or a ConfigError (bad JSON, an unknown family, bad or
//    missing values); nothing else may escape, crash or hang;
//  - an accepted config passes validate(); one of our own format survives model_config_to_json ->
//    text -> model_config_from_json_text unchanged, and that text draws no warning (the writer
//    emits only keys the kind uses);
//  - within a size budget (checked here, before anything is allocated), an accepted config
//    builds a seeded DecoderModel<float> (or fails with a diffattn::Error) whose tensors add up
//    to parameter_count(), and whose forward pass (plain and through a KV cache) gives finite logits.
#include "fuzz_support.hpp"

#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_model.hpp"
#if defined(DIFFATTN_TEST_SUPPORT_MODEL)
// The replay, built with the tests: it calls the test suite's one instantiation of the model
// templates (tests/model/model_files.hpp) instead of compiling its own.
#include "model_files.hpp"
#endif

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
using diffattn_fuzz::finding;

/// The fields of `c` that its kind uses (what config.json round-trips), as comparable text.
std::string used_fields(const ModelConfig& c) {
    return model_config_to_json(c).dump();
}

/// True when a model of `c` is small enough to build on every input: each width bounded first,
/// so that parameter_count() cannot overflow, then the total.
bool within_budget(const ModelConfig& c) {
    constexpr Index max_width = 256, max_heads = 32, max_layers = 3, max_vocab = 512, max_ffn = 512;
    if (c.hidden_size > max_width || c.num_attention_heads > max_heads || c.kv_heads() > max_heads ||
        c.num_hidden_layers > max_layers || c.vocab_size > max_vocab || c.intermediate_size > max_ffn) {
        return false;
    }
    if (c.attention == AttentionKind::diff_v2 && c.head_dim > 64) return false;
    if (c.attention == AttentionKind::shared_diff && c.shared_diff_rank > 16) return false;
    return c.parameter_count() <= 2'000'000;
}

template <typename Matrix>
bool all_finite(const Matrix& m) {
    return m.array().isFinite().all();
}

/// Builds the model and runs it on a few tokens.
void exercise_model(const ModelConfig& config) {
    std::optional<DecoderModel<float>> model;
    if (!diffattn_fuzz::succeeds_or_throws_error("DecoderModel::seeded",
                                                  [&] { model.emplace(DecoderModel<float>::seeded(config, 1)); })) {
        return;  // a clear diffattn::Error: acceptable
    }
    if (model->parameters().parameter_count() != model->parameter_count()) {
        finding("the model's tensors hold ", model->parameters().parameter_count(), " parameters but parameter_count() is ",
                model->parameter_count());
    }
    const std::vector<Token> tokens = {0, static_cast<Token>(config.vocab_size - 1),
                                       static_cast<Token>(config.vocab_size / 2)};
    const RowMatrix<float> logits = model->logits(tokens);
    if (logits.rows() != 3 || logits.cols() != config.vocab_size) finding("logits have the wrong shape");
    if (!all_finite(logits)) finding("non-finite logits from a seeded model");

    // Token by token through a KV cache (decoders without a global integral only).
    const bool cacheable = config.causal && !(config.attention == AttentionKind::dint &&
                                              config.dint_integral == DintIntegral::global_mean);
    if (!cacheable) return;
    KvCache<float> cache = model->make_cache(3);
    ForwardState<float> state = model->make_state(1);
    for (const Token token : tokens) {
        const auto step = model->forward({token}, state, &cache);
        if (!all_finite(step)) finding("non-finite logits from a cached forward");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> warnings;
    ModelConfig config;
    try {
        config = checkpoint_config_from_json_text(text, &warnings, "fuzz config.json");  // as load() reads it
    } catch (const ConfigError&) {
        return 0;  // rejected: the one allowed failure
    } catch (const std::exception& e) {
        finding("checkpoint_config_from_json_text threw something other than a ConfigError: ", e.what());
    }
    try {
        config.validate();  // accepted configs are valid
    } catch (const std::exception& e) {
        finding("an accepted config failed validate(): ", e.what());
    }
    // Round trip of our own format: the written config reads back the same, without warnings. (A
    // released family's conventions have no place in it: model_config_to_json refuses them.)
    if (config.conventions.family == CheckpointFamily::diffattn) {
        try {
            const std::string written = model_config_to_json(config).dump();
            std::vector<std::string> rewarnings;
            const ModelConfig again = model_config_from_json_text(written, &rewarnings, "round trip");
            if (used_fields(again) != used_fields(config)) {
                finding("round trip changed the config:\n  ", used_fields(config), "\n  ", used_fields(again));
            }
            if (!rewarnings.empty()) {
                finding("model_config_to_json wrote a key that draws a warning: ", rewarnings.front());
            }
            if (std::memcmp(&again.rms_norm_eps, &config.rms_norm_eps, sizeof(double)) != 0 ||
                std::memcmp(&again.rope_theta, &config.rope_theta, sizeof(double)) != 0) {
                finding("round trip changed rms_norm_eps or rope_theta");
            }
        } catch (const std::exception& e) {
            finding("an accepted config failed its round trip: ", e.what());
        }
    }
    if (within_budget(config)) {
        try {
            exercise_model(config);
        } catch (const std::exception& e) {
            finding("the model of an accepted config threw: ", e.what());
        }
    }
    return 0;
}
