// Loading model directories: every tensor present with its shape and no other, errors naming the
// file and the tensor, checked before the model is allocated; paths the file system cannot resolve;
// a written seeded model loads back to the same logits (float and double).
#include "model_files.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include <unistd.h>

using namespace diffattn;
using Catch::Matchers::Contains;

namespace {

/// The configurations of this file (token 39 of kTokens is the last of the vocabulary).
ModelConfig tiny(AttentionKind kind) { return test::tiny_config(kind, 40); }

/// The FileError message of loading `dir`, or "no error".
std::string load_error(const std::filesystem::path& dir) {
    try {
        DecoderModel<float>::load(dir);
    } catch (const FileError& e) {
        return e.what();
    }
    return "no error";
}

const std::vector<Token> kTokens = {1, 7, 3, 39, 0, 12, 12, 5};

}  // namespace

TEST_CASE("a written model directory loads back to the same logits", "[model][files]") {
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                               AttentionKind::shared_diff, AttentionKind::diff_v2}) {
        INFO(to_string(kind));
        ModelConfig config = tiny(kind);
        config.tie_word_embeddings = kind == AttentionKind::diff;
        DecoderModel<float> original = DecoderModel<float>::seeded(config, 42);
        model_test::TempDir dir;
        model_test::write_model_dir(dir.path(), config, model_test::tensors_of(original));

        const DecoderModel<float> loaded = DecoderModel<float>::load(dir.path());
        CHECK((loaded.logits(kTokens) - original.logits(kTokens)).cwiseAbs().maxCoeff() == 0.0f);
        const DecoderModel<double> loaded_double = DecoderModel<double>::load(dir.path());
        const RowMatrix<double> logits_double = loaded_double.logits(kTokens);
        CHECK((logits_double.cast<float>() - original.logits(kTokens)).cwiseAbs().maxCoeff() < 1e-4f);
    }
}

TEST_CASE("a missing tensor is a FileError naming the file and the tensor", "[model][files]") {
    const ModelConfig config = tiny(AttentionKind::dint);
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    model_test::TensorSet tensors = model_test::tensors_of(model);
    for (const std::string name : {"model.layers.1.mlp.up_proj.weight", "model.layers.0.self_attn.lambda_k2",
                                   "lm_head.weight", "model.norm.weight"}) {
        INFO(name);
        model_test::TensorSet missing = tensors;
        missing.shapes.erase(name);
        missing.data.erase(name);
        model_test::TempDir dir;
        model_test::write_model_dir(dir.path(), config, missing);
        CHECK_THAT(load_error(dir.path()), Contains("model.safetensors") && Contains(name) && Contains("missing"));
    }
}

TEST_CASE("an unexpected tensor is a FileError naming it", "[model][files]") {
    const ModelConfig config = tiny(AttentionKind::diff);
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    model_test::TensorSet tensors = model_test::tensors_of(model);
    tensors.shapes["model.layers.0.self_attn.q_proj.bias"] = {16};
    tensors.data["model.layers.0.self_attn.q_proj.bias"] = std::vector<float>(16, 0.0f);
    model_test::TempDir dir;
    model_test::write_model_dir(dir.path(), config, tensors);
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors") && Contains("unexpected") &&
                                           Contains("model.layers.0.self_attn.q_proj.bias"));

    // A tied model must not carry lm_head.weight.
    ModelConfig tied = config;
    tied.tie_word_embeddings = true;
    model_test::TensorSet untied = model_test::tensors_of(model);
    model_test::TempDir dir2;
    model_test::write_model_dir(dir2.path(), tied, untied);
    CHECK_THAT(load_error(dir2.path()), Contains("unexpected") && Contains("lm_head.weight"));
}

TEST_CASE("a tensor of the wrong shape is a FileError naming it and both shapes", "[model][files]") {
    ModelConfig config = tiny(AttentionKind::diff);
    config.num_attention_heads = 4;
    config.num_key_value_heads = 2;
    config.hidden_size = 32;
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    model_test::TensorSet tensors = model_test::tensors_of(model);
    // k_proj as if there were no GQA: [32, 32] instead of [16, 32].
    const std::string name = "model.layers.1.self_attn.k_proj.weight";
    tensors.shapes[name] = {32, 32};
    tensors.data[name].resize(32 * 32);
    model_test::TempDir dir;
    model_test::write_model_dir(dir.path(), config, tensors);
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors") && Contains(name) && Contains("[32, 32]") &&
                                           Contains("[16, 32]"));

    // A Shared DIFF factor with the wrong rank.
    const ModelConfig shared = tiny(AttentionKind::shared_diff);
    DecoderModel<float> shared_model = DecoderModel<float>::seeded(shared, 1);
    model_test::TensorSet shared_tensors = model_test::tensors_of(shared_model);
    shared_tensors.shapes["model.layers.0.self_attn.q2_b"] = {2, 4, 3};
    shared_tensors.data["model.layers.0.self_attn.q2_b"].resize(24);
    model_test::TempDir dir2;
    model_test::write_model_dir(dir2.path(), shared, shared_tensors);
    CHECK_THAT(load_error(dir2.path()), Contains("q2_b") && Contains("[2, 4, 3]") && Contains("[2, 4, 2]"));
}

TEST_CASE("missing files and directories", "[model][files]") {
    model_test::TempDir dir;
    CHECK_THAT(load_error(dir.path() / "nope"), Contains("nope"));
    CHECK_THROWS_AS(DecoderModel<float>::load(dir.path()), FileError);  // no config.json
    write_model_config(dir.path() / "config.json", tiny(AttentionKind::diff));
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors"));
}

TEST_CASE("a model path the file system cannot resolve is a FileError naming it and the reason",
          "[model][files]") {
    model_test::TempDir dir;
    // A symbolic link to itself: stat() fails with ELOOP.
    const std::filesystem::path loop = dir.path() / "loop";
    std::filesystem::create_directory_symlink(loop, loop);
    CHECK_THAT(load_error(loop), Contains("model directory") && Contains(loop.string()) &&
                                     Contains("Too many levels of symbolic links"));
    // A path longer than PATH_MAX: ENAMETOOLONG.
    const std::filesystem::path long_path = dir.path() / std::string(5000, 'a');
    CHECK_THAT(load_error(long_path), Contains("model directory") && Contains("File name too long"));
    // config.json and model.safetensors that are symbolic link loops.
    write_model_config(dir.path() / "config.json", tiny(AttentionKind::diff));
    std::filesystem::create_symlink(dir.path() / "model.safetensors", dir.path() / "model.safetensors");
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors") && Contains("Too many levels"));
    std::filesystem::remove(dir.path() / "config.json");
    std::filesystem::create_symlink(dir.path() / "config.json", dir.path() / "config.json");
    CHECK_THAT(load_error(dir.path()), Contains("config.json") && Contains("Too many levels"));

    // A directory inside a parent without search permission: EACCES (root passes every permission check).
    if (::geteuid() == 0) {
        WARN("permission-denied parent skipped: running as root");
    } else {
        const std::filesystem::path locked = dir.path() / "locked";
        std::filesystem::create_directories(locked / "model");
        std::filesystem::permissions(locked, std::filesystem::perms::none);
        const std::string message = load_error(locked / "model");
        std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
        CHECK_THAT(message, Contains("model directory") && Contains("Permission denied"));
    }
}

TEST_CASE("load checks every tensor name and shape before allocating the model", "[model][files][memory]") {
    if (!model_test::reset_peak_rss()) {
        WARN("skipped: the peak resident set size cannot be reset here (/proc/self/clear_refs)");
        return;
    }
    // A tied softmax model with no layers: embed_tokens [32768, 1024] alone, 2^25 parameters
    // (128 MiB in float). The file holds half of them in one tensor of another name, as F16:
    // enough for the parameter-count check, 32 MiB to read.
    ModelConfig config = model_test::embedding_only_config(32768);
    const std::uint64_t elements = std::uint64_t{1} << 24;
    model_test::TempDir dir;
    write_model_config(dir.path() / "config.json", config);
    model_test::write_sparse_f16_file(dir.path() / "model.safetensors", elements);
    const long double file_bytes = static_cast<long double>(std::filesystem::file_size(dir.path() / "model.safetensors"));

    REQUIRE(model_test::reset_peak_rss());
    const long long before = model_test::status_bytes("VmRSS");
    CHECK_THAT(load_error(dir.path()), Contains("missing tensor \"model.embed_tokens.weight\""));
    const long double grown = static_cast<long double>(model_test::status_bytes("VmHWM") - before);
    INFO("peak resident set grew by " << grown / 1048576 << " MiB; the file is " << file_bytes / 1048576 << " MiB");
    // Reading the file costs its size; allocating the model would add 128 MiB more.
    CHECK(grown < file_bytes + 32 * 1048576.0L);

    // A file with a tiny tensor under a config of a 2^30-parameter embedding: refused by the
    // parameter count, before the file's tensors are even compared with the config.
    config.vocab_size = 1 << 20;
    write_model_config(dir.path() / "config.json", config);
    model_test::write_sparse_f16_file(dir.path() / "model.safetensors", 16);
    REQUIRE(model_test::reset_peak_rss());
    const long long before_tiny = model_test::status_bytes("VmRSS");
    CHECK_THAT(load_error(dir.path()), Contains("do not belong together"));
    CHECK(model_test::status_bytes("VmHWM") - before_tiny < 32 * 1048576LL);

    // The same with the parameters in ten million layers: refused before the names and shapes of
    // every layer's tensors are listed (those alone took gigabytes).
    config.vocab_size = 64;
    config.num_hidden_layers = 10'000'000;
    write_model_config(dir.path() / "config.json", config);
    REQUIRE(model_test::reset_peak_rss());
    const long long before_layers = model_test::status_bytes("VmRSS");
    CHECK_THAT(load_error(dir.path()), Contains("do not belong together"));
    CHECK(model_test::status_bytes("VmHWM") - before_layers < 32 * 1048576LL);
}

TEST_CASE("the tensors listed from a config are those of parameters()", "[model][files][parameters]") {
    // DecoderModel::tensor_table (what load() checks before allocating, no storage) and
    // parameters() (what load_weights() fills) describe the same file: same names, shapes, order.
    for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                               AttentionKind::shared_diff, AttentionKind::diff_v2}) {
        for (bool tied : {false, true}) {
            ModelConfig config = test::small_config(kind);  // GQA where the kind allows it
            config.tie_word_embeddings = tied;
            INFO(to_string(kind) << (tied ? " tied" : ""));
            std::vector<std::pair<std::string, std::vector<Index>>> listed, bound;
            for (const Parameter<float>& p : DecoderModel<float>::tensor_table(config)) listed.emplace_back(p.name, p.shape);
            DecoderModel<float> model(config);
            for (const Parameter<float>& p : model.parameters()) bound.emplace_back(p.name, p.shape);
            CHECK(listed == bound);
            Index total = 0;
            for (const auto& entry : listed) {
                Index size = 1;
                for (Index dim : entry.second) size *= dim;
                total += size;
            }
            CHECK(total == config.parameter_count());
        }
    }
}
