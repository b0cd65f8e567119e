// What a released-checkpoint reader must refuse (docs/checkpoints.md, "Refused"): every directory
// of tests/data/checkpoints/refused (its README names the fault and the exception), each refused
// with the exception type and a message naming the file and the offending key or tensor; and the
// shard rules on directories made here (symbolic links, the Hub cache layout, a truncated shard,
// a malformed index), and the family detection and config rules on config.json objects.
#include "../io/safetensors_test_support.hpp"
#include "../model/model_files.hpp"

#include "diffattn/io/safetensors_checkpoint.hpp"
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/generation_config.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace diffattn;
namespace fs = std::filesystem;

namespace {

enum class Refusal { config, file, none };

struct Expected {
    Refusal kind;
    std::vector<const char*> fragments;  // besides the directory's path, which every message names
};

/// tests/data/checkpoints/refused/README.md, row by row: the exception and what the message names.
const std::map<std::string, Expected>& refusals() {
    static const std::map<std::string, Expected> table = {
        {"unknown_model_type",
         {Refusal::config, {"unknown checkpoint", "model_type \"llama\"", "[\"LlamaForCausalLM\"]", "diffllama", "MotifForCausalLM"}}},
        {"diffllama_other_architecture", {Refusal::config, {"architectures", "DiffLlamaForSequenceClassification"}}},
        {"rope_type_yarn", {Refusal::config, {"\"rope_scaling.rope_type\"", "\"yarn\""}}},
        {"rope_type_linear_legacy_key", {Refusal::config, {"\"rope_scaling.type\"", "\"linear\""}}},
        {"llama3_without_factor", {Refusal::config, {"llama3", "\"rope_scaling.factor\"", "absent"}}},
        {"llama3_omax_conflict",
         {Refusal::config, {"\"original_max_position_embeddings\" (16)", "\"rope_scaling.original_max_position_embeddings\" (8)", "disagree"}}},
        {"rope_theta_conflict", {Refusal::config, {"\"rope_theta\" (10000", "\"rope_parameters.rope_theta\" (500", "disagree"}}},
        {"partial_rotary_factor", {Refusal::config, {"\"partial_rotary_factor\"", "0.5"}}},
        {"diffllama_attention_bias", {Refusal::config, {"diffllama", "\"attention_bias\" is true"}}},
        {"diffllama_hidden_act_gelu", {Refusal::config, {"\"hidden_act\" is \"gelu\"", "\"silu\""}}},
        {"diffllama_odd_kv_heads", {Refusal::config, {"num_key_value_heads (1)", "even"}}},
        {"diffllama_odd_heads", {Refusal::config, {"num_attention_heads (3)", "even"}}},
        {"diffllama_kv_not_dividing", {Refusal::config, {"num_key_value_heads (4) must divide num_attention_heads (6)"}}},
        {"motif_use_bias", {Refusal::config, {"motif", "\"use_bias\" is true"}}},
        {"motif_qkv_bias", {Refusal::config, {"motif", "\"qkv_bias\" is true"}}},
        {"motif_hidden_act_silu", {Refusal::config, {"\"hidden_act\" is \"silu\"", "\"poly_norm\""}}},
        {"motif_without_hidden_act", {Refusal::config, {"\"hidden_act\" is absent", "\"poly_norm\""}}},
        {"motif2_without_head_dim", {Refusal::config, {"motif checkpoint", "\"head_dim\" is required with num_noise_heads"}}},
        {"motif2_zero_noise_heads", {Refusal::config, {"\"num_noise_heads\" must be an integer >= 1, got 0"}}},
        {"motif2_noise_heads_not_dividing",
         {Refusal::config, {"num_noise_heads (3) must be less than and divide num_attention_heads (4)"}}},
        {"motif2_only_noise_heads",
         {Refusal::config, {"num_noise_heads (3) must be less than and divide num_attention_heads (3)"}}},
        {"motif2_odd_kv_heads", {Refusal::config, {"num_key_value_heads (1) must be even"}}},
        {"motif2_kv_pairs_not_dividing_groups",
         {Refusal::config, {"num_noise_heads (2) must be a multiple of num_key_value_heads / 2 (3)"}}},
        {"motif2_k_ratio_2", {Refusal::config, {"motif checkpoint", "\"k_ratio\" is 2", "only 1 is supported"}}},
        {"motif_head_dim_mismatch", {Refusal::config, {"\"head_dim\" is 8", "hidden_size / num_attention_heads = 4"}}},
        {"motif_without_attn_rms_norm_eps", {Refusal::config, {"\"attn_rms_norm_eps\" is required"}}},
        {"motif_without_rms_norm_eps", {Refusal::config, {"\"rms_norm_eps\" is required"}}},
        {"missing_tensor", {Refusal::file, {"model.safetensors", "missing tensor \"model.layers.0.self_attn.lambda_q1\""}}},
        {"extra_tensor_subln_in_diffllama",
         {Refusal::file, {"model.safetensors", "1 unexpected tensor: \"model.layers.0.self_attn.subln.weight\""}}},
        {"misshapen_tensor",
         {Refusal::file, {"model.safetensors", "\"model.layers.0.self_attn.lambda_q1\" has shape [5] but shape [4] is expected"}}},
        {"motif_missing_act_fn_bias", {Refusal::file, {"model.safetensors", "missing tensor \"model.layers.0.mlp.act_fn.bias\""}}},
        {"motif2_missing_subln", {Refusal::file, {"model.safetensors", "missing tensor \"model.layers.0.self_attn.subln.weight\""}}},
        {"motif2_o_proj_misshapen",
         {Refusal::file, {"model.safetensors", "\"model.layers.0.self_attn.o_proj.weight\" has shape [8, 12] but shape [8, 16] is expected"}}},
        {"tied_with_lm_head", {Refusal::file, {"model.safetensors", "1 unexpected tensor: \"lm_head.weight\""}}},
        {"single_file_and_index", {Refusal::file, {"model.safetensors.index.json", "ambiguous", "model.safetensors\" is also present"}}},
        {"index_shard_path_escapes",
         {Refusal::file, {"model.safetensors.index.json", "\"../model-00002-of-00002.safetensors\"", "not a file name inside the directory"}}},
        {"index_shard_file_missing",
         {Refusal::file, {"model.safetensors.index.json", "shard \"model-00002-of-00002.safetensors\"", "does not exist"}}},
        {"index_tensor_not_listed",
         {Refusal::file, {"\"model.layers.0.self_attn.lambda_q1\" of shard \"model-00002-of-00002.safetensors\"", "not listed in weight_map"}}},
        {"index_tensor_listed_for_other_shard",
         {Refusal::file, {"weight_map lists tensor \"model.layers.0.self_attn.lambda_q1\" for shard \"model-00001-of-00002.safetensors\"",
                          "it is in shard \"model-00002-of-00002.safetensors\""}}},
        {"index_tensor_in_two_shards",
         {Refusal::file, {"\"model.embed_tokens.weight\" is in two shards", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}}},
        {"index_lists_absent_tensor",
         {Refusal::file, {"weight_map lists tensor \"model.layers.0.self_attn.lambda_q1\"", "no shard does"}}},
        {"control_valid", {Refusal::none, {}}},
    };
    return table;
}

void check_fragments(const std::string& message, const std::vector<const char*>& fragments) {
    INFO("message: " << message);
    for (const char* fragment : fragments) {
        INFO("expected fragment: " << fragment);
        CHECK(message.find(fragment) != std::string::npos);
    }
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

fs::path golden_dir(const char* name) { return fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / name; }

/// A copy of golden checkpoint `name` in `dir`.
void copy_checkpoint(const char* name, const fs::path& dir) {
    for (const auto& entry : fs::directory_iterator(golden_dir(name))) fs::copy(entry.path(), dir / entry.path().filename());
}

nlohmann::json read_json(const fs::path& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("released checkpoints: every refused directory is refused, naming the fault", "[checkpoints][refused]") {
    const std::vector<fs::path> dirs = model_test::refused_checkpoint_dirs();
    CHECK(dirs.size() == refusals().size());  // 41 faults and control_valid
    for (const fs::path& dir : dirs) {
        const std::string name = dir.filename().string();
        INFO("refused/" << name);
        const auto expected = refusals().find(name);
        REQUIRE(expected != refusals().end());  // a new directory needs its row above
        const auto load = [&] { (void)DecoderModel<float>::load(dir); };
        switch (expected->second.kind) {
            case Refusal::none: CHECK_NOTHROW(load()); break;
            case Refusal::config: {
                const std::string message = message_of<ConfigError>(load);
                check_fragments(message, expected->second.fragments);
                check_fragments(message, {"config.json", name.c_str()});
                break;
            }
            case Refusal::file: {
                const std::string message = message_of<FileError>(load);
                check_fragments(message, expected->second.fragments);
                check_fragments(message, {name.c_str()});
                break;
            }
        }
    }
}

TEST_CASE("released checkpoints: shard files must stay inside the directory", "[checkpoints][refused][files]") {
    model_test::TempDir tmp;
    const fs::path outside = tmp.path() / "outside";
    fs::create_directories(outside);

    SECTION("a shard that is a symbolic link out of the directory is refused") {
        const fs::path dir = tmp.path() / "ckpt";
        fs::create_directories(dir);
        copy_checkpoint("motif_gqa_bf16_sharded", dir);
        fs::rename(dir / "model-00002-of-00002.safetensors", outside / "model-00002-of-00002.safetensors");
        fs::create_symlink(outside / "model-00002-of-00002.safetensors", dir / "model-00002-of-00002.safetensors");
        const std::string message = message_of<FileError>([&] { (void)DecoderModel<float>::load(dir); });
        check_fragments(message, {"model.safetensors.index.json", "shard \"model-00002-of-00002.safetensors\"",
                                  "symbolic link", "outside the directory"});
    }
    SECTION("a symbolic link inside the directory is followed") {
        const fs::path dir = tmp.path() / "ckpt";
        fs::create_directories(dir);
        copy_checkpoint("motif_gqa_bf16_sharded", dir);
        fs::rename(dir / "model-00001-of-00002.safetensors", dir / "store.safetensors");
        fs::create_symlink("store.safetensors", dir / "model-00001-of-00002.safetensors");
        CHECK_NOTHROW(DecoderModel<float>::load(dir));
    }
    SECTION("the Hub cache layout (snapshots/<revision>/ linking into blobs/) loads") {
        const fs::path repo = tmp.path() / "models--org--tiny";
        const fs::path snapshot = repo / "snapshots" / "0123abcd";
        fs::create_directories(snapshot);
        fs::create_directories(repo / "blobs");
        int blob = 0;
        for (const auto& entry : fs::directory_iterator(golden_dir("diffllama_gqa_bf16_tied_sharded"))) {
            const std::string hash = "blob" + std::to_string(blob++);
            fs::copy(entry.path(), repo / "blobs" / hash);
            fs::create_symlink(fs::path("../../blobs") / hash, snapshot / entry.path().filename());
        }
        const DecoderModel<double> model = DecoderModel<double>::load(snapshot);
        const DecoderModel<double> plain = DecoderModel<double>::load(golden_dir("diffllama_gqa_bf16_tied_sharded"));
        const std::vector<Token> tokens = {1, 2, 3, 4};
        CHECK(model.logits(tokens) == plain.logits(tokens));
    }
}

TEST_CASE("released checkpoints: a truncated or malformed shard or index is refused", "[checkpoints][refused][files]") {
    model_test::TempDir tmp;
    const fs::path dir = tmp.path();
    copy_checkpoint("diffllama_v5_rope_parameters", dir);
    const fs::path index = dir / "model.safetensors.index.json";
    const auto load = [&] { (void)DecoderModel<float>::load(dir); };

    SECTION("a shard cut short") {
        const fs::path shard = dir / "model-00002-of-00002.safetensors";
        fs::resize_file(shard, fs::file_size(shard) - 100);
        check_fragments(message_of<FileError>(load),
                        {"safetensors file", "model-00002-of-00002.safetensors", "run past the end of file"});
    }
    SECTION("an index that is not JSON") {
        write_text(index, "{\"weight_map\": ");
        check_fragments(message_of<FileError>(load), {"model.safetensors.index.json", "not valid JSON"});
    }
    SECTION("an index without a weight_map object") {
        write_text(index, "{\"metadata\": {\"total_size\": 1}}");
        check_fragments(message_of<FileError>(load), {"model.safetensors.index.json", "\"weight_map\" must be a non-empty object"});
        write_text(index, "{\"weight_map\": {}}");
        check_fragments(message_of<FileError>(load), {"\"weight_map\" must be a non-empty object"});
    }
    SECTION("a weight_map entry that is not a file name") {
        nlohmann::json json = read_json(index);
        json["weight_map"]["model.norm.weight"] = 2;
        write_text(index, json.dump());
        check_fragments(message_of<FileError>(load), {"weight_map entry of tensor \"model.norm.weight\" is 2"});
        json["weight_map"]["model.norm.weight"] = (dir / "model-00002-of-00002.safetensors").string();  // absolute
        write_text(index, json.dump());
        check_fragments(message_of<FileError>(load), {"not a file name inside the directory"});
        // A NUL ends the name the system sees: the shard's own name with junk after one.
        json["weight_map"]["model.norm.weight"] = std::string("model-00002-of-00002.safetensors\0junk", 37);
        write_text(index, json.dump());
        check_fragments(message_of<FileError>(load), {"not a file name inside the directory", "control character"});
    }
    SECTION("an index of more weight_map entries than the limit, or a huge metadata") {
        // Refused by a count in the linear pass, before the JSON tree (about 300 bytes an entry).
        std::string text = "{\"metadata\": {}, \"weight_map\": {";
        for (std::size_t i = 0; i <= SafetensorsCheckpoint::max_index_tensors; ++i) {
            text += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + "\": \"model-00001-of-00002.safetensors\"";
        }
        write_text(index, text + "}}");
        check_fragments(message_of<FileError>(load), {"model.safetensors.index.json \"", "\"weight_map\" holds 524289 "
                                                      "entries, over the limit of 524288 for an index"});
        std::string zeros = "0";
        for (int i = 0; i < 4096; ++i) zeros += ",0";
        write_text(index, "{\"weight_map\": {\"a\": \"b\"}, \"metadata\": {\"x\": [" + zeros + "]}}");
        check_fragments(message_of<FileError>(load),
                        {"model.safetensors.index.json \"", "array metadata.x holds more than 4096 elements"});
    }
    SECTION("neither model.safetensors nor an index") {
        fs::remove(index);
        check_fragments(message_of<FileError>(load), {"model.safetensors", "no such file"});
    }
}

TEST_CASE("released checkpoints: family detection follows the ordered rules", "[checkpoints][config]") {
    const nlohmann::json base = read_json(golden_dir("diffllama_mha_f32") / "config.json");
    CHECK(detect_checkpoint_family(base) == CheckpointFamily::diffllama);
    nlohmann::json no_architectures = base;
    no_architectures.erase("architectures");  // architectures is optional for model_type diffllama
    CHECK(detect_checkpoint_family(no_architectures) == CheckpointFamily::diffllama);
    const nlohmann::json motif = read_json(golden_dir("motif_mha_f32") / "config.json");
    CHECK(detect_checkpoint_family(motif) == CheckpointFamily::motif);
    nlohmann::json motif_lower = motif;
    motif_lower["model_type"] = "motif";  // informational: mlx-motif rewrites it
    CHECK(detect_checkpoint_family(motif_lower) == CheckpointFamily::motif);
    nlohmann::json ours = {{"attention", "diff"}};
    CHECK(detect_checkpoint_family(ours) == CheckpointFamily::diffattn);
    // The diffllama rule comes first: model_type diffllama with the key "attention" is DiffLlama.
    nlohmann::json both = base;
    both["attention"] = "diff";
    CHECK(detect_checkpoint_family(both) == CheckpointFamily::diffllama);
    nlohmann::json two_architectures = motif;
    two_architectures["architectures"] = {"MotifForCausalLM", "Other"};
    CHECK_THROWS_WITH(detect_checkpoint_family(two_architectures), Catch::Contains("unknown checkpoint"));
    CHECK_THROWS_AS(detect_checkpoint_family(nlohmann::json::array()), ConfigError);
}

TEST_CASE("released checkpoints: config.json rules and defaults", "[checkpoints][config]") {
    const nlohmann::json base = read_json(golden_dir("diffllama_mha_f32") / "config.json");
    const auto config_of = [](const nlohmann::json& json) { return checkpoint_config_from_json(json); };
    const auto error_of = [&](const nlohmann::json& json) {
        return message_of<ConfigError>([&] { (void)config_of(json); });
    };

    // diffllama_mha_f32 leaves out head_dim, num_key_value_heads, rms_norm_eps and hidden_act.
    const ModelConfig c = config_of(base);
    CHECK(c.head_dim == 8);                      // hidden_size / num_attention_heads
    CHECK(c.num_attention_heads == 2);           // 4 query heads = 2 differential pairs
    CHECK(c.kv_heads() == 2);                    // num_key_value_heads = num_attention_heads
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.conventions.pair_norm_eps == 1e-5);  // the weightless per-pair norm uses rms_norm_eps
    CHECK(c.conventions.head_pairing == HeadPairing::halves);
    CHECK(c.conventions.rotary_style == RotaryStyle::rotate_half);
    CHECK(c.conventions.pair_norm == PairNorm::plain);
    CHECK(c.conventions.lambda_depth_offset == 0);
    CHECK(c.mlp_activation == MlpActivation::silu);

    nlohmann::json j = base;
    j["head_dim"] = nullptr;  // null takes the default too
    CHECK(config_of(j).head_dim == 8);
    j["head_dim"] = 7;
    check_fragments(error_of(j), {"head_dim (7)", "even"});
    j = base;
    j["rope_scaling"] = "llama3";
    check_fragments(error_of(j), {"\"rope_scaling\" must be an object"});
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1}};
    check_fragments(error_of(j), {"high_freq_factor", "must exceed low_freq_factor"});
    j["rope_scaling"]["high_freq_factor"] = 8;  // original_max_position_embeddings: max_position_embeddings
    CHECK(config_of(j).conventions.rope_scaling.original_max_position_embeddings == base["max_position_embeddings"]);
    j.erase("max_position_embeddings");
    check_fragments(error_of(j), {"llama3", "max_position_embeddings"});
    j = base;
    j["rope_scaling"] = nlohmann::json::object();  // empty: rope_parameters is read instead
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
    CHECK(config_of(j).rope_theta == 10000.0);

    // Our config.json cannot express a family's conventions: writing one would make another model.
    CHECK_THROWS_WITH(model_config_to_json(c), Catch::Contains("model_config_to_json") &&
                                                   Catch::Contains("diffllama") &&
                                                   Catch::Contains("cannot express"));

    // Unknown keys are warnings, the documented informational ones are not.
    std::vector<std::string> warnings;
    j = base;
    j["brand_new_key"] = 1;
    (void)checkpoint_config_from_json(j, &warnings, "config.json");
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("\"brand_new_key\""));
}

TEST_CASE("released checkpoints: Motif-2 config.json rules (grouped differential attention)", "[checkpoints][config]") {
    const nlohmann::json base = read_json(golden_dir("motif2_gda_r4_f32") / "config.json");
    const auto config_of = [](const nlohmann::json& json) { return checkpoint_config_from_json(json); };
    const auto error_of = [&](const nlohmann::json& json) {
        return message_of<ConfigError>([&] { (void)config_of(json); });
    };
    // 10 query heads in 2 groups of 4 signal heads and a noise head; 4 kv heads = 2 pairs.
    const ModelConfig c = config_of(base);
    CHECK(c.attention == AttentionKind::gda);
    CHECK(c.num_attention_heads == 8);
    CHECK(c.gda_group_ratio == 4);
    CHECK(c.kv_heads() == 2);
    CHECK(c.head_dim == 8);
    CHECK(c.conventions.family == CheckpointFamily::motif);
    CHECK(c.conventions.head_pairing == HeadPairing::stripe);
    CHECK(c.conventions.pair_norm == PairNorm::affine);
    CHECK(c.conventions.lambda_depth_offset == -1);
    CHECK(c.mlp_activation == MlpActivation::poly_norm);
    const AttentionConfig a = c.attention_config();
    CHECK(a.q_width() == 10 * 8);
    CHECK(a.k_width() == 4 * 8);
    CHECK(a.v_width() == 4 * 8);
    CHECK(a.out_width() == 2 * 8 * 8);  // o_proj's input: 2 hd per signal head
    CHECK(a.query_map(5, 0) == 6);      // signal head 5 = the second of group 1 (heads 5 .. 9)
    CHECK(a.query_map(5, 1) == 9);      // group 1's noise head closes it
    CHECK(a.key_map(5, 0) == 2);
    CHECK(a.key_map(5, 1) == 3);

    nlohmann::json j = base;
    j["k_ratio"] = nullptr;  // null is absent: 1
    CHECK(config_of(j).gda_group_ratio == 4);
    j["k_ratio"] = 1.0;  // an integer, as mlx-motif's ModelArgs requires
    check_fragments(error_of(j), {"\"k_ratio\" is 1.0", "only 1 is supported"});
    j = base;
    j["num_noise_heads"] = nullptr;  // null: vanilla differential attention, pairs of heads and kv heads
    check_fragments(error_of(j), {"num_key_value_heads (4) must divide num_attention_heads (10)"});
    j = base;
    j["head_dim"] = 7;
    check_fragments(error_of(j), {"head_dim (7) must be even"});
    j = base;
    j["num_key_value_heads"] = 8;  // 4 pairs for 2 groups
    check_fragments(error_of(j), {"num_noise_heads (2) must be a multiple of num_key_value_heads / 2 (4)"});
    j = base;
    j["num_key_value_heads"] = 2;  // one pair serving both groups: fine
    CHECK(config_of(j).kv_heads() == 1);
    j = base;
    j["hidden_act"] = "silu";
    check_fragments(error_of(j), {"\"hidden_act\" is \"silu\"", "\"poly_norm\""});
    nlohmann::json vanilla = read_json(golden_dir("motif_mha_f32") / "config.json");
    vanilla["k_ratio"] = 2;
    check_fragments(error_of(vanilla), {"\"k_ratio\" is 2"});
    CHECK_THROWS_WITH(model_config_to_json(c), Catch::Contains("cannot express"));
    std::vector<std::string> warnings;
    (void)checkpoint_config_from_json(base, &warnings, "config.json");
    CHECK(warnings.empty());
}

TEST_CASE("released checkpoints: end-of-sequence ids", "[checkpoints][config][generate]") {
    model_test::TempDir tmp;
    const fs::path dir = tmp.path();
    CHECK(read_eos_token_ids(dir, 16).empty());  // neither file: no stop
    write_text(dir / "config.json", R"({"eos_token_id": 7})");
    CHECK(read_eos_token_ids(dir, 16) == std::vector<Token>{7});
    write_text(dir / "generation_config.json", R"({"bos_token_id": 1})");  // no eos key: config.json's
    CHECK(read_eos_token_ids(dir, 16) == std::vector<Token>{7});
    write_text(dir / "generation_config.json", R"({"eos_token_id": [9, 3, 9]})");
    CHECK(read_eos_token_ids(dir, 16) == std::vector<Token>{3, 9});
    write_text(dir / "generation_config.json", R"({"eos_token_id": null})");  // present: no fallback
    CHECK(read_eos_token_ids(dir, 16).empty());
    write_text(dir / "generation_config.json", R"({"eos_token_id": "2"})");
    CHECK_THROWS_WITH(read_eos_token_ids(dir, 16),
                      Catch::Contains("generation_config.json") && Catch::Contains("\"eos_token_id\"") &&
                          Catch::Contains("\"2\""));
}
