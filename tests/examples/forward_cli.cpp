// The command line of diffattn-forward (examples/diffattn_forward.cpp), run as a program: every
// error is a message and exit status 2 (never "unexpected error"), integer flags are parsed
// strictly, a flag may be given once, a generation too large for the machine is refused before
// anything is printed, and the top-5 list ranks NaN logits last.
//
// Not named test_*.cpp: examples/CMakeLists.txt builds it (it needs the program's path), when
// both the examples and the tests are built.
#include "../model/golden_files.hpp"
#include "../io/safetensors_test_support.hpp"
#include "../model/model_files.hpp"

#include "diffattn/core/cpu_features.hpp"
#include "diffattn/io/safetensors.hpp"

#include "run_program.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace diffattn;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using cli_test::check_refused;
using cli_test::Run;

/// Runs diffattn-forward with `args`.
Run run_forward(const std::vector<std::string>& args) { return cli_test::run_program(DIFFATTN_FORWARD_EXE, args); }

/// The ids of the "top-k next tokens" lines of the program's output.
std::vector<Index> printed_top_ids(const std::string& out) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line) && line.find("next tokens") == std::string::npos) {
    }
    std::vector<Index> ids;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        Index id = 0;
        std::string logit;
        if (!(words >> id >> logit) || logit != "logit") break;
        ids.push_back(id);
    }
    return ids;
}

/// A model directory of a seeded tiny diff model of `vocab` tokens whose lm_head rows v with
/// nan_row(v) are NaN: those logit columns are NaN, the others finite.
template <typename NanRow>
void write_nan_model(const fs::path& dir, Index vocab, NanRow nan_row) {
    const ModelConfig config = test::tiny_config(AttentionKind::diff, vocab);
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 3);
    for (Index v = 0; v < vocab; ++v) {
        if (nan_row(v)) model.lm_head.dense().row(v).setConstant(std::numeric_limits<float>::quiet_NaN());
    }
    model_test::write_model_dir(dir, config, model_test::tensors_of(model));
}

/// The expected top-5 of the last logits row of `tokens`, by a plain sort (NaN last).
std::vector<Index> expected_top5(const fs::path& dir, const std::vector<Token>& tokens) {
    const DecoderModel<float> model = DecoderModel<float>::load(dir);
    const RowMatrix<float> logits = model.logits(tokens);
    std::vector<Index> top = model_test::ranking_by_sort(logits.row(logits.rows() - 1).transpose());
    top.resize(std::min<std::size_t>(5, top.size()));
    return top;
}

}  // namespace

TEST_CASE("diffattn-forward: an unresolvable --model path exits 2 with a FileError", "[examples][cli]") {
    model_test::TempDir dir;
    const fs::path loop = dir.path() / "loop";
    fs::create_directory_symlink(loop, loop);
    check_refused(run_forward({"--model", loop.string()}), {"model directory", "Too many levels of symbolic links"});
    check_refused(run_forward({"--model", (dir.path() / std::string(5000, 'a')).string()}),
                  {"model directory", "File name too long"});
    if (::geteuid() != 0) {
        fs::create_directories(dir.path() / "locked" / "model");
        fs::permissions(dir.path() / "locked", fs::perms::none);
        const Run run = run_forward({"--model", (dir.path() / "locked" / "model").string()});
        fs::permissions(dir.path() / "locked", fs::perms::owner_all);
        check_refused(run, {"model directory", "Permission denied"});
    }
}

TEST_CASE("diffattn-forward: integer flags are parsed strictly, flags are given once", "[examples][cli]") {
    check_refused(run_forward({"--generate", " 5"}), {"--generate needs an integer in [1, 1000000], got \" 5\""});
    check_refused(run_forward({"--generate", "5 "}), {"--generate needs an integer in [1, 1000000], got \"5 \""});
    check_refused(run_forward({"--generate", "+5"}), {"--generate needs an integer"});
    check_refused(run_forward({"--generate", "0x5"}), {"--generate needs an integer"});
    check_refused(run_forward({"--threads", " 2"}), {"--threads needs an integer in [1, 1024], got \" 2\""});
    check_refused(run_forward({"--threads", "99999999999999999999"}), {"--threads needs an integer in [1, 1024]"});
    check_refused(run_forward({"--tokens", "1 +2"}), {"--tokens", "\"+2\""});
    check_refused(run_forward({"--threads", "1", "--threads", "2"}), {"--threads", "more than once"});
    check_refused(run_forward({"--generate", "2", "--no-cache", "--no-cache"}), {"--no-cache", "more than once"});
    check_refused(run_forward({"--precision", "float", "--precision", "double"}), {"--precision", "more than once"});

    const Run good = run_forward({"--generate", "5", "--tokens", "1 2 3"});
    INFO(good.err);
    CHECK(good.status == 0);
    CHECK_THAT(good.out, Contains("generated:"));
}

TEST_CASE("diffattn-forward: a generation too large for the machine is refused before any output",
          "[examples][cli]") {
    // 1e6 tokens without a cache over a 131072-token vocabulary: 1e6 x 131072 floats of logits (524 GB).
    model_test::TempDir dir;
    const ModelConfig config = test::tiny_config(AttentionKind::diff, 1 << 17);
    DecoderModel<float> model(config);
    model_test::write_model_dir(dir.path(), config, model_test::tensors_of(model));
    const Run run = run_forward({"--model", dir.path().string(), "--generate", "1000000", "--no-cache"});
    check_refused(run, {"generate", "1000000", "bytes"});
    CHECK(run.out.empty());
}

TEST_CASE("diffattn-forward: the top-5 list ranks NaN logits last", "[examples][cli]") {
    const std::vector<Token> tokens = {1, 2, 3, 4};
    SECTION("every third logit NaN") {
        model_test::TempDir dir;
        write_nan_model(dir.path(), 256, [](Index v) { return v % 3 == 0; });
        const Run run = run_forward({"--model", dir.path().string(), "--tokens", "1 2 3 4"});
        INFO(run.out << run.err);
        REQUIRE(run.status == 0);
        CHECK(printed_top_ids(run.out) == expected_top5(dir.path(), tokens));
    }
    SECTION("only two finite logits: the NaN ones follow them, by id") {
        model_test::TempDir dir;
        write_nan_model(dir.path(), 8, [](Index v) { return v != 3 && v != 6; });
        const Run run = run_forward({"--model", dir.path().string(), "--tokens", "1 2 3 4"});
        INFO(run.out << run.err);
        REQUIRE(run.status == 0);
        const std::vector<Index> expected = expected_top5(dir.path(), tokens);
        REQUIRE(expected.size() == 5);
        CHECK((expected[2] == 0 && expected[3] == 1 && expected[4] == 2));
        CHECK(printed_top_ids(run.out) == expected);
    }
}

TEST_CASE("diffattn-forward: --generate with the cache on an encoder exits 2 before any output",
          "[examples][cli]") {
    model_test::TempDir dir;
    ModelConfig config = test::tiny_config(AttentionKind::diff, 32);
    config.causal = false;
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 2);
    model_test::write_model_dir(dir.path(), config, model_test::tensors_of(model));
    const Run run = run_forward({"--model", dir.path().string(), "--generate", "2", "--tokens", "1 2"});
    check_refused(run, {"--generate", "bidirectional encoder", "add --no-cache"});
    CHECK(run.out.empty());
    CHECK(run_forward({"--model", dir.path().string(), "--generate", "2", "--tokens", "1 2", "--no-cache"}).status == 0);
}

TEST_CASE("diffattn-forward: --logits replaces only its own earlier output", "[examples][cli]") {
    // Checked before the model is read: never a file of the model's folder, never a file this
    // program did not write, never something that is not a regular file.
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model", other = dir.path() / "notes.txt", out = dir.path() / "out.safetensors";
    fs::create_directories(model);
    write_nan_model(model, 16, [](Index) { return false; });
    const std::string model_bytes = cli_test::read_all(model / "model.safetensors");
    std::ofstream(other) << "not ours";
    const std::string m = model.string();

    for (const char* name : {"model.safetensors", "config.json", "new.safetensors"}) {
        const Run run = run_forward({"--model", m, "--tokens", "1 2", "--logits", (model / name).string()});
        check_refused(run, {"--logits", name, "is in the model's folder"});
        CHECK(run.out.empty());
    }
    CHECK(cli_test::read_all(model / "model.safetensors") == model_bytes);
    CHECK_FALSE(fs::exists(model / "new.safetensors"));
    check_refused(run_forward({"--model", m, "--tokens", "1 2", "--logits", other.string()}),
                  {"--logits", "notes.txt", "exists and is not an earlier output of --logits"});
    CHECK(cli_test::read_all(other) == "not ours");
    check_refused(run_forward({"--logits", dir.path().string()}), {"--logits", "is a directory"});
    check_refused(run_forward({"--logits", (dir.path() / "missing" / "x.safetensors").string()}),
                  {"--logits", "a folder that does not exist"});

    // Its own earlier output is replaced: a safetensors file whose one tensor is "logits".
    REQUIRE(run_forward({"--model", m, "--tokens", "1 2", "--logits", out.string()}).status == 0);
    REQUIRE(run_forward({"--model", m, "--tokens", "1 2 3", "--logits", out.string()}).status == 0);
    CHECK(SafetensorsFile(out).info("logits").shape == std::vector<Index>{3, 16});
    // A safetensors file of other tensors is not one.
    check_refused(run_forward({"--logits", (model / "model.safetensors").string(), "--tokens", "1"}),
                  {"exists and is not an earlier output of --logits"});
    // Nor one of the same shape that another writer made: only the mark of --logits counts.
    const fs::path theirs = dir.path() / "theirs.safetensors";
    const RowMatrix<float> zeros = RowMatrix<float>::Zero(2, 16);
    write_safetensors(theirs, {{"logits", TensorView(zeros)}});
    const std::string their_bytes = cli_test::read_all(theirs);
    check_refused(run_forward({"--model", m, "--tokens", "1 2", "--logits", theirs.string()}),
                  {"--logits", "theirs.safetensors", "exists and is not an earlier output of --logits"});
    CHECK(cli_test::read_all(theirs) == their_bytes);
    CHECK(SafetensorsFile(out).metadata().at("written_by") == "diffattn-forward --logits");
}

TEST_CASE("diffattn-forward: --logits under the model's folder is refused however it is spelt", "[examples][cli]") {
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model";
    fs::create_directories(model / "sub");
    fs::create_directories(dir.path() / "other");
    fs::create_directory_symlink(model, dir.path() / "link");
    write_nan_model(model, 16, [](Index) { return false; });
    for (const fs::path& target : {model / "sub" / "x.safetensors", dir.path() / "other" / ".." / "model" / "x.safetensors",
                                   dir.path() / "link" / "sub" / "x.safetensors"}) {
        const Run run = run_forward({"--model", model.string(), "--tokens", "1 2", "--logits", target.string()});
        check_refused(run, {"--logits", "x.safetensors", "is in the model's folder"});
        CHECK(run.out.empty());
    }
    CHECK(io_test::entries_of(model / "sub").empty());
    CHECK(io_test::entries_of(model) == std::set<std::string>{"config.json", "model.safetensors", "sub"});
}

TEST_CASE("diffattn-forward: --logits past the file-size limit exits 2 and leaves no file", "[examples][cli]") {
    // (ulimit -f 4; diffattn-forward ... --logits out.safetensors): SIGXFSZ killed the program with
    // no message (exit 153) and left its temporary file. 16 x 256 logits are 16 KiB.
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model", out = dir.path() / "out" / "out.safetensors";
    fs::create_directories(model);
    fs::create_directories(out.parent_path());
    write_nan_model(model, 256, [](Index) { return false; });
    Run run;
    {
        io_test::FileSizeLimit limit(4096, /*ignore_signal=*/false);  // the program's default SIGXFSZ action
        run = run_forward({"--model", model.string(), "--logits", out.string()});
    }
    check_refused(run, {"write_safetensors", "out.safetensors\" was not written", "File too large"});
    CHECK(io_test::entries_of(out.parent_path()).empty());
}

TEST_CASE("diffattn-forward: a bad generation_config.json stops the run before --logits", "[examples][cli]") {
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model", out = dir.path() / "out.safetensors";
    fs::create_directories(model);
    write_nan_model(model, 16, [](Index) { return false; });
    std::ofstream(model / "generation_config.json") << "{\"eos_token_id\": -1}";
    const Run run =
        run_forward({"--model", model.string(), "--tokens", "1 2", "--generate", "2", "--logits", out.string()});
    check_refused(run, {"generation_config.json", "eos_token_id"});
    CHECK(run.out.empty());
    CHECK_FALSE(fs::exists(out));
}

namespace {

const fs::path kTextCheckpoint = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "diffllama_text";

/// The rest of the first line of `out` that starts with `prefix`, or nothing.
std::optional<std::string> line_after(const std::string& out, const std::string& prefix) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, prefix.size(), prefix) == 0) return line.substr(prefix.size());
    }
    return std::nullopt;
}

/// The ids of the line "<prefix> <id> <id> ...".
std::vector<Token> printed_ids(const std::string& out, const std::string& prefix) {
    std::vector<Token> ids;
    const std::optional<std::string> line = line_after(out, prefix);
    if (!line) return ids;
    std::istringstream words(*line);
    Token id = 0;
    while (words >> id) ids.push_back(id);
    return ids;
}

}  // namespace

TEST_CASE("diffattn-forward: --tokenize gives the JavaScript reference's ids", "[examples][cli][text]") {
    // Every corpus text of tests/data/text/tokenizer_goldens.json (ids by @huggingface/tokenizers,
    // with the post-processor's <|begin_of_text|>) through the checkpoint's own tokenizer.json.
    std::ifstream in(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tokenizer_goldens.json");
    const nlohmann::json goldens = nlohmann::json::parse(in);
    int checked = 0;
    for (const nlohmann::json& c : goldens.at("cases")) {
        const std::string text = c.at("text");
        if (text.empty() || !c.at("expected").contains("tiny_llama3")) continue;
        INFO("case " << c.at("name").get<std::string>());
        const Run run = run_forward({"--model", kTextCheckpoint.string(), "--prompt", text, "--tokenize"});
        REQUIRE(run.status == 0);
        const auto expected = c.at("expected").at("tiny_llama3").at("with_special").get<std::vector<Token>>();
        CHECK(printed_ids(run.out, "tokens:") == expected);
        CHECK(std::count(run.out.begin(), run.out.end(), '\n') == 1);  // the one line, nothing else
        ++checked;
    }
    CHECK(checked >= 40);
}

TEST_CASE("diffattn-forward: --prompt generates the golden continuation, as ids and as text",
          "[examples][cli][text]") {
    // The random tiny checkpoint and the trained README demo (models/diffllama_tiny_text).
    const std::vector<fs::path> dirs = {kTextCheckpoint, fs::path(DIFFATTN_TEST_DATA_DIR) / ".." / ".." / "models" /
                                                             "diffllama_tiny_text"};
    for (const fs::path& dir : dirs) {
        INFO("model " << dir.string());
        const SafetensorsFile golden(dir / "golden.safetensors");
        const std::string prompt = golden.metadata().at("prompt_text");
        const std::vector<Token> expected = model_test::golden_tokens(golden, "generated");
        const std::vector<Token> prompt_ids = model_test::golden_tokens(golden, "tokens");

        const Run run = run_forward(
            {"--model", dir.string(), "--prompt", prompt, "--generate", std::to_string(expected.size())});
        INFO("stdout: " << run.out << "\nstderr: " << run.err);
        REQUIRE(run.status == 0);
        CHECK(line_after(run.out, "prompt: ") == prompt);
        CHECK(printed_ids(run.out, "generated:") == expected);
        // The text between "continuation: " and the ids line (it may hold newlines) is the
        // reference's own byte-level decoding of the golden ids (tools/make_checkpoint_goldens.py).
        const std::size_t begin = run.out.find("continuation: ");
        const std::size_t end = run.out.find("\ngenerated:");
        REQUIRE(begin != std::string::npos);
        REQUIRE(end != std::string::npos);
        const std::size_t text_begin = begin + std::string("continuation: ").size();
        CHECK(run.out.substr(text_begin, end - text_begin) == golden.metadata().at("generated_text"));
        // The same ids given as --tokens continue the same way.
        std::string ids;
        for (Token t : prompt_ids) ids += std::to_string(t) + " ";
        const Run by_ids =
            run_forward({"--model", dir.string(), "--tokens", ids, "--generate", std::to_string(expected.size())});
        CHECK(printed_ids(by_ids.out, "generated:") == expected);
        if (dir.filename() == "diffllama_tiny_text") {
            // The README's demo: with 8-bit weights the trained model continues as in f32.
            const Run q8 = run_forward({"--model", dir.string(), "--prompt", prompt, "--generate",
                                        std::to_string(expected.size()), "--weights", "q8_0"});
            INFO("stdout: " << q8.out << "\nstderr: " << q8.err);
            REQUIRE(q8.status == 0);
            CHECK(line_after(q8.out, "weights: ").value_or("").rfind("q8_0, ", 0) == 0);
            CHECK(printed_ids(q8.out, "generated:") == expected);
        }
    }
}

TEST_CASE("diffattn-forward: sampling is repeatable by seed and greedy at top-k 1", "[examples][cli][sampling]") {
    const std::string dir = kTextCheckpoint.string();
    const auto sampled = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"--model", dir, "--tokens", "810 553 326", "--generate", "24"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Run run = run_forward(args);
        INFO("stderr: " << run.err);
        REQUIRE(run.status == 0);
        return printed_ids(run.out, "generated:");
    };
    const std::vector<Token> greedy = sampled({});
    const std::vector<Token> a = sampled({"--temperature", "1.5", "--seed", "7"});
    CHECK(a.size() == 24);
    CHECK(sampled({"--temperature", "1.5", "--seed", "7"}) == a);
    CHECK(sampled({"--temperature", "1.5", "--seed", "8"}) != a);
    CHECK(a != greedy);
    CHECK(sampled({"--temperature", "3", "--top-k", "1", "--seed", "9"}) == greedy);
    CHECK(sampled({"--temperature", "3", "--top-p", "1e-9", "--seed", "9"}) == greedy);
    CHECK(sampled({"--temperature", "0.7", "--top-k", "40", "--top-p", "0.9", "--no-cache", "--seed", "7"}) ==
          sampled({"--temperature", "0.7", "--top-k", "40", "--top-p", "0.9", "--seed", "7"}));
}

TEST_CASE("diffattn-forward: bad text and sampling flags exit 2 with a message", "[examples][cli][text]") {
    const std::string dir = kTextCheckpoint.string();
    check_refused(run_forward({"--prompt", "hi"}), {"--prompt needs --model DIR"});
    check_refused(run_forward({"--model", dir, "--tokenize"}), {"--tokenize needs --prompt"});
    check_refused(run_forward({"--model", dir, "--prompt", "hi", "--tokenize", "--generate", "3"}),
                  {"--tokenize prints only the prompt's ids", "--generate has nothing to do"});
    check_refused(run_forward({"--model", dir, "--prompt", "hi\xff", "--tokenize"}),
                  {"--prompt: Tokenizer::encode: the text is not valid UTF-8: byte 0xff at offset 2"});
    check_refused(run_forward({"--model", dir, "--prompt", "hi", "--tokens", "1 2"}), {"--prompt and --tokens"});
    check_refused(run_forward({"--model", dir, "--tokens", "1", "--generate", "2", "--top-k", "3"}),
                  {"--top-k needs --temperature"});
    check_refused(run_forward({"--model", dir, "--tokens", "1", "--temperature", "0.5"}),
                  {"--temperature needs --generate"});
    for (const char* bad : {"nan", "inf", "-1", "0.5x", "", " 1", "1e999"}) {
        INFO("--temperature \"" << bad << "\"");
        check_refused(run_forward({"--model", dir, "--tokens", "1", "--generate", "2", "--temperature", bad}),
                      {"--temperature needs a number"});
    }
    check_refused(run_forward({"--model", dir, "--tokens", "1", "--generate", "2", "--temperature", "1", "--top-p", "0"}),
                  {"top_p must be in (0, 1]"});
    // A checkpoint without tokenizer.json: the message names the file.
    const fs::path no_tokenizer = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "diffllama_mha_f32";
    check_refused(run_forward({"--model", no_tokenizer.string(), "--prompt", "hi"}), {"tokenizer.json", "no such file"});
    // Ids the model's vocabulary does not have: tokenizer and model do not belong together.
    model_test::TempDir mismatch;
    for (const auto& entry : fs::directory_iterator(no_tokenizer)) fs::copy(entry.path(), mismatch.path());
    fs::copy(kTextCheckpoint / "tokenizer.json", mismatch.path());
    check_refused(run_forward({"--model", mismatch.path().string(), "--prompt", "hi"}),
                  {"outside the model's vocabulary", "do not belong together"});
}

TEST_CASE("diffattn-forward: --kv-cache stores the cache as f32, f16 or bf16", "[examples][cli][kv_cache]") {
    check_refused(run_forward({"--generate", "2", "--kv-cache", "fp16"}),
                  {"--kv-cache must be f32, f16 or bf16, got \"fp16\""});
    check_refused(run_forward({"--generate", "2", "--kv-cache", "F16"}), {"--kv-cache must be f32, f16 or bf16"});
    check_refused(run_forward({"--kv-cache", "f16"}), {"--kv-cache needs --generate K"});
    check_refused(run_forward({"--generate", "2", "--no-cache", "--kv-cache", "bf16"}), {"--kv-cache", "--no-cache"});
    check_refused(run_forward({"--generate", "2", "--kv-cache", "f16", "--kv-cache", "f16"}),
                  {"--kv-cache", "more than once"});
    // The demo model (dint causal_softmax, L 2, H 4, Hkv 2, d 8): per token L (32 + 32) keys and
    // values of E bytes + L H column sums + d rotary entries in the model's scalar.
    struct Expected {
        std::vector<std::string> args;
        const char* line;
    };
    for (const Expected& e : {Expected{{}, "KV cache (f32) of 576 bytes per token"},
                              Expected{{"--kv-cache", "f32"}, "KV cache (f32) of 576 bytes per token"},
                              Expected{{"--kv-cache", "f16"}, "KV cache (f16) of 320 bytes per token"},
                              Expected{{"--kv-cache", "bf16"}, "KV cache (bf16) of 320 bytes per token"},
                              Expected{{"--kv-cache", "f32", "--precision", "double"},
                                       "KV cache (f32) of 1152 bytes per token"},
                              Expected{{"--kv-cache", "f16", "--precision", "double"},
                                       "KV cache (f16) of 384 bytes per token"}}) {
        std::vector<std::string> args = {"--generate", "5", "--tokens", "1 2 3"};
        args.insert(args.end(), e.args.begin(), e.args.end());
        const Run run = run_forward(args);
        INFO("stdout: " << run.out << "\nstderr: " << run.err);
        REQUIRE(run.status == 0);
        CHECK_THAT(run.out, Contains(e.line));
        CHECK(printed_ids(run.out, "generated:").size() == 5);
    }
}

TEST_CASE("diffattn-forward: Motif-2 checkpoints give the golden logits (--logits) and continuation (--generate)",
          "[examples][cli][checkpoints]") {
    // Grouped differential attention (docs/checkpoints.md, "Motif-2"), read as the Hub ships it.
    for (const char* name : {"motif2_gda_r4_f32", "motif2_gda_r2_bf16_tied_sharded"}) {
        INFO("checkpoint " << name);
        const fs::path dir = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / name;
        const model_test::Golden golden = model_test::read_golden(dir);
        const SafetensorsFile golden_file(dir / "golden.safetensors");
        const std::vector<Token> expected = model_test::golden_tokens(golden_file, "generated");
        std::string ids;
        for (Token t : golden.tokens) ids += std::to_string(t) + " ";
        model_test::TempDir tmp;
        const fs::path logits_path = tmp.path() / "logits.safetensors";
        const Run run = run_forward({"--model", dir.string(), "--tokens", ids, "--logits", logits_path.string(),
                                     "--generate", golden_file.metadata().at("max_new_tokens")});
        INFO("stdout: " << run.out << "\nstderr: " << run.err);
        REQUIRE(run.status == 0);
        CHECK(printed_ids(run.out, "generated:") == expected);
        const RowMatrix<double> logits = SafetensorsFile(logits_path).matrix<double>("logits");  // F32, widened
        const double m = model_test::magnitude(golden.logits);
        CHECK(model_test::max_abs_diff(logits, golden.logits) <= model_test::golden_tolerance<float>(m));
    }
}

TEST_CASE("diffattn-forward: --compute bf16 runs the prefill on BF16 products and says which",
          "[examples][cli][bf16]") {
    check_refused(run_forward({"--compute", "fp32"}),
                  {"--compute must be f32, bf16, bf16_widened, bf16_dot or bf16_amx, got \"fp32\""});
    check_refused(run_forward({"--compute", "bf16", "--precision", "double"}), {"--compute bf16 needs --precision float"});
    check_refused(run_forward({"--compute", "bf16_amx", "--precision", "double"}),
                  {"--compute bf16_amx needs --precision float"});
    // A named way runs where the CPU has it and is refused, naming what is missing, where not. The
    // program is built without the tests' emulated tiles: its answer is the CPU's.
    const Run widened = run_forward({"--compute", "bf16_widened"});
    CHECK(widened.status == 0);
    CHECK_THAT(widened.out, Contains("compute: bf16_widened (bf16_widened products;"));
    const Run amx = run_forward({"--compute", "bf16_amx"});
    if (detail::cpu_has_avx512_bf16() && detail::cpu_has_amx_bf16()) {
        CHECK(amx.status == 0);
        CHECK_THAT(amx.out, Contains("compute: bf16_amx (bf16_amx products;"));
    } else {
        check_refused(amx, {"--compute: ForwardState::set_compute: compute bf16_amx needs a CPU with AMX tiles"});
    }
    const Run dot = run_forward({"--compute", "bf16_dot"});
    if (detail::cpu_has_avx512_bf16()) {
        CHECK(dot.status == 0);
        CHECK_THAT(dot.out, Contains("compute: bf16_dot (bf16_dot products;"));
    } else {
        check_refused(dot, {"compute bf16_dot needs a CPU with AVX512-BF16"});
    }
    const Run f32 = run_forward({"--compute", "f32", "--generate", "3"});
    const Run bf16 = run_forward({"--compute", "bf16", "--generate", "3"});
    INFO("stdout: " << bf16.out << "\nstderr: " << bf16.err);
    REQUIRE(f32.status == 0);
    REQUIRE(bf16.status == 0);
    CHECK_THAT(bf16.out, Contains("compute: bf16 (bf16_"));
    CHECK_THAT(f32.out, !Contains("compute:"));
    CHECK(printed_ids(bf16.out, "generated:").size() == 3);
}
