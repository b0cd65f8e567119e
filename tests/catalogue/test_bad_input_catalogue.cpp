// The bad-input catalogue of docs/errors.md: one TEST_CASE per row, named like the row's bold
// words, checking exactly what the table promises (the exception type and the key words of its
// message, or the defined output). The ctest docs_catalogue keeps the two in step: a row without
// its TEST_CASE, or a TEST_CASE without its row, fails.
#include "../error_messages.hpp"
#include "../io/safetensors_test_support.hpp"
#include "../model/model_files.hpp"
#include "../../examples/cli_support.hpp"
#include "../../examples/output_files.hpp"

#include "diffattn/analysis/attention_analysis.hpp"
#include "diffattn/distributed/sequence_slices.hpp"  // no MPI in this header
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/model/checkpoint_config.hpp"
#include "diffattn/model/generate.hpp"
#include "diffattn/model/generation_config.hpp"
#include "diffattn/model/logit_ranking.hpp"
#include "diffattn/model/quantized_checkpoint.hpp"
#include "diffattn/model/sampler.hpp"
#include "diffattn/text/tokenizer.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using namespace diffattn;
namespace fs = std::filesystem;

namespace {

/// The configurations of the catalogue (its error messages quote the vocabulary [0, 32)).
ModelConfig tiny(AttentionKind kind) { return test::tiny_config(kind, 32); }

const AttentionKind kKinds[] = {AttentionKind::softmax, AttentionKind::diff, AttentionKind::dint,
                                AttentionKind::shared_diff, AttentionKind::diff_v2, AttentionKind::gda};

/// config.json text of `config` with `key` replaced by the raw JSON `value` (or removed if empty).
std::string config_json_with(const ModelConfig& config, const std::string& key, const std::string& value) {
    nlohmann::ordered_json j = model_config_to_json(config);
    if (value.empty()) {
        j.erase(key);
    } else {
        j[key] = nlohmann::ordered_json::parse(value);
    }
    return j.dump();
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

/// A model directory of a seeded tiny model of `kind`.
void write_tiny_model(const fs::path& dir, AttentionKind kind) {
    const ModelConfig config = tiny(kind);
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 5);
    model_test::write_model_dir(dir, config, model_test::tensors_of(model));
}

template <typename T>
RowMatrix<T> random_matrix(Index rows, Index cols, unsigned seed) {
    RowMatrix<T> m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(std::sin(0.7 * (i + 1) + seed));
    return m;
}

bool row_finite(const RowMatrix<float>& m, Index row) { return m.row(row).allFinite(); }
bool row_has_nan(const RowMatrix<float>& m, Index row) { return m.row(row).array().isNaN().any(); }

}  // namespace

// ---- Files ------------------------------------------------------------------------------------

TEST_CASE("malformed safetensors file", "[catalogue][files]") {
    const fs::path bad = fs::path(DIFFATTN_TEST_DATA_DIR) / "safetensors" / "bad";
    CHECK_ERROR(FileError, SafetensorsFile(bad / "header_length_past_eof.safetensors"), "safetensors file \"",
                "header_length_past_eof.safetensors", "header length 64 is larger than");
    CHECK_ERROR(FileError, SafetensorsFile(bad / "overlap.safetensors"), "overlap.safetensors", "overlap");

    // Through DecoderModel::load: a model.safetensors cut short names the file and the tensor.
    model_test::TempDir dir;
    write_tiny_model(dir.path(), AttentionKind::diff);
    const fs::path weights = dir.path() / "model.safetensors";
    fs::resize_file(weights, fs::file_size(weights) - 4);
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "model.safetensors", "run past the end of file");
}

TEST_CASE("safetensors header with too many entries", "[catalogue][files]") {
    // Refused after a pass that keeps nothing past the limit, before any entry is built: a header
    // of millions of tiny entries costs its own bytes, not gigabytes (docs/safetensors.md, "Limits").
    const auto load = [](const std::string& header) {
        return SafetensorsFile::from_bytes(io_test::make_file(header, {}), "model.safetensors");
    };
    const std::size_t tensors = SafetensorsLimits::max_tensors;
    const std::size_t metadata = SafetensorsLimits::max_metadata_entries;
    CHECK_ERROR(FileError, load(io_test::many_entries_header(tensors + 1, 0)), "model.safetensors",
                "the header holds 131073 tensor entries, over the limit of 131072");
    CHECK_ERROR(FileError, load(io_test::many_entries_header(1, metadata + 1)), "model.safetensors",
                "__metadata__ holds 16385 entries, over the limit of 16384");
    CHECK(load(io_test::many_entries_header(1, metadata)).metadata().size() == metadata);
}

TEST_CASE("JSON file with too many entries", "[catalogue][files][tokenizer]") {
    // Counted in the linear pass before the JSON tree is built (tens of bytes a node).
    model_test::TempDir dir;
    std::string index = "{\"weight_map\": {";
    for (std::size_t i = 0; i <= SafetensorsCheckpoint::max_index_tensors; ++i) {
        index += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + "\": \"a.safetensors\"";
    }
    write_text(dir.path() / "model.safetensors.index.json", index + "}}");
    CHECK_ERROR(FileError, SafetensorsCheckpoint(dir.path()), "model.safetensors.index.json \"",
                "\"weight_map\" holds 524289 entries, over the limit of 524288 for an index");
    std::string junk = "{\"junk\": [0";
    for (int i = 0; i < 4096; ++i) junk += ",0";
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json_text(junk + "]}", "tokenizer.json \"t.json\""),
                "tokenizer.json \"t.json\": array junk holds more than 4096 elements, the limit for a tokenizer");
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3" / "tokenizer.json"));
    const nlohmann::json split = j["pre_tokenizer"]["pretokenizers"][0];
    j["pre_tokenizer"]["pretokenizers"] = std::vector<nlohmann::json>(70, split);
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\""),
                "pre_tokenizer.pretokenizers[64]", "the pre_tokenizer has more than 64 steps");
}

TEST_CASE("model file that does not match its config", "[catalogue][files]") {
    model_test::TempDir dir;
    const ModelConfig config = tiny(AttentionKind::dint);
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    model_test::TensorSet tensors = model_test::tensors_of(model);

    SECTION("a missing tensor") {
        tensors.shapes.erase("model.layers.1.self_attn.lambda_q1");
        tensors.data.erase("model.layers.1.self_attn.lambda_q1");
        model_test::write_model_dir(dir.path(), config, tensors);
        CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "model.safetensors",
                    "missing tensor \"model.layers.1.self_attn.lambda_q1\"");
    }
    SECTION("a tensor of the wrong shape") {
        tensors.shapes["model.norm.weight"] = {2, 8};
        model_test::write_model_dir(dir.path(), config, tensors);
        CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "model.safetensors",
                    "tensor \"model.norm.weight\" has shape [2, 8] but shape [16] is expected");
    }
    SECTION("an extra tensor") {
        tensors.shapes["model.layers.0.self_attn.q_proj.bias"] = {16};
        tensors.data["model.layers.0.self_attn.q_proj.bias"] = std::vector<float>(16, 0.0f);
        model_test::write_model_dir(dir.path(), config, tensors);
        CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "1 unexpected tensor",
                    "model.layers.0.self_attn.q_proj.bias");
    }
    SECTION("a config.json describing a far larger model than the file holds") {
        // A valid config, but its embedding and lm_head alone would take 2 x 1e9 x 16 floats (128 GB):
        // refused before anything is allocated.
        ModelConfig huge = config;
        huge.vocab_size = 1'000'000'000;
        model_test::write_model_dir(dir.path(), config, tensors);
        write_text(dir.path() / "config.json", model_config_to_json(huge).dump());
        CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "DecoderModel::load", "config.json",
                    "describes a model of 32000", "model.safetensors", "do not belong together");
    }
    SECTION("tensors checked against the header before the model is allocated") {
        // A tied embedding-only config of 2^24 parameters (64 MiB in float) and a file holding half
        // as many F16 zeros under another name (32 MiB): enough for the parameter count, but
        // "missing tensor" must come before the 64 MiB are allocated.
        ModelConfig large = tiny(AttentionKind::softmax);
        large.hidden_size = 512;
        large.num_hidden_layers = 0;
        large.vocab_size = 32768;
        large.tie_word_embeddings = true;
        write_text(dir.path() / "config.json", model_config_to_json(large).dump());
        model_test::write_sparse_f16_file(dir.path() / "model.safetensors", std::uint64_t{1} << 23);
        const bool measured = model_test::reset_peak_rss();
        const long long before = model_test::status_bytes("VmRSS");
        CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "model.safetensors",
                    "missing tensor \"model.embed_tokens.weight\"");
        if (measured) {
            CHECK(model_test::status_bytes("VmHWM") - before < (16 + 32) * 1048576LL);  // the file + 32 MiB
        } else {
            WARN("memory part skipped: the peak resident set size cannot be reset here");
        }
    }
}

TEST_CASE("missing file or directory", "[catalogue][files]") {
    model_test::TempDir dir;
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path() / "absent"), "model directory", "absent",
                "does not exist or is not a directory");
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "config.json", "no such file");
    write_model_config(dir.path() / "config.json", tiny(AttentionKind::diff));
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "safetensors file", "model.safetensors",
                "no such file");
    CHECK_ERROR(FileError, SafetensorsFile(dir.path() / "config.json" / "x.safetensors"), "no such file",
                "Not a directory");
}

TEST_CASE("path that is a directory, a FIFO or unreadable", "[catalogue][files]") {
    model_test::TempDir dir;
    fs::create_directory(dir.path() / "config.json");
    CHECK_ERROR(FileError, read_model_config(dir.path() / "config.json"), "config.json", "is a directory");
    CHECK_ERROR(FileError, SafetensorsFile(dir.path() / "config.json"), "is a directory");
    fs::remove(dir.path() / "config.json");

    const fs::path fifo = dir.path() / "config.json";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // opening a FIFO to read would block: refused before
    CHECK_ERROR(FileError, read_model_config(fifo), "config.json", "not a regular file");
    CHECK_ERROR(FileError, SafetensorsFile(fifo), "not a regular file", "FIFO");

    // chmod 000 does not stop root; a write-only sysctl is unreadable even for root.
    fs::path unreadable;
    if (::geteuid() != 0) {
        unreadable = dir.path() / "locked.json";
        write_text(unreadable, "{}");
        fs::permissions(unreadable, fs::perms::none);
    } else if (fs::exists("/proc/sys/vm/drop_caches") && !std::ifstream("/proc/sys/vm/drop_caches").is_open()) {
        unreadable = "/proc/sys/vm/drop_caches";
    }
    if (unreadable.empty()) {
        WARN("unreadable-file case skipped: running as root without a root-unreadable file");
    } else {
        CHECK_ERROR(FileError, read_model_config(unreadable), "cannot open the file", "Permission denied");
        CHECK_ERROR(FileError, SafetensorsFile(unreadable), "cannot open the file for reading", "Permission denied");
    }
}

TEST_CASE("path the file system cannot resolve", "[catalogue][files]") {
    // A symbolic link loop, a path longer than PATH_MAX, a parent without search permission:
    // FileError naming the path and the reason, never std::filesystem::filesystem_error.
    model_test::TempDir dir;
    const fs::path loop = dir.path() / "loop";
    fs::create_directory_symlink(loop, loop);
    CHECK_ERROR(FileError, DecoderModel<float>::load(loop), "model directory \"", loop.string().c_str(),
                "cannot access it: Too many levels of symbolic links");
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path() / std::string(5000, 'x')), "model directory",
                "cannot access it: File name too long");
    write_model_config(dir.path() / "config.json", tiny(AttentionKind::diff));
    fs::create_symlink(dir.path() / "model.safetensors", dir.path() / "model.safetensors");
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path()), "safetensors file", "model.safetensors",
                "Too many levels of symbolic links");
    if (::geteuid() == 0) {
        WARN("permission-denied parent skipped: running as root");
    } else {
        fs::create_directories(dir.path() / "locked" / "model");
        fs::permissions(dir.path() / "locked", fs::perms::none);
        const std::string message = message_of<FileError>([&] { DecoderModel<float>::load(dir.path() / "locked" / "model"); });
        fs::permissions(dir.path() / "locked", fs::perms::owner_all);
        check_words(message, {"model directory", "cannot access it: Permission denied"});
    }
}

TEST_CASE("write target that is not a regular file", "[catalogue][files][write]") {
    // Refused before anything is opened or created; the target is left as it was. A FIFO without a
    // reader would block an open() for writing forever; /dev/full was once removed by a failed write.
    model_test::TempDir dir;
    const Vector<float> v = Vector<float>::Ones(4);
    if (fs::is_character_file("/dev/full")) {
        CHECK_ERROR(FileError, write_safetensors("/dev/full", {{"v", v}}), "write_safetensors", "\"/dev/full\"",
                    "not a regular file but a character device");
        CHECK(fs::is_character_file("/dev/full"));
    }
    const fs::path fifo = dir.path() / "logits.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_ERROR(FileError, write_safetensors(fifo, {{"v", v}}), "logits.safetensors", "not a regular file", "FIFO");
    CHECK(fs::is_fifo(fifo));
    // config.json is written the same way.
    CHECK_ERROR(FileError, write_model_config(fifo, tiny(AttentionKind::diff)), "write_model_config",
                "logits.safetensors", "not a regular file", "FIFO");
    CHECK(fs::is_fifo(fifo));
    CHECK_ERROR(FileError, write_safetensors(dir.path(), {{"v", v}}), "is a directory");
    // A symbolic link is neither followed nor replaced (docs/safetensors.md says why).
    const fs::path link = dir.path() / "link.safetensors";
    fs::create_symlink("logits.safetensors", link);
    CHECK_ERROR(FileError, write_safetensors(link, {{"v", v}}), "link.safetensors",
                "is a symbolic link (to \"logits.safetensors\")");
    CHECK(fs::is_symlink(link));
}

TEST_CASE("failed write", "[catalogue][files][write]") {
    // The file is written beside the target and renamed over it only when complete: a write error
    // (here EFBIG from a 4 KiB file-size limit; a full disk gives ENOSPC) names the reason and leaves
    // an existing file byte for byte as it was, with no temporary file behind.
    model_test::TempDir dir;
    const fs::path target = dir.path() / "logits.safetensors";
    const Vector<float> small = Vector<float>::Ones(4);
    write_safetensors(target, {{"logits", small}});
    const io_test::Bytes before = io_test::read_bytes(target);
    const Vector<float> big = Vector<float>::Ones(4096);
    {
        io_test::FileSizeLimit limit(4096);
        CHECK_ERROR(FileError, write_safetensors(target, {{"logits", big}}), "write_safetensors",
                    "logits.safetensors\" was not written", "File too large", "the file is left as it was");
    }
    CHECK(io_test::read_bytes(target) == before);
    CHECK(io_test::entries_of(dir.path()) == std::set<std::string>{"logits.safetensors"});
    CHECK_ERROR(FileError, write_safetensors(dir.path() / "absent" / "x.safetensors", {{"logits", small}}),
                "x.safetensors", "No such file or directory");
}

TEST_CASE("a program's output past the file-size limit", "[catalogue][files][write]") {
    // ulimit -f: the example programs' main (cli::run_main) ignores SIGXFSZ, whose default action
    // kills the process with no message and leaves the temporary file behind; the write then fails
    // with EFBIG, a FileError, exit status 2, nothing left.
    model_test::TempDir dir;
    const fs::path target = dir.path() / "out.safetensors";
    const Vector<float> big = Vector<float>::Ones(4096);
    std::ostringstream err;
    int status = -1;
    {
        io_test::FileSizeLimit limit(4096, /*ignore_signal=*/false);
        std::streambuf* const cerr_buffer = std::cerr.rdbuf(err.rdbuf());
        status = cli::run_main("diffattn-forward", [&] {
            write_safetensors(target, {{"logits", big}});
            return 0;
        });
        std::cerr.rdbuf(cerr_buffer);
    }
    CHECK(status == 2);
    check_words(err.str(), {"diffattn-forward: write_safetensors: \"", "out.safetensors\" was not written",
                            "File too large", "(no file was created)"});
    CHECK(io_test::entries_of(dir.path()).empty());
}

namespace {

/// The message of the cli::UsageError (an example program's refusal: exit status 2) thrown by `action`.
template <typename Action>
std::string usage_error_of(Action&& action) {
    try {
        action();
    } catch (const cli::UsageError& e) {
        return e.message;
    }
    FAIL("no UsageError was thrown");
    return {};
}

}  // namespace

TEST_CASE("existing output file without the program's mark", "[catalogue][files][write]") {
    // A file of the right kind and shape is not enough: only one carrying the mark that the
    // program's own writer leaves ("written_by" in __metadata__ or in a JSON object) is replaced.
    model_test::TempDir dir;
    const fs::path logits = dir.path() / "logits.safetensors", maps = dir.path() / "tokens_row0.json";
    const Vector<float> v = Vector<float>::Ones(4);
    write_safetensors(logits, {{"logits", v}});
    const std::string mark = "diffattn-forward --logits";
    check_words(usage_error_of([&] {
                    cli::check_output_file("--logits", logits, {}, cli::is_earlier_safetensors_output, mark);
                }),
                {"--logits: \"", "logits.safetensors\" exists and is not an earlier output of --logits",
                 "it lacks the mark \"written_by\": \"diffattn-forward --logits\""});
    write_safetensors(logits, {{"logits", v}}, {{"written_by", "someone else"}});
    CHECK_FALSE(cli::is_earlier_safetensors_output(logits, mark));
    write_safetensors(logits, {{"logits", v}}, {{"written_by", mark}});
    cli::check_output_file("--logits", logits, {}, cli::is_earlier_safetensors_output, mark);  // replaced
    write_text(maps, R"({"sequence": "tokens", "attention": "diff", "position": 0, "layers": []})");
    check_words(usage_error_of([&] {
                    cli::check_output_file("--maps", maps, {}, cli::is_earlier_json_output, "diffattn-analyze --maps");
                }),
                {"--maps", "tokens_row0.json", "exists and is not an earlier output of --maps"});
    write_text(maps, R"({"layers": [], "written_by": "diffattn-analyze --maps"})");
    CHECK(cli::is_earlier_json_output(maps, "diffattn-analyze --maps"));
    CHECK_FALSE(cli::is_earlier_json_output(maps, "diffattn-analyze --json"));
    write_text(maps, R"({"layers": {"written_by": "diffattn-analyze --maps"}})");  // the top level's only
    CHECK_FALSE(cli::is_earlier_json_output(maps, "diffattn-analyze --maps"));
}

TEST_CASE("output path inside the model's folder", "[catalogue][files][write]") {
    // Any path that resolves in or under the model's folder (a subfolder, "..", a link to it) is
    // refused, existing or not: the model's folder is only read.
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model";
    fs::create_directories(model / "sub");
    fs::create_directories(dir.path() / "other");
    fs::create_directory_symlink(model, dir.path() / "link");
    const std::vector<fs::path> inputs{model};
    for (const fs::path& target : {model / "x.safetensors", model / "sub" / "x.safetensors",
                                   dir.path() / "other" / ".." / "model" / "sub" / "x.safetensors",
                                   dir.path() / "link" / "sub" / "x.safetensors", model / "sub" / "." / "x.safetensors"}) {
        INFO(target);
        check_words(usage_error_of([&] {
                        cli::check_output_file("--logits", target, inputs, cli::is_earlier_safetensors_output, "m");
                    }),
                    {"--logits", "x.safetensors", "is in the model's folder", "which is only read"});
    }
    // A folder to be made there (diffattn-analyze --maps) is refused before it is made.
    check_words(usage_error_of([&] {
                    cli::check_output_file("--maps", model / "maps" / "a.json", inputs, cli::is_earlier_json_output,
                                           "m", model / "maps");
                }),
                {"--maps", "is in the model's folder"});
    CHECK(cli::is_in_or_under(model / "new" / "deeper", model));
    CHECK_FALSE(cli::is_in_or_under(dir.path() / "model2", model));  // a sibling with a longer name
    CHECK_FALSE(cli::is_in_or_under(dir.path() / "other" / "x", model));
    cli::check_output_file("--logits", dir.path() / "other" / "x.safetensors", inputs,
                           cli::is_earlier_safetensors_output, "m");
}

TEST_CASE("huge or garbage config.json", "[catalogue][files][config]") {
    model_test::TempDir dir;
    const fs::path path = dir.path() / "config.json";
    SECTION("larger than the 1 MiB limit: refused before reading (a sparse 64 GiB file)") {
        write_text(path, "{");
        fs::resize_file(path, std::uint64_t{1} << 36);
        CHECK_ERROR(FileError, read_model_config(path), "config.json", "68719476736 bytes",
                    "over the 1048576-byte limit");
    }
    SECTION("binary garbage") {
        write_text(path, std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
        CHECK_ERROR(ConfigError, read_model_config(path), "config.json", "not valid JSON");
    }
    SECTION("empty file") {
        write_text(path, "");
        CHECK_ERROR(ConfigError, read_model_config(path), "config.json", "not valid JSON");
    }
    SECTION("deeply nested JSON (would overflow the stack of a recursive walk)") {
        write_text(path, "{\"hidden_size\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
        CHECK_ERROR(ConfigError, read_model_config(path), "config.json", "nests deeper than 32");
    }
    SECTION("valid JSON that is not an object") {
        write_text(path, "[1, 2, 3]");
        CHECK_ERROR(ConfigError, read_model_config(path), "config.json", "expected a JSON object, got array");
    }
}

TEST_CASE("config.json that is not strict JSON", "[catalogue][files][config]") {
    // nlohmann alone would stop at the NUL byte and keep the last of two values.
    const std::string valid = model_config_to_json(tiny(AttentionKind::diff)).dump();
    CHECK_ERROR(ConfigError, model_config_from_json_text(valid + std::string(1, '\0') + "garbage"),
                "not valid JSON: it holds a NUL byte at byte offset ", std::to_string(valid.size()).c_str());
    CHECK_ERROR(ConfigError, model_config_from_json_text("{\"vocab_size\": 8, " + valid.substr(1)),
                "duplicate key \"vocab_size\"");
    model_test::TempDir dir;
    write_text(dir.path() / "config.json", "{\"vocab_size\": 8, " + valid.substr(1));
    CHECK_ERROR(ConfigError, read_model_config(dir.path() / "config.json"), "config.json \"",
                "duplicate key \"vocab_size\"");
}

// ---- Configuration ------------------------------------------------------------------------------

TEST_CASE("bad config values", "[catalogue][config]") {
    const ModelConfig c = tiny(AttentionKind::diff);
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "vocab_size", "-5")),
                "key \"vocab_size\" must be an integer >= 1, got -5");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "hidden_size", "\"16\"")),
                "key \"hidden_size\" must be an integer >= 1, got \"16\"");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "hidden_size", "1e12")),
                "key \"hidden_size\"", "1000000000000");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "vocab_size", "")),
                "missing required key \"vocab_size\"");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "attention", "\"linear\"")),
                "key \"attention\" must be one of softmax, diff, dint, shared_diff, diff_v2, gda, got \"linear\"");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "rms_norm_eps", "0")),
                "key \"rms_norm_eps\" must be a finite number > 0, got 0");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "causal", "1")),
                "key \"causal\" must be true or false, got 1");
    // The struct path (DecoderModel(config)) names the same keys.
    ModelConfig bad = c;
    bad.intermediate_size = 0;
    CHECK_ERROR(ConfigError, DecoderModel<float>(bad), "intermediate_size must be > 0, got 0");
    bad = c;
    bad.rope_theta = std::numeric_limits<double>::quiet_NaN();
    CHECK_ERROR(ConfigError, DecoderModel<float>(bad), "rope_theta must be > 0");
}

TEST_CASE("unknown or unused config key", "[catalogue][config]") {
    ModelConfig c = tiny(AttentionKind::softmax);
    nlohmann::ordered_json j = model_config_to_json(c);
    j["model_type"] = "llama";
    j["dint_integral"] = "causal_mean";
    std::vector<std::string> warnings;
    const ModelConfig parsed = model_config_from_json(j, &warnings);
    CHECK(parsed.hidden_size == 16);
    REQUIRE(warnings.size() == 2);
    check_words(warnings[0] + " | " + warnings[1],
                {"unknown key \"model_type\" ignored", "key \"dint_integral\" is only used by attention dint"});
}

TEST_CASE("unknown or unsupported checkpoint", "[catalogue][config][checkpoints]") {
    // Every case of docs/checkpoints.md "Refused" is a directory of tests/data/checkpoints/refused,
    // refused by tests/checkpoints; here one of each kind, as DecoderModel::load reports it.
    const fs::path refused = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "unknown_model_type"), "config.json",
                "unknown checkpoint (model_type \"llama\", architectures [\"LlamaForCausalLM\"]); supported:",
                "DiffLlama", "Motif");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "rope_type_yarn"), "config.json",
                "diffllama checkpoint: key \"rope_scaling.rope_type\" is \"yarn\": only rope types \"default\" and "
                "\"llama3\" are supported");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif_without_rms_norm_eps"),
                "motif checkpoint: key \"rms_norm_eps\" is required (upstream defaults disagree)");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "diffllama_odd_kv_heads"),
                "num_attention_heads (2) and num_key_value_heads (1) must both be even");
}

TEST_CASE("llama3 rope scaling factor too small", "[catalogue][config][checkpoints]") {
    // The frequencies divided by a tiny factor would overflow the angles: the factor is named,
    // not rope_theta, which is fine.
    model_test::TempDir dir;
    const fs::path llama3 = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "diffllama_llama3";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(llama3 / "config.json"));
    j["rope_scaling"]["factor"] = 1e-300;
    write_text(dir.path() / "config.json", j.dump());
    fs::copy_file(llama3 / "model.safetensors", dir.path() / "model.safetensors");
    const std::string message = message_of<ConfigError>([&] { DecoderModel<float>::load(dir.path()); });
    check_words(message, {"config.json", "llama3 rope scaling factor 1e-300 is too small",
                          "the rotary frequencies divided by it reach", "would overflow"});
    CHECK(message.find("rope_theta") == std::string::npos);
}

TEST_CASE("sharded checkpoint that does not hold together", "[catalogue][files][checkpoints]") {
    const fs::path refused = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "index_tensor_listed_for_other_shard"),
                "model.safetensors.index.json \"",
                "weight_map lists tensor \"model.layers.0.self_attn.lambda_q1\" for shard "
                "\"model-00001-of-00002.safetensors\" but it is in shard \"model-00002-of-00002.safetensors\"");
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "index_tensor_in_two_shards"),
                "tensor \"model.embed_tokens.weight\" is in two shards, \"model-00001-of-00002.safetensors\" and "
                "\"model-00002-of-00002.safetensors\"");
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "index_shard_path_escapes"),
                "weight_map names \"../model-00002-of-00002.safetensors\"", "not a file name inside the directory");
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "single_file_and_index"), "ambiguous checkpoint");
}

TEST_CASE("grouped heads that cannot form groups", "[catalogue][config][checkpoints]") {
    ModelConfig c = tiny(AttentionKind::gda);
    c.num_attention_heads = 6;
    c.head_dim = 4;
    c.gda_group_ratio = 4;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c),
                "gda_group_ratio (4) must be > 0 and divide num_attention_heads (6) for attention gda");
    c.gda_group_ratio = 3;
    c.num_key_value_heads = 3;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c),
                "num_key_value_heads (3) must divide the 2 noise heads (num_attention_heads 6 / gda_group_ratio 3)");
    const fs::path refused = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif2_noise_heads_not_dividing"), "config.json",
                "motif checkpoint: num_noise_heads (3) must be less than and divide num_attention_heads (4)");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif2_odd_kv_heads"),
                "num_key_value_heads (1) must be even");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif2_kv_pairs_not_dividing_groups"),
                "num_noise_heads (2) must be a multiple of num_key_value_heads / 2 (3)");
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif2_without_head_dim"),
                "key \"head_dim\" is required with num_noise_heads");
}

TEST_CASE("unsupported k_ratio", "[catalogue][config][checkpoints]") {
    const fs::path refused = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    CHECK_ERROR(ConfigError, DecoderModel<float>::load(refused / "motif2_k_ratio_2"), "config.json",
                "motif checkpoint: key \"k_ratio\" is 2: only 1 is supported (Motif's vLLM MotifAttention never "
                "reads it");
}

TEST_CASE("Motif-2 tensor missing or misshapen", "[catalogue][files][checkpoints]") {
    const fs::path refused = fs::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "motif2_missing_subln"),
                "missing tensor \"model.layers.0.self_attn.subln.weight\"");
    CHECK_ERROR(FileError, DecoderModel<float>::load(refused / "motif2_o_proj_misshapen"),
                "tensor \"model.layers.0.self_attn.o_proj.weight\" has shape [8, 12] but shape [8, 16] is expected");
}

TEST_CASE("bad end-of-sequence id", "[catalogue][config][checkpoints]") {
    model_test::TempDir dir;
    write_text(dir.path() / "generation_config.json", R"({"eos_token_id": [2, -1]})");
    CHECK_ERROR(ConfigError, read_eos_token_ids(dir.path(), 32), "generation_config.json \"",
                "key \"eos_token_id\" must be a token id (an integer >= 0) or a list of them, got [2,-1]");
}

TEST_CASE("end-of-sequence id outside the vocabulary", "[catalogue][config][checkpoints]") {
    // An id the model can never produce would never stop a generation: config.json's and
    // generation_config.json's alike.
    model_test::TempDir dir;
    write_text(dir.path() / "config.json", R"({"eos_token_id": 32})");
    CHECK_ERROR(ConfigError, read_eos_token_ids(dir.path(), 32), "config.json \"", dir.path().string().c_str(),
                "key \"eos_token_id\" names id 32, outside the model's vocabulary [0, 32)");
    write_text(dir.path() / "generation_config.json", R"({"eos_token_id": [2, 31, 4096]})");
    CHECK_ERROR(ConfigError, read_eos_token_ids(dir.path(), 32), "generation_config.json \"",
                "key \"eos_token_id\" names id 4096, outside the model's vocabulary [0, 32)");
    write_text(dir.path() / "generation_config.json", R"({"eos_token_id": [2, 31]})");
    CHECK(read_eos_token_ids(dir.path(), 32) == std::vector<Token>{2, 31});
}

TEST_CASE("end-of-sequence list of 200000 ids", "[catalogue][config][checkpoints]") {
    // Not an error: 200,000 ids (about 570 KB, within config files' 1 MiB limit) are read in one
    // linear pass (each id's check once built a dump of the whole list: minutes).
    model_test::TempDir dir;
    std::string list = "[";
    for (int i = 0; i < 200000; ++i) list += std::to_string(i % 97) + (i + 1 < 200000 ? "," : "]");
    write_text(dir.path() / "generation_config.json", "{\"eos_token_id\": " + list + "}");
    CHECK(read_eos_token_ids(dir.path(), 97).size() == 97);
    // A bad id in such a list is named without the whole list: the message stays short.
    write_text(dir.path() / "generation_config.json", "{\"eos_token_id\": " + list.substr(0, list.size() - 1) + ",-1]}");
    const std::string message = message_of<ConfigError>([&] { read_eos_token_ids(dir.path(), 97); });
    check_words(message, {"generation_config.json", "\"eos_token_id\" must be a token id", "got [0,1,2,"});
    CHECK(message.size() < 400);
}

TEST_CASE("generation_config.json that leads nowhere", "[catalogue][files][checkpoints]") {
    // A dangling link (a Hub cache with a missing blob) or a link loop: an error naming it, not a
    // silent fall back to config.json's eos, which would not stop where the checkpoint says.
    model_test::TempDir dir;
    write_text(dir.path() / "config.json", R"({"eos_token_id": 7})");
    fs::create_symlink("../blobs/gone", dir.path() / "generation_config.json");
    CHECK_ERROR(FileError, read_eos_token_ids(dir.path(), 32), "generation_config.json \"",
                "it is a symbolic link to \"../blobs/gone\", which does not exist");
    fs::remove(dir.path() / "generation_config.json");
    fs::create_symlink("generation_config.json", dir.path() / "generation_config.json");
    CHECK_ERROR(FileError, read_eos_token_ids(dir.path(), 32), "generation_config.json \"",
                "cannot access it: Too many levels of symbolic links");
    fs::remove(dir.path() / "generation_config.json");
    CHECK(read_eos_token_ids(dir.path(), 32) == std::vector<Token>{7});  // absent: config.json's
}

TEST_CASE("zero heads", "[catalogue][config]") {
    const ModelConfig c = tiny(AttentionKind::diff);
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "num_attention_heads", "0")),
                "key \"num_attention_heads\" must be an integer >= 1, got 0");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(c, "num_key_value_heads", "0")),
                "key \"num_key_value_heads\" must be an integer >= 1, got 0");
    ModelConfig zero = c;
    zero.num_attention_heads = 0;
    CHECK_ERROR(ConfigError, DecoderModel<float>(zero), "num_attention_heads must be > 0, got 0");
    CHECK_ERROR(ConfigError, KvCache<float>(zero, 8), "num_attention_heads must be > 0, got 0");
}

TEST_CASE("head dim not dividing the width", "[catalogue][config]") {
    ModelConfig c = tiny(AttentionKind::diff);
    c.hidden_size = 30;  // 2 heads of 2 maps: 30 / 4 is not an integer
    CHECK_ERROR(ConfigError, DecoderModel<float>(c),
                "hidden_size (30) must be divisible by 2 * num_attention_heads (4) for attention diff");
    c = tiny(AttentionKind::softmax);
    c.hidden_size = 15;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c),
                "hidden_size (15) must be divisible by num_attention_heads (2) for attention softmax");
    c = tiny(AttentionKind::diff);
    c.num_attention_heads = 4;
    c.num_key_value_heads = 3;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c), "num_key_value_heads (3) must divide num_attention_heads (4)");
    c = tiny(AttentionKind::diff);
    c.hidden_size = 12;  // d = 12 / 2 / 2 = 3: odd, no rotary pairs
    CHECK_ERROR(ConfigError, DecoderModel<float>(c), "d = 3", "must be even for the interleaved rotary embedding");
    c = tiny(AttentionKind::shared_diff);
    c.num_key_value_heads = 1;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c), "must equal num_attention_heads", "shared_diff");
}

TEST_CASE("dimensions too large to index", "[catalogue][config]") {
    ModelConfig c = tiny(AttentionKind::diff_v2);
    c.num_attention_heads = 2'000'000'000;
    c.num_key_value_heads = 2'000'000'000;
    c.head_dim = 2'000'000'000;
    c.hidden_size = 2'000'000'000;
    CHECK_ERROR(ConfigError, c.validate(), "parameters", "more than");
    c = tiny(AttentionKind::diff);
    c.num_hidden_layers = 2'000'000'000;
    c.hidden_size = 2'000'000'000;
    c.num_attention_heads = 1'000'000'000;
    CHECK_ERROR(ConfigError, DecoderModel<float>(c), "parameters", "more than");
    // In config.json, a dimension past int is refused by its key, with the range it must be in.
    const ModelConfig d = tiny(AttentionKind::diff);
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(d, "hidden_size", "1099511627776")),
                "key \"hidden_size\" must be an integer in [1, 2147483647], got 1099511627776: too large to index");
    CHECK_ERROR(ConfigError, model_config_from_json_text(config_json_with(d, "num_hidden_layers", "1e12")),
                "key \"num_hidden_layers\" must be an integer in [0, 2147483647]", "too large to index");
}

// ---- Kernels ------------------------------------------------------------------------------------

TEST_CASE("wrong shapes", "[catalogue][shapes]") {
    const RowMatrix<float> q = random_matrix<float>(9, 64, 1), k1 = random_matrix<float>(9, 64, 2);
    const RowMatrix<float> k2 = random_matrix<float>(17, 32, 3), v = random_matrix<float>(9, 128, 4);
    RowMatrix<float> out(9, 128);
    CHECK_ERROR(ShapeError, diff_attention(q, k1, q, k2, v, 0.5f, out), "diff_attention",
                "K2 is 17x32 but K1 is 9x64 (shapes must match)");
    const RowMatrix<float> few_keys = random_matrix<float>(4, 64, 5), few_values = random_matrix<float>(4, 128, 6);
    CHECK_ERROR(ShapeError, softmax_attention(q, few_keys, few_values, out), "softmax_attention",
                "K is 4x64 but Q is 9x64", "S >= N");
    RowMatrix<float> narrow(9, 100);
    CHECK_ERROR(ShapeError, softmax_attention(q, k1, v, narrow), "out is 9x100 but must be 9x128");
    RowMatrix<float> shared = random_matrix<float>(9, 64, 7);
    CHECK_ERROR(ShapeError, softmax_attention(shared, k1, shared, shared), "out overlaps the memory of Q",
                "must not alias");
    const RowMatrix<float> no_width(9, 0);
    RowMatrix<float> out0(9, 0);
    CHECK_ERROR(ShapeError, softmax_attention(no_width, no_width, no_width, out0), "head dim 0");
    // gda: Q1 holds whole signal heads of Q2's width, and out one 2d block per signal head.
    const RowMatrix<float> signal = random_matrix<float>(9, 100, 8);
    CHECK_ERROR(ShapeError, gda_attention(signal, k1, q, k1, v, 0.5f, out), "gda_attention",
                "Q1 is 9x100 but Q2 is 9x64 (Q1 holds gr >= 1 signal heads of Q2's width");
    const RowMatrix<float> two_heads = random_matrix<float>(9, 128, 9);
    CHECK_ERROR(ShapeError, gda_attention(two_heads, k1, q, k1, v, 0.5f, out), "gda_attention",
                "out is 9x128 but must be 9x256");

    // Model level: the logits matrix, and a state of another configuration or too short.
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 2);
    ForwardState<float> state = model.make_state(4);
    RowMatrix<float> logits(2, 31);
    CHECK_ERROR(ShapeError, model.forward({1, 2}, state, logits), "DecoderModel::forward", "logits is 2x31",
                "must be 2x32");
    CHECK_ERROR(ShapeError, model.forward({1, 2, 3, 4, 5}, state), "5 tokens but the ForwardState holds at most 4");
    ForwardState<float> other = DecoderModel<float>(tiny(AttentionKind::softmax)).make_state(4);
    CHECK_ERROR(ShapeError, model.forward({1, 2}, other), "the ForwardState was made for another configuration");
}

TEST_CASE("token id out of range", "[catalogue][model]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::dint), 3);
    ForwardState<float> state = model.make_state(8);
    KvCache<float> cache = model.make_cache(16);
    model.forward({1, 2}, state, &cache);
    CHECK_ERROR(ShapeError, model.forward({1, 2, 32}, state), "DecoderModel::forward",
                "token 2 is 32, outside the vocabulary [0, 32)");
    CHECK_ERROR(ShapeError, model.forward({-1}, state, &cache), "token 0 is -1, outside the vocabulary [0, 32)");
    CHECK(cache.length() == 2);  // checked before anything is written: the cache is unchanged
    CHECK(model.forward({3}, state, &cache).allFinite());
}

TEST_CASE("NaN or Inf in kernel inputs", "[catalogue][nan]") {
    // No exception: a non-finite value reaches only the output rows that depend on it (causal
    // mask: query n depends on keys and values 0..n, and on its own query row).
    const Index n = 80, d = 8;  // more than one 64-row block
    RowMatrix<float> q1 = random_matrix<float>(n, d, 1), k1 = random_matrix<float>(n, d, 2);
    RowMatrix<float> q2 = random_matrix<float>(n, d, 3), k2 = random_matrix<float>(n, d, 4);
    RowMatrix<float> v = random_matrix<float>(n, 2 * d, 5);
    const Index bad = 70;
    v(bad, 3) = std::numeric_limits<float>::quiet_NaN();
    k1(bad, 1) = std::numeric_limits<float>::infinity();
    RowMatrix<float> out(n, 2 * d);
    for (int kernel = 0; kernel < 4; ++kernel) {
        INFO("kernel " << kernel);
        out.setZero();
        if (kernel == 0) softmax_attention(q1, k1, v, out);
        if (kernel == 1) diff_attention(q1, k1, q2, k2, v, 0.5f, out);
        if (kernel == 2) dint_attention(q1, k1, q2, k2, v, 0.5f, DintIntegral::causal_softmax, out);
        if (kernel == 3) dint_attention(q1, k1, q2, k2, v, 0.5f, DintIntegral::causal_mean, out);
        for (Index row = 0; row < bad; ++row) CHECK(row_finite(out, row));
        for (Index row = bad; row < n; ++row) CHECK(row_has_nan(out, row));
    }
    // A NaN in one query row stays in that row (softmax, diff); DINT's causal integrals average A1
    // over the rows so far, so there it reaches rows >= 10 and leaves rows < 10 finite.
    RowMatrix<float> q = random_matrix<float>(n, d, 6);
    q(10, 0) = std::numeric_limits<float>::quiet_NaN();
    const RowMatrix<float> k = random_matrix<float>(n, d, 7), clean_v = random_matrix<float>(n, 2 * d, 8);
    softmax_attention(q, k, clean_v, out);
    CHECK(row_has_nan(out, 10));
    CHECK(out.topRows(10).allFinite());
    CHECK(out.bottomRows(n - 11).allFinite());
    diff_attention(q, k, q2, k2, clean_v, 0.5f, out);
    CHECK(row_has_nan(out, 10));
    CHECK(out.topRows(10).allFinite());
    CHECK(out.bottomRows(n - 11).allFinite());
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        dint_attention(q, k, q2, k2, clean_v, 0.5f, integral, out);
        CHECK(out.topRows(10).allFinite());
        for (Index row = 10; row < n; ++row) CHECK(row_has_nan(out, row));
    }
}

TEST_CASE("NaN or Inf in weights", "[catalogue][nan]") {
    // Weights are not scanned at load (a NaN loads as NaN); it reaches exactly the logits that depend
    // on it. A NaN in token t's embedding row: in a causal model, the logits of every position from
    // t's first occurrence on are NaN, earlier positions are untouched.
    for (AttentionKind kind : kKinds) {
        INFO(to_string(kind));
        DecoderModel<float> model = DecoderModel<float>::seeded(tiny(kind), 4);
        const std::vector<Token> tokens = {3, 9, 1, 7, 20, 9, 4};
        const RowMatrix<float> clean = model.logits(tokens);
        model.embed_tokens.dense()(7, 2) = std::numeric_limits<float>::quiet_NaN();
        const RowMatrix<float> logits = model.logits(tokens);
        for (Index row = 0; row < 3; ++row) {
            CHECK(row_finite(logits, row));  // equal up to rounding (the kernels may take another summation path)
            CHECK((logits.row(row) - clean.row(row)).cwiseAbs().maxCoeff() <= 1e-5f * (1 + clean.row(row).cwiseAbs().maxCoeff()));
        }
        for (Index row = 3; row < 7; ++row) CHECK(row_has_nan(logits, row));
    }
    // An Inf in lm_head row v: the logit of token v is +-Inf or NaN in every row, the others are finite.
    DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 4);
    model.lm_head.dense()(5, 0) = std::numeric_limits<float>::infinity();
    const RowMatrix<float> logits = model.logits({1, 2, 3});
    CHECK_FALSE(logits.col(5).allFinite());
    CHECK(logits.leftCols(5).allFinite());
    CHECK(logits.rightCols(26).allFinite());
    // The one weight that is checked, when it is used: a layer's lambda, which its lambda_* vectors
    // give and which the kernels require finite (docs/math.md §2.5). NaN in one of them, or a dot
    // product whose exp overflows a float, names the layer.
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), 1e3f}) {
        DecoderModel<float> lambda_model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 4);
        for (Parameter<float>& p : lambda_model.parameters()) {
            if (p.name == "model.layers.1.self_attn.lambda_q1") p.slices.front().map().setConstant(bad);
            if (p.name == "model.layers.1.self_attn.lambda_k1") p.slices.front().map().setConstant(1.0f);
        }
        CHECK_ERROR(OptionError, lambda_model.logits({1, 2, 3}), "layer 1: lambda = exp(lambda_q1 . lambda_k1)",
                    "not a finite float", "self_attn.lambda_* weights");
    }
}

TEST_CASE("NaN logits in a ranking or greedy generation", "[catalogue][nan]") {
    // A defined order: larger first, every NaN after every number (-Inf included), ties and NaNs
    // among themselves by the lower id. An all-NaN row gives token 0.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    Vector<float> logits(7);
    logits << 1.73f, nan, -2.59f, nan, 0.5f, -inf, 1.73f;
    CHECK(top_logits(logits, 5) == std::vector<Index>{0, 6, 4, 2, 5});
    CHECK(top_logits(logits, 7) == std::vector<Index>{0, 6, 4, 2, 5, 1, 3});
    CHECK(argmax_token(logits) == 0);
    CHECK(argmax_token(Vector<float>::Constant(3, nan)) == 0);
    // Greedy generation never picks a NaN logit while a number is there.
    DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 4);
    for (Index v = 0; v < 32; v += 2) model.lm_head.dense().row(v).setConstant(nan);
    for (Token id : generate(model, {1, 2, 3}, 6)) CHECK(id % 2 == 1);
}

TEST_CASE("bad sampling options", "[catalogue][options]") {
    SamplingOptions o;
    o.temperature = -0.5;
    CHECK_ERROR(OptionError, check_sampling_options(o),
                "SamplingOptions: temperature must be finite and >= 0 (0 = greedy), got -0.5");
    o.temperature = std::numeric_limits<double>::quiet_NaN();
    CHECK_ERROR(OptionError, Sampler(o, 32), "temperature must be finite and >= 0", "got nan");
    o = {};
    o.top_k = -3;
    CHECK_ERROR(OptionError, Sampler(o, 32), "top_k must be >= 0 (0 = off), got -3");
    o = {};
    o.top_p = 0.0;
    CHECK_ERROR(OptionError, Sampler(o, 32), "top_p must be in (0, 1] (1 = off), got 0");
    o.top_p = 1.5;
    CHECK_ERROR(OptionError, check_sampling_options(o), "top_p must be in (0, 1] (1 = off), got 1.5");
}

TEST_CASE("logits a sampler cannot draw from", "[catalogue][nan]") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    SamplingOptions o;
    o.temperature = 1.0;
    Sampler sampler(o, 32);
    CHECK_ERROR(ShapeError, sampler.sample(Vector<float>::Zero(31)),
                "Sampler::sample: logits has 31 entries but the vocabulary has 32");
    Vector<float> logits = Vector<float>::Constant(32, nan);
    logits.tail(8).setConstant(-inf);
    CHECK_ERROR(Error, sampler.sample(logits),
                "Sampler::sample: every logit is NaN or -infinity, so there is no distribution to sample from");
    Sampler greedy(SamplingOptions{}, 32);
    CHECK(greedy.sample(logits) == 24);  // the first -Inf: argmax_token ranks it before every NaN
    CHECK(greedy.sample(Vector<float>::Constant(32, nan)) == 0);
    logits(5) = 0.0f;
    logits(9) = 0.0f;
    for (int i = 0; i < 50; ++i) {
        const Index id = sampler.sample(logits);
        CHECK((id == 5 || id == 9));
    }
}

TEST_CASE("invalid kernel options", "[catalogue][options]") {
    const RowMatrix<float> q = random_matrix<float>(6, 4, 1), k = random_matrix<float>(6, 4, 2);
    const RowMatrix<float> v = random_matrix<float>(6, 8, 3);
    RowMatrix<float> out(6, 8);
    CHECK_ERROR(OptionError, diff_attention(q, k, q, k, v, std::numeric_limits<float>::quiet_NaN(), out),
                "diff_attention: lambda must be finite, got nan");
    AttentionOptions o;
    o.scale = 0.0;
    CHECK_ERROR(OptionError, softmax_attention(q, k, v, out, o), "scale must be finite and > 0, got 0");
    o = {};
    o.valid_len = 7;
    CHECK_ERROR(OptionError, softmax_attention(q, k, v, out, o), "valid_len is 7 but K is 6x4",
                "0 <= valid_len <= S");
    o = {};
    o.threads = 0;
    CHECK_ERROR(OptionError, softmax_attention(q, k, v, out, o), "threads must be in [1, 1024], got 0");
    o.threads = 100000;  // each thread's scratch is sized before the call: refused, not allocated
    CHECK_ERROR(OptionError, softmax_attention(q, k, v, out, o), "threads must be in [1, 1024], got 100000");
}

TEST_CASE("BF16 products where they cannot run", "[catalogue][options]") {
    const RowMatrix<double> q = random_matrix<double>(9, 4, 1), v = random_matrix<double>(9, 8, 3);
    RowMatrix<double> out(9, 8);
    AttentionOptions o;
    o.compute = Compute::bf16;
    CHECK_ERROR(OptionError, softmax_attention(q, q, v, out, o),
                "softmax_attention: compute bf16 needs a float kernel; this one computes in double");
    // A CPU without vdpbf16ps or AMX tiles, whatever this one has: the check the kernels make with its answer.
    const Bf16Units none{}, dot_only{true, false};
    CHECK_ERROR(OptionError, detail::resolve_products<float>("softmax_attention", Compute::bf16_dot, none),
                "compute bf16_dot needs a CPU with AVX512-BF16 (vdpbf16ps), which this one lacks");
    CHECK_ERROR(OptionError, detail::resolve_products<float>("softmax_attention", Compute::bf16_amx, dot_only),
                "compute bf16_amx needs a CPU with AMX tiles (AMX-BF16, granted by the OS) and AVX512-BF16, which "
                "this one lacks");
    CHECK(detail::resolve_products<float>("softmax_attention", Compute::bf16, none) == ProductPath::bf16_widened);
    CHECK(detail::resolve_products<float>("softmax_attention", Compute::bf16_amx, Bf16Units{true, true}) ==
          ProductPath::bf16_amx);
    const RowMatrix<float> qf = q.cast<float>(), vf = v.cast<float>();
    RowMatrix<float> outf(9, 8);
    o.compute = Compute::bf16_dot;
    if (bf16_dot_available()) {
        CHECK_NOTHROW(softmax_attention(qf, qf, vf, outf, o));
    } else {
        CHECK_ERROR(OptionError, softmax_attention(qf, qf, vf, outf, o), "compute bf16_dot needs a CPU with AVX512-BF16");
    }
    // A projection of many rows in double asked for BF16 products (a decode step's few rows never round).
    const RowMatrix<double> x = random_matrix<double>(16, 4, 4), w = random_matrix<double>(3, 4, 5);
    RowMatrix<double> y(16, 3);
    ExecutionContext bf16_context;
    bf16_context.compute = Compute::bf16;
    CHECK_ERROR(OptionError, linear<double>(x, w, y, bf16_context),
                "linear: compute bf16 needs a float kernel; this one computes in double");
    // A model: the state refuses before any forward.
    const DecoderModel<double> model = DecoderModel<double>::seeded(tiny(AttentionKind::diff), 1);
    ForwardState<double> state = model.make_state(4);
    CHECK_ERROR(OptionError, state.set_compute(Compute::bf16),
                "ForwardState::set_compute: compute bf16 needs a float kernel; this one computes in double");
    GenerationOptions generation;
    generation.max_new_tokens = 2;
    generation.compute = Compute::bf16;
    CHECK_ERROR(OptionError, generate(model, {1, 2}, generation, [](const auto& row) { return argmax_token(row); },
                                      [](Token) {}),
                "generate: compute bf16 needs a float kernel");
}

TEST_CASE("empty sequence", "[catalogue][empty]") {
    // Not an error: nothing to compute.
    const RowMatrix<float> none(0, 4), values(0, 8);
    RowMatrix<float> out(0, 8);
    CHECK_NOTHROW(softmax_attention(none, none, values, out));
    CHECK_NOTHROW(dint_attention(none, none, none, none, values, 0.5f, DintIntegral::causal_softmax, out));
    for (AttentionKind kind : kKinds) {
        INFO(to_string(kind));
        const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(kind), 6);
        ForwardState<float> state = model.make_state(4);
        CHECK(model.forward({}, state).rows() == 0);
        CHECK(model.logits({}).rows() == 0);
        KvCache<float> cache = model.make_cache(4);
        model.forward({1, 2}, state, &cache);
        CHECK(model.forward({}, state, &cache).rows() == 0);
        CHECK(cache.length() == 2);
    }
}

TEST_CASE("query that sees no key", "[catalogue][mask]") {
    // docs/math.md §1: an all-zero output row, never NaN (key padding valid_len = 0 hides every key).
    const RowMatrix<float> q = random_matrix<float>(5, 4, 1), k = random_matrix<float>(5, 4, 2);
    const RowMatrix<float> v = random_matrix<float>(5, 8, 3);
    RowMatrix<float> out = RowMatrix<float>::Constant(5, 8, 7.0f);
    AttentionOptions o;
    o.valid_len = 0;
    softmax_attention(q, k, v, out, o);
    CHECK(out.isZero(0));
    out.setConstant(7.0f);
    diff_attention(q, k, q, k, v, 0.3f, out, o);
    CHECK(out.isZero(0));
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        out.setConstant(7.0f);
        dint_attention(q, k, q, k, v, 0.3f, integral, out, o);
        CHECK(out.isZero(0));
    }
    o.mask = MaskKind::none;
    out.setConstant(7.0f);
    dint_attention(q, k, q, k, v, 0.3f, DintIntegral::global_mean, out, o);
    CHECK(out.isZero(0));
}

// ---- KV cache and combinations of options ---------------------------------------------------------

TEST_CASE("cache overflow", "[catalogue][kv_cache]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::dint), 7);
    ForwardState<float> state = model.make_state(8);
    KvCache<float> cache = model.make_cache(6);
    model.forward({1, 2, 3, 4}, state, &cache);
    CHECK_ERROR(ShapeError, model.forward({5, 6, 7}, state, &cache), "DecoderModel::forward",
                "the KvCache holds 4 of at most 6 tokens, so 3 more (7) would pass its max_len", "does not grow");
    CHECK(cache.length() == 4);  // unchanged, still usable
    const RowMatrix<float> next = model.forward({5, 6}, state, &cache);
    CHECK((next.row(1) - model.logits({1, 2, 3, 4, 5, 6}).row(5)).cwiseAbs().maxCoeff() < 1e-4f);
    CHECK_ERROR(ShapeError, model.make_cache(0), "KvCache: max_len must be > 0, got 0");
}

TEST_CASE("sizes too large for the machine", "[catalogue][memory]") {
    // Checked before allocating, against the machine's physical memory (core/memory_limit.hpp):
    // a ShapeError naming the bytes, never std::bad_alloc or std::length_error.
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::dint), 7);
    const Index huge = Index(1) << 40;
    CHECK_ERROR(ShapeError, model.make_state(Index(1) << 31), "ForwardState: max_len must be at most 2147483647");
    CHECK_ERROR(ShapeError, model.make_cache(Index(1) << 31), "KvCache: max_len must be at most 2147483647");
    CHECK_ERROR(ShapeError, ForwardState<float>(model.config(), 2'000'000'000), "ForwardState: 2000000000 tokens of",
                "bytes each would take", "bytes of physical memory");
    CHECK_ERROR(ShapeError, model.make_cache(2'000'000'000), "KvCache: 2000000000 tokens of", "bytes each would take",
                "bytes of physical memory");
    CHECK_ERROR(ShapeError, generate(model, {1, 2}, huge), "generate: 1099511627776 tokens after a prompt of 2",
                "would pass the 2147483647 positions");
    const DecoderModel<float> wide(test::tiny_config(AttentionKind::diff, 1 << 17));
    CHECK_ERROR(ShapeError, generate(wide, {1, 2}, 1'000'000, false), "generate: 1000000 tokens after a prompt of 2",
                "without a KV cache", "would take", "bytes of physical memory");
}

TEST_CASE("KV cache of another model", "[catalogue][kv_cache]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::dint), 7);
    const DecoderModel<float> other = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 7);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> cache = other.make_cache(8);
    CHECK_ERROR(ShapeError, model.forward({1}, state, &cache), "the KvCache was made for another configuration");
}

TEST_CASE("global_mean with a causal mask", "[catalogue][combinations]") {
    const RowMatrix<float> q = random_matrix<float>(6, 4, 1), k = random_matrix<float>(6, 4, 2);
    const RowMatrix<float> v = random_matrix<float>(6, 8, 3);
    RowMatrix<float> out(6, 8);
    CHECK_ERROR(OptionError, dint_attention(q, k, q, k, v, 0.5f, DintIntegral::global_mean, out),
                "dint_attention: integral global_mean sees the future and needs mask none");
    ModelConfig c = tiny(AttentionKind::dint);
    c.dint_integral = DintIntegral::global_mean;  // causal: true by default
    CHECK_ERROR(ConfigError, DecoderModel<float>(c), "global_mean", "needs \"causal\": false");
    CHECK_ERROR(ConfigError, model_config_from_json_text(model_config_to_json(c).dump()), "global_mean",
                "needs \"causal\": false");
}

TEST_CASE("global_mean with a KV cache", "[catalogue][combinations]") {
    ModelConfig c = tiny(AttentionKind::dint);
    c.dint_integral = DintIntegral::global_mean;
    c.causal = false;
    const DecoderModel<float> model = DecoderModel<float>::seeded(c, 8);
    CHECK_ERROR(OptionError, model.make_cache(8), "KvCache", "global_mean", "cannot be decoded incrementally");
    // The kernel refuses a history of earlier rows.
    const RowMatrix<float> q = random_matrix<float>(2, 4, 1), k = random_matrix<float>(6, 4, 2);
    const RowMatrix<float> v = random_matrix<float>(6, 8, 3);
    RowMatrix<float> out(2, 8);
    AttentionOptions o;
    o.mask = MaskKind::none;
    DintHistory<float> history;
    history.rows = 4;
    CHECK_ERROR(OptionError, dint_attention(q, k, q, k, v, 0.5f, DintIntegral::global_mean, out, o, &history),
                "global_mean cannot continue from a history (KV cache) of 4 rows");
}

TEST_CASE("encoder with a KV cache", "[catalogue][combinations]") {
    ModelConfig c = tiny(AttentionKind::diff);
    c.causal = false;
    const DecoderModel<float> model = DecoderModel<float>::seeded(c, 9);
    CHECK_ERROR(OptionError, model.make_cache(8), "KvCache: the model is a bidirectional encoder",
                "needs a causal decoder");
    CHECK_ERROR(OptionError, KvCache<float>(c, 8), "bidirectional encoder");
}

TEST_CASE("causal DINT integral over cached keys without their history", "[catalogue][combinations]") {
    const RowMatrix<float> q = random_matrix<float>(2, 4, 1), k = random_matrix<float>(6, 4, 2);
    const RowMatrix<float> v = random_matrix<float>(6, 8, 3);
    RowMatrix<float> out(2, 8);
    CHECK_ERROR(OptionError, dint_attention(q, k, q, k, v, 0.5f, DintIntegral::causal_mean, out),
                "a causal integral over 4 cached rows needs their DintHistory");
    DintHistory<float> wrong;
    wrong.rows = 3;
    CHECK_ERROR(OptionError, dint_attention(q, k, q, k, v, 0.5f, DintIntegral::causal_softmax, out, {}, &wrong),
                "history has 3 rows", "need history rows == S - N = 4");
}

// ---- Tokenizer ----------------------------------------------------------------------------------

TEST_CASE("tokenizer.json outside the supported subset", "[catalogue][tokenizer]") {
    const fs::path tiny_llama3 = fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3" / "tokenizer.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(tiny_llama3));
    j["model"]["type"] = "WordPiece";
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json(j, "tokenizer.json \"t.json\""), "tokenizer.json \"t.json\"",
                "model: key \"type\" must be one of BPE, got \"WordPiece\"");
    j = nlohmann::json::parse(std::ifstream(tiny_llama3));
    j["normalizer"] = {{"type", "NFC"}};
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json(j), "key \"normalizer\" must be null", "\"NFC\"");
    j = nlohmann::json::parse(std::ifstream(tiny_llama3));
    j["model"]["merges"][0] = nlohmann::json::array({"Ġ", "no-such-token"});
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json(j), "model.merges[0]",
                "right token \"no-such-token\" is not in model.vocab");
    CHECK_ERROR(FileError, text::Tokenizer::load(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "no-such-dir"),
                "tokenizer.json \"", "no such file");
    // A tokenizer_config.json that is there but cannot be read: an error, so its bos / eos are not lost.
    model_test::TempDir dir;
    fs::copy_file(tiny_llama3, dir.path() / "tokenizer.json");
    fs::create_symlink("gone.json", dir.path() / "tokenizer_config.json");
    CHECK_ERROR(FileError, text::Tokenizer::load(dir.path()), "tokenizer_config.json \"",
                "it is a symbolic link to \"gone.json\", which does not exist");
}

TEST_CASE("tokenizer regex whose meaning differs between Oniguruma and PCRE2", "[catalogue][tokenizer]") {
    // Hugging Face compiles tokenizer.json patterns with Oniguruma: what PCRE2 reads otherwise is
    // translated (\v is the vertical tab alone, (?m) lets "." match a newline) or refused at load.
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3" / "tokenizer.json"));
    const auto with_pattern = [&](const char* pattern) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", pattern}};
        return text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\"");
    };
    const text::Tokenizer one_piece = with_pattern("(?:.|\n)+");  // the whole text as one piece
    CHECK(with_pattern("\\v|[^\\v]+").encode(".\n", false) == one_piece.encode(".\n", false));
    CHECK(with_pattern("(?m).+").encode("a\nb", false) == one_piece.encode("a\nb", false));
    for (const char* pattern : {"(?s).+", "[[:alpha:]]+", "a{1,2}+", "(?i:ss)"}) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", pattern}};
        CHECK_ERROR(ConfigError, text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\""),
                    "tokenizer.json \"t.json\": pre_tokenizer.pretokenizers[0].pattern", "the regex uses ",
                    "which diffattn does not translate from Oniguruma to PCRE2; pattern: ");
    }
}

TEST_CASE("tokenizer regex that can match the empty string", "[catalogue][tokenizer]") {
    // Refused when tokenizer.json is read, not when a prompt happens to hold an "a".
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3" / "tokenizer.json"));
    for (const char* pattern : {"(?=a)|b", "b|(?<!a)", "b?(?=c)"}) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", pattern}};
        CHECK_ERROR(ConfigError, text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\""),
                    "tokenizer.json \"t.json\": pre_tokenizer.pretokenizers[0].pattern",
                    "the regex can match the empty string, which diffattn does not support; pattern: ");
    }
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a\\K|."}};
    CHECK_ERROR(ConfigError, text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\""),
                "pre_tokenizer.pretokenizers[0].pattern: the regex uses \\K");
}

TEST_CASE("text that is not UTF-8, or a token id that names no token", "[catalogue][tokenizer]") {
    const text::Tokenizer tokenizer = text::Tokenizer::load(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3");
    CHECK_ERROR(Error, tokenizer.encode("abc\xFF"), "Tokenizer::encode: the text is not valid UTF-8: byte 0xff at offset 3");
    CHECK_ERROR(Error, tokenizer.decode({tokenizer.vocab_size()}), "Tokenizer::decode: id ", "names no token");
    // Invalid UTF-8 *made by* a sequence of ids is not an error: decode replaces it by U+FFFD.
    const std::int32_t lead = *tokenizer.token_to_id("\xC3\xA2");  // "â": the byte-level character of 0xE2
    CHECK(tokenizer.decode({lead}) == "\xEF\xBF\xBD");
}

TEST_CASE("a tokenizer regex that backtracks over the text at every match", "[catalogue][tokenizer]") {
    // Each match of (?:a|b)*c|. in a run of "a" first tries the first branch to the end of the
    // text, then takes one "a": n^2 / 2 steps in all, seconds at 20 000 bytes and minutes at
    // 130 000. A text may spend text::kMatchStepsPerByte steps a byte (plus a base).
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(fs::path(DIFFATTN_TEST_DATA_DIR) / "text" / "tiny_llama3" / "tokenizer.json"));
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(?:a|b)*c|."}};
    const text::Tokenizer tokenizer = text::Tokenizer::from_json_text(j.dump(), "tokenizer.json \"t.json\"");
    CHECK(tokenizer.encode(std::string(300, 'a'), false).size() == 300);  // a short text stays within its budget
    CHECK_ERROR(Error, tokenizer.encode(std::string(20000, 'a')),
                "Tokenizer::encode: pre-tokenizer: the regex took more than ",
                " matching steps on a text of 20000 bytes (256 a byte), at byte ",
                "it backtracks over much of the text at each match");
}

// ---- Attention analysis ---------------------------------------------------------------------------

TEST_CASE("attention analysis rows or spans outside the sequence", "[catalogue][analysis]") {
    const ModelConfig config = tiny(AttentionKind::dint);
    const DecoderModel<float> model = DecoderModel<float>::seeded(config, 1);
    analysis::AttentionAnalyzer<float> analyzer(config, 12);
    analysis::AnalysisResult result;
    const std::vector<Token> tokens(10, 5);
    const auto row = [](Index position) { return analysis::AnalysisRow{position, {}, {}, false}; };
    CHECK_ERROR(ShapeError, analyzer.run(model, tokens, {row(3), row(10)}, result),
                "AttentionAnalyzer::run: rows[1] is query row 10, outside the sequence of 10 tokens [0, 10)");
    CHECK_ERROR(OptionError, analyzer.run(model, tokens, {row(3), row(3)}, result),
                "rows[1] is query row 3 after row 3; rows must be strictly increasing");
    std::vector<analysis::AnalysisRow> rows = {row(9)};
    rows[0].answer = {2, 11};
    CHECK_ERROR(ShapeError, analyzer.run(model, tokens, rows, result),
                "rows[0].answer[1] is 11, outside the sequence of 10 tokens [0, 10)");
    rows[0].answer = {2};
    rows[0].noise = {5, 4};
    CHECK_ERROR(OptionError, analyzer.run(model, tokens, rows, result),
                "rows[0].noise[1] is 4 after 5; the noise positions must be strictly increasing");
    CHECK_ERROR(ShapeError, analyzer.run(model, std::vector<Token>(13, 5), {row(1)}, result),
                "13 tokens but the analyzer holds at most 12");
}

TEST_CASE("attention figures of another shape", "[catalogue][analysis]") {
    analysis::AnalysisResult two_heads;
    two_heads.n_layers = 1, two_heads.n_heads = 2, two_heads.n_rows = 1;
    two_heads.figures.resize(2);
    analysis::AnalysisResult one_head = two_heads;
    one_head.n_heads = 1;
    one_head.figures.resize(1);
    analysis::RowSummary summary;
    summary.add(two_heads);
    CHECK_ERROR(ShapeError, summary.add(one_head),
                "RowSummary::add: a result of 1 layers and 1 heads after results of 1 and 2");
    CHECK_ERROR(ShapeError, summary.estimate(1, 0, analysis::Figure::answer_share),
                "RowSummary::estimate: layer 1 head 0 of a summary of 1 layers and 2 heads");
    CHECK_ERROR(ShapeError, summary.estimate(0, 2, analysis::Figure::answer_share), "layer 0 head 2");
}

TEST_CASE("ranks that disagree", "[catalogue][distributed]") {
    // The cross-rank cases run under mpirun in tests/distributed/; these need no MPI.
    CHECK_ERROR(ShapeError, distributed::balanced_slices(3, 4, true), "balanced_slices",
                "a sequence of 3 tokens cannot be split over 4 ranks (need at least one token per rank)");
    CHECK_ERROR(OptionError, distributed::balanced_slices(12, 3, true, {3.0, 4.0}), "balanced_slices",
                "2 costs for 3 ranks (need one per rank, or none)");
    CHECK_ERROR(OptionError, distributed::balanced_slices(12, 2, true, {3.0, 0.0}), "balanced_slices",
                "rank 1's cost is 0 (need a finite value > 0)");
    struct NoKernels final : AttentionKernels<float> {  // never called: the module refuses first
        Index first_position() const override { return 0; }
        void softmax(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                     MatrixRef<float>, const AttentionOptions&, AttentionWorkspace<float>&) const override {}
        void diff(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                  const ConstMatrixRef<float>&, const ConstMatrixRef<float>&, float, MatrixRef<float>,
                  const AttentionOptions&, AttentionWorkspace<float>&) const override {}
        void dint(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                  const ConstMatrixRef<float>&, const ConstMatrixRef<float>&, float, DintIntegral, MatrixRef<float>,
                  const AttentionOptions&, AttentionWorkspace<float>&) const override {}
    } kernels;
    const DecoderModel<float> model = DecoderModel<float>::seeded(test::tiny_config(AttentionKind::diff, 32), 3);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> cache = model.make_cache(8);
    state.layer.attention.kernels = &kernels;
    CHECK_ERROR(OptionError, model.forward({1, 2, 3}, state, &cache), "MultiHeadAttention::forward",
                "a KV cache cannot be combined with the scratch's replacement kernels");
    CHECK(cache.length() == 0);
}

TEST_CASE("batched step over bad caches", "[catalogue][kv_cache]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::dint), 1);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> a = model.make_cache(8), b = model.make_cache(8), half = model.make_cache(8, KvPrecision::f16);
    model.forward({1, 2}, state, &a);
    RowMatrix<float> two(2, 32), one(1, 32);
    CHECK_ERROR(ShapeError, model.forward_batch({1, 2}, {&a}, state, two), "DecoderModel::forward_batch",
                "2 tokens but 1 caches");
    CHECK_ERROR(ShapeError, model.forward_batch({1, 2}, {&a, nullptr}, state, two), "cache 1 is null");
    CHECK_ERROR(ShapeError, model.forward_batch({1, 2}, {&a, &a}, state, two),
                "sequences 0 and 1 of the batch use the same KV cache");
    CHECK_ERROR(ShapeError, model.forward_batch({1, 2}, {&b, &half}, state, two),
                "cache 1 stores its keys and values as f16 but cache 0 as f32");
    CHECK_ERROR(ShapeError, model.forward_batch({1, 32}, {&a, &b}, state, two), "DecoderModel::forward_batch",
                "token 1 is 32, outside the vocabulary [0, 32)");
    CHECK(a.length() == 2);  // nothing was written
    CHECK(b.length() == 0);
    CHECK(half.length() == 0);
}

TEST_CASE("KV cache layer out of range", "[catalogue][kv_cache]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 1);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> cache = model.make_cache(8);
    model.forward({1, 2}, state, &cache);
    REQUIRE(model.config().num_hidden_layers == 2);
    CHECK_ERROR(ShapeError, cache.keys(2), "KvCache: layer 2 is not one of its 2 layers");
    CHECK_ERROR(ShapeError, cache.values(-1), "KvCache: layer -1 is not one of its 2 layers");
    CHECK_ERROR(ShapeError, cache.stored_values<float>(2), "KvCache: layer 2 is not one of its 2 layers");
    CHECK(cache.keys(1).rows() == 2);  // the last layer is one
}

TEST_CASE("key or value beyond the range of an f16 KV cache", "[catalogue][kv_cache]") {
    // k_proj and v_proj of layer 1 scaled by 1e6: its keys and values reach past 65504, f16's
    // largest, and would be stored as infinities (greedy decoding then gave token 0 at every step).
    // f32 and bf16 (float's range) hold them; f16 is refused naming the layer and the position, and
    // the cache is emptied.
    DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 1);
    for (Parameter<float>& p : model.parameters()) {
        if (p.name == "model.layers.1.self_attn.k_proj.weight" || p.name == "model.layers.1.self_attn.v_proj.weight") {
            p.slices.front().map() *= 1e6f;
        }
    }
    ForwardState<float> state = model.make_state(4);
    for (const KvPrecision precision : {KvPrecision::f32, KvPrecision::bf16}) {
        KvCache<float> cache = model.make_cache(8, precision);
        model.forward({1, 2}, state, &cache);
        CHECK(state.logits.topRows(2).allFinite());
    }
    KvCache<float> half = model.make_cache(8, KvPrecision::f16);
    CHECK_ERROR(OptionError, model.forward({1, 2}, state, &half), "MultiHeadAttention::forward: layer 1's key at position 0",
                "has an entry beyond the range of f16 (the KV cache's precision), which would store it as infinity",
                "use a KV cache of f32 or bf16");
    CHECK(half.length() == 0);
    // A decode step names its own position; the unscaled model fills the same cache without a word.
    const DecoderModel<float> plain = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 1);
    plain.forward({1, 2, 3}, state, &half);
    CHECK(half.length() == 3);
    CHECK_ERROR(OptionError, model.forward({4}, state, &half), "layer 1's key at position 3");
}

TEST_CASE("half-precision cache read as float", "[catalogue][kv_cache]") {
    const DecoderModel<float> model = DecoderModel<float>::seeded(tiny(AttentionKind::diff), 1);
    ForwardState<float> state = model.make_state(4);
    KvCache<float> half = model.make_cache(8, KvPrecision::f16);
    model.forward({1, 2}, state, &half);
    CHECK_ERROR(OptionError, half.keys(0), "KvCache::keys: the cache stores its keys and values as f16");
    CHECK(half.stored_keys<Eigen::half>(0).rows() == 2);
}

namespace {

/// A seeded diff model whose every weight's rows are whole blocks but SwiGLU's (hidden 64), with
/// its f32 checkpoint written to `dir`.
DecoderModel<float> write_blocked_checkpoint(const fs::path& dir) {
    ModelConfig config = test::small_config(AttentionKind::diff);
    config.hidden_size = 64;
    DecoderModel<float> model = DecoderModel<float>::seeded(config, 3);
    fs::create_directories(dir);
    model_test::write_model_dir(dir, config, model_test::tensors_of(model));
    return model;
}

}  // namespace

TEST_CASE("unknown weight format", "[catalogue][weights]") {
    CHECK_ERROR(OptionError, parse_weight_format("q5_k", "--weights"),
                "--weights must be one of f32, bf16, q8_0, q4_0, got \"q5_k\"");
}

TEST_CASE("weight a block format cannot hold", "[catalogue][weights]") {
    model_test::TempDir dir;
    DecoderModel<float> model = write_blocked_checkpoint(dir.path() / "in");
    model_test::TensorSet tensors = model_test::tensors_of(model);
    tensors.data["model.layers.1.self_attn.k_proj.weight"][64 * 3 + 10] = std::numeric_limits<float>::quiet_NaN();
    model_test::write_model_dir(dir.path() / "in", model.config(), tensors);
    CHECK_ERROR(FileError, DecoderModel<float>::load(dir.path() / "in", LoadOptions{WeightFormat::q8_0}),
                "model.safetensors", "tensor \"model.layers.1.self_attn.k_proj.weight\"",
                "weight [3, 10] = nan cannot be stored as q8_0", "65504");
    CHECK_ERROR(FileError, write_quantized_checkpoint(dir.path() / "in", dir.path() / "out", WeightFormat::q4_0),
                "weight [3, 10] = nan cannot be stored as q4_0");
    CHECK_FALSE(fs::exists(dir.path() / "out"));
    LinearWeight<float> w(1, 32, WeightFormat::q4_0);
    RowMatrix<float> big = RowMatrix<float>::Zero(1, 32);
    big(0, 7) = 6e5f;
    CHECK_ERROR(OptionError, w = big, "weight [0, 7] = 600000 cannot be stored as q4_0", "65504");
    LinearWeight<float> b(1, 32, WeightFormat::bf16);
    big(0, 7) = 3.4e38f;
    CHECK_ERROR(OptionError, b = big, "weight [0, 7]", "cannot be stored as bf16 (it would round to infinity)");
    CHECK_NOTHROW(DecoderModel<float>::load(dir.path() / "in", LoadOptions{WeightFormat::bf16}));  // keeps the NaN
}

TEST_CASE("weight whose rows are not whole blocks", "[catalogue][weights]") {
    model_test::TempDir dir;
    write_blocked_checkpoint(dir.path());
    std::vector<std::string> warnings;
    const DecoderModel<float> model = DecoderModel<float>::load(dir.path(), LoadOptions{WeightFormat::q8_0}, &warnings);
    CHECK(model.layers[0].mlp.down_proj.format() == WeightFormat::f32);
    CHECK(model.layers[0].mlp.up_proj.format() == WeightFormat::q8_0);
    REQUIRE_FALSE(warnings.empty());
    check_words(warnings.front(), {"tensor \"model.layers.0.mlp.down_proj.weight\": its rows of 48 weights are not "
                                   "whole 32-weight blocks of q8_0; stored as f32"});
    CHECK_ERROR(ShapeError, LinearWeight<float>(2, 48, WeightFormat::q4_0),
                "rows of 48 weights are not whole 32-weight blocks of q4_0");
}

TEST_CASE("block tensor that does not hold its weight", "[catalogue][weights][files]") {
    model_test::TempDir dir;
    const auto write = [&](const char* name, std::vector<Index> shape, bool quantized) {
        StreamedTensor tensor;
        tensor.name = "w";
        tensor.dtype = SafetensorsDtype::u8;
        tensor.shape = shape;
        tensor.write = [shape](TensorByteSink& sink) {
            Index bytes = 1;
            for (Index d : shape) bytes *= d;
            const std::vector<unsigned char> zeros(static_cast<std::size_t>(bytes));
            sink.write(zeros.data(), zeros.size());
        };
        std::map<std::string, std::string> metadata;
        if (quantized) metadata[kQuantizedWeightsKey] = "q8_0";
        write_safetensors_streamed(dir.path() / name, {tensor}, metadata);
        return dir.path() / name;
    };
    CHECK_ERROR(FileError, SafetensorsFile(write("plain.safetensors", {4, 2, 34}, false)),
                "tensor \"w\": dtype \"U8\" is read only as the weight blocks of a quantized checkpoint",
                "\"diffattn.weights\"");
    CHECK_ERROR(FileError, SafetensorsFile(write("odd.safetensors", {4, 2, 33}, true)),
                "U8 shape [4, 2, 33] is not [rows, blocks, 34] (q8_0 blocks) or [rows, blocks, 18] (q4_0 blocks)");
    const SafetensorsFile blocks(write("blocks.safetensors", {4, 2, 34}, true));
    CHECK_ERROR(FileError, blocks.require_tensor("w", {4, 96}),
                "tensor \"w\" has shape [4, 2, 34] (q8_0 blocks of weights [4, 64]) but shape [4, 96] is expected");
}

TEST_CASE("quantizing a quantized checkpoint again", "[catalogue][weights]") {
    model_test::TempDir dir;
    write_blocked_checkpoint(dir.path() / "in");
    write_quantized_checkpoint(dir.path() / "in", dir.path() / "q8", WeightFormat::q8_0);
    CHECK_ERROR(OptionError, DecoderModel<float>::load(dir.path() / "q8", LoadOptions{WeightFormat::q4_0}),
                "DecoderModel::load:", "holds weights quantized as q8_0; loading them as q4_0 would quantize them twice",
                "quantize the original checkpoint instead");
    CHECK_ERROR(FileError, write_quantized_checkpoint(dir.path() / "q8", dir.path() / "q4", WeightFormat::q4_0),
                "diffattn-quantize:", "is already quantized; quantize the original checkpoint");
    CHECK_NOTHROW(DecoderModel<float>::load(dir.path() / "q8", LoadOptions{WeightFormat::f32}));
}

TEST_CASE("quantized checkpoint written over a path", "[catalogue][weights][write]") {
    model_test::TempDir dir;
    write_blocked_checkpoint(dir.path() / "in");
    fs::create_directories(dir.path() / "taken");
    CHECK_ERROR(FileError, write_quantized_checkpoint(dir.path() / "in", dir.path() / "taken", WeightFormat::q8_0),
                "diffattn-quantize: \"", "taken\" already exists; give a new directory (nothing is written over)");
    CHECK_ERROR(FileError, write_quantized_checkpoint(dir.path() / "in", dir.path() / "in" / "q", WeightFormat::q8_0),
                "lies inside the model directory", "never a file of the model's folder");
    CHECK_FALSE(fs::exists(dir.path() / "in" / "q"));
}
