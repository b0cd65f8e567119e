// The command line of diffattn-analyze (examples/diffattn_analyze.cpp), run as a program on the
// shipped retrieval models: its accuracy and attention figures equal the float64 PyTorch figures
// of tests/data/retrieval/expected_<kind>.json (the tolerances of tests/analysis/
// test_retrieval_models.cpp), the maps it writes are the maps its figures come from, and every
// misuse exits 2 with a message before anything is written.
//
// Not named test_*.cpp: examples/CMakeLists.txt builds it (it needs the program's path), when
// both the examples and the tests are built.
#include "../io/safetensors_test_support.hpp"
#include "../model/model_files.hpp"

#include "run_program.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using Catch::Matchers::Contains;
using cli_test::check_refused;
using cli_test::Run;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Run run_analyze(const std::vector<std::string>& args) { return cli_test::run_program(DIFFATTN_ANALYZE_EXE, args); }

std::string model_dir(const std::string& kind) { return (fs::path(DIFFATTN_MODELS_DIR) / "retrieval" / kind).string(); }
std::string episodes_file() { return (fs::path(DIFFATTN_TEST_DATA_DIR) / "retrieval" / "episodes.json").string(); }

json read_json(const fs::path& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

json expected(const std::string& kind) {
    return read_json(fs::path(DIFFATTN_TEST_DATA_DIR) / "retrieval" / ("expected_" + kind + ".json"));
}

/// The episode `index` of the set `name` of the stored episodes.
json stored_episode(const std::string& name, std::size_t index) {
    const json episodes = read_json(episodes_file());
    for (const json& set : episodes.at("sets")) {
        if (set.at("name") == name) return set.at("episodes").at(index);
    }
    FAIL("no set " << name);
    return {};
}

std::string joined(const std::vector<long>& values, const char* separator) {
    std::ostringstream out;
    for (std::size_t i = 0; i < values.size(); ++i) out << (i ? separator : "") << values[i];
    return out.str();
}

}  // namespace

TEST_CASE("diffattn-analyze: an attention set's figures and accuracy equal PyTorch's", "[examples][cli][analysis]") {
    for (const std::string kind : {"diff", "dint_causal_softmax", "diff_v2"}) {
        model_test::TempDir dir;
        const fs::path out = dir.path() / "analysis.json";
        const Run run = run_analyze({"--model", model_dir(kind), "--episodes", episodes_file(), "--set", "att_L64_depth50",
                                     "--json", out.string()});
        INFO(kind << "\n" << run.out << run.err);
        REQUIRE(run.status == 0);
        CHECK_THAT(run.out, Contains("accuracy: 40 / 40"));
        CHECK_THAT(run.out, Contains("all rows (40 rows"));
        const json got = read_json(out);
        const json want = expected(kind);
        CHECK(got.at("accuracy").at("sets").at("att_L64_depth50").at("predicted") ==
              want.at("accuracy").at("att_L64_depth50").at("predicted"));
        const json& want_layers = want.at("attention").at("att_L64_depth50").at("per_layer_head");
        const json& got_layers = got.at("sets").at("att_L64_depth50").at("per_layer_head");
        REQUIRE(got_layers.size() == want_layers.size());
        for (std::size_t l = 0; l < want_layers.size(); ++l) {
            REQUIRE(got_layers[l].size() == want_layers[l].size());
            for (std::size_t h = 0; h < want_layers[l].size(); ++h) {
                for (const auto& [name, value] : want_layers[l][h].items()) {  // every figure and its _se
                    INFO("layer " << l << " head " << h << " " << name);
                    CHECK(std::abs(got_layers[l][h].at(name).get<double>() - value.get<double>()) <=
                          64.0 * std::numeric_limits<float>::epsilon());
                }
            }
        }
    }
}

TEST_CASE("diffattn-analyze: an accuracy set is scored without attention figures", "[examples][cli][analysis]") {
    model_test::TempDir dir;
    const fs::path out = dir.path() / "analysis.json";
    const Run run = run_analyze({"--model", model_dir("softmax"), "--episodes", episodes_file(), "--set", "acc_L256_N4_R2",
                                 "--json", out.string(), "--precision", "double"});
    INFO(run.out << run.err);
    REQUIRE(run.status == 0);
    const json want = expected("softmax").at("accuracy").at("acc_L256_N4_R2");
    CHECK_THAT(run.out, Contains("accuracy: " + std::to_string(want.at("correct").get<long>()) + " / " +
                                 std::to_string(want.at("total").get<long>())));
    CHECK(run.out.find("all rows") == std::string::npos);
    const json got = read_json(out);
    CHECK(got.at("summary").is_null());
    const json& set = got.at("accuracy").at("sets").at("acc_L256_N4_R2");
    CHECK(set.at("predicted") == want.at("predicted"));
    const std::vector<double> margin = set.at("margin").get<std::vector<double>>();
    const std::vector<double> want_margin = want.at("margin").get<std::vector<double>>();
    REQUIRE(margin.size() == want_margin.size());
    for (std::size_t r = 0; r < margin.size(); ++r) CHECK(std::abs(margin[r] - want_margin[r]) <= 1e-6);
}

TEST_CASE("diffattn-analyze: --maps writes the maps the figures come from", "[examples][cli][analysis]") {
    // One stored attention episode, given as tokens with its answer and noise spans, every row kept.
    const json episode = stored_episode("att_L64_depth25", 0);
    const std::vector<long> tokens = episode.at("tokens").get<std::vector<long>>();
    const std::vector<long> answer = episode.at("answer")[0].get<std::vector<long>>();
    const std::vector<long> noise = episode.at("noise").get<std::vector<long>>();
    const long question = episode.at("score_pos")[0].get<long>();
    model_test::TempDir dir;
    const fs::path maps = dir.path() / "maps", out = dir.path() / "analysis.json";
    const Run run = run_analyze({"--model", model_dir("dint_causal_mean"), "--tokens", joined(tokens, " "), "--rows",
                                 "3," + std::to_string(question), "--answer", joined(answer, ","), "--noise",
                                 joined(noise, ","), "--maps", maps.string(), "--json", out.string()});
    INFO(run.out << run.err);
    REQUIRE(run.status == 0);
    const json figures = read_json(out).at("sequences").at(0).at("rows");
    REQUIRE(figures.size() == 2);
    for (const json& row : figures) {
        const long position = row.at("position").get<long>();
        const json map = read_json(maps / ("tokens_row" + std::to_string(position) + ".json"));
        CHECK(map.at("position") == position);
        CHECK(map.at("tokens").get<std::vector<long>>() == tokens);
        const json& layers = map.at("layers");
        REQUIRE(layers.size() == 2);
        for (std::size_t l = 0; l < layers.size(); ++l) {
            REQUIRE(layers[l].size() == 2);
            for (const json& head : layers[l]) {
                const std::vector<double> a1 = head.at("a1").get<std::vector<double>>();
                const std::vector<double> combined = head.at("combined").get<std::vector<double>>();
                REQUIRE(static_cast<long>(combined.size()) == position + 1);  // the keys a causal row sees
                REQUIRE(a1.size() == combined.size());
                double a1_sum = 0, row_sum = 0, abs_sum = 0, answer_mass = 0, answer_abs = 0;
                for (std::size_t j = 0; j < combined.size(); ++j) {
                    a1_sum += a1[j];
                    row_sum += combined[j];
                    abs_sum += std::abs(combined[j]);
                }
                for (const long j : answer) {
                    if (j > position) continue;
                    answer_mass += combined[static_cast<std::size_t>(j)];
                    answer_abs += std::abs(combined[static_cast<std::size_t>(j)]);
                }
                const json& f = row.at("per_layer_head").at(l).at(head.at("head").get<std::size_t>());
                CHECK(std::abs(a1_sum - 1.0) <= 1e-12);
                CHECK(std::abs(row_sum - f.at("row_sum").get<double>()) <= 1e-12);
                CHECK(std::abs(answer_mass - f.at("answer_mass").get<double>()) <= 1e-12);
                CHECK(std::abs(answer_abs / abs_sum - f.at("answer_share").get<double>()) <= 1e-12);
                CHECK(std::abs(answer_mass / row_sum - f.at("answer_normalised").get<double>()) <= 1e-12);
            }
        }
    }
    CHECK(fs::exists(maps / ("tokens_row" + std::to_string(question) + ".json")));
}

TEST_CASE("diffattn-analyze: misuse exits 2 with a message before anything is written", "[examples][cli][analysis]") {
    const std::string model = model_dir("diff");
    model_test::TempDir dir;
    const fs::path out = dir.path() / "out.json";
    check_refused(run_analyze({"--tokens", "0 1 2"}), {"--model DIR is required"});
    check_refused(run_analyze({"--model", model}), {"give either --tokens or --episodes"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1", "--episodes", episodes_file()}),
                  {"give either --tokens or --episodes"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1", "--set", "x"}), {"--set NAME needs --episodes"});
    check_refused(run_analyze({"--model", model, "--episodes", episodes_file(), "--rows", "1"}),
                  {"--rows, --answer and --noise go with --tokens"});
    check_refused(run_analyze({"--model", model, "--episodes", episodes_file(), "--set", "no_such_set"}),
                  {"no set named \"no_such_set\""});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 2", "--answer", "2:1"}), {"--answer", "is empty"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 2", "--noise", "1:9"}), {"--noise", "sequence of 3 tokens"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 2", "--rows", "3"}), {"--rows", "sequence of 3 tokens"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 999"}), {"999"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1", "--precision", "half"}), {"--precision must be float or double"});
    // An episodes file that is not one, and a --json or --maps path that cannot be written.
    const fs::path not_episodes = dir.path() / "not_episodes.json";
    std::ofstream(not_episodes) << "{\"format\": \"something else\"}";
    check_refused(run_analyze({"--model", model, "--episodes", not_episodes.string()}), {"not an episodes file"});
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 2", "--json", (dir.path() / "missing" / "x.json").string()}),
                  {"--json", "missing"});
    const fs::path a_file = dir.path() / "a_file";
    std::ofstream(a_file) << "x";
    check_refused(run_analyze({"--model", model, "--tokens", "0 1 2", "--maps", a_file.string(), "--json", out.string()}),
                  {"--maps"});
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(dir.path() / "missing"));
}

namespace {

/// An episodes file of one episode per set name, each of `model_dir("diff")`'s vocabulary.
void write_episodes(const fs::path& path, const std::vector<std::string>& set_names) {
    json sets = json::array();
    for (const std::string& name : set_names) {
        sets.push_back({{"name", name},
                        {"episodes", {{{"tokens", {1, 2, 3, 4, 5, 6}}, {"score_pos", {5}}, {"targets", {3}},
                                       {"answer", {{1}}}, {"noise", {2, 3}}}}}});
    }
    std::ofstream(path) << json{{"format", "diffattn-retrieval-episodes-1"}, {"sets", sets}}.dump();
}

}  // namespace

TEST_CASE("diffattn-analyze: --json and --maps replace only their own earlier outputs", "[examples][cli][analysis]") {
    // Every target is checked before anything is computed or written: a refused run leaves no file.
    const std::string model = model_dir("diff");
    model_test::TempDir dir;
    const fs::path out = dir.path() / "out.json", maps = dir.path() / "maps", episodes = dir.path() / "episodes.json";
    const fs::path notes = dir.path() / "notes.json";
    std::ofstream(notes) << "{\"mine\": true}";
    write_episodes(episodes, {"a"});
    const std::vector<std::string> tokens = {"--model", model, "--tokens", "1 2 3 4", "--rows", "all"};
    const auto with = [&](std::vector<std::string> args) {
        args.insert(args.begin(), tokens.begin(), tokens.end());
        return run_analyze(args);
    };

    check_refused(with({"--json", (fs::path(model) / "analysis.json").string()}),
                  {"--json", "is in the model's folder"});
    check_refused(with({"--json", notes.string()}), {"--json", "exists and is not an earlier output of --json"});
    CHECK(cli_test::read_all(notes) == "{\"mine\": true}");
    // A file nested 200000 levels deep in --json's place is refused, not parsed recursively (it
    // crashed the program with SIGSEGV).
    const fs::path deep = dir.path() / "deep.json";
    std::string nested;
    for (int level = 0; level < 200000; ++level) nested += "{\"a\":";
    nested += "1" + std::string(200000, '}');
    std::ofstream(deep) << nested;
    check_refused(with({"--json", deep.string()}), {"--json", "exists and is not an earlier output of --json"});
    CHECK(cli_test::read_all(deep) == nested);
    check_refused(run_analyze({"--model", model, "--episodes", episodes.string(), "--json", episodes.string()}),
                  {"--json", "is an input of this run"});
    // --json a folder after --maps: checked first, so no map is written (the maps folder not even made).
    check_refused(with({"--maps", maps.string(), "--json", dir.path().string()}), {"--json", "is a directory"});
    CHECK_FALSE(fs::exists(maps));
    // Names that a file system does not take, or two rows to one file.
    write_episodes(episodes, {std::string("model.safetensors\0x", 19)});
    check_refused(run_analyze({"--model", model, "--episodes", episodes.string(), "--maps", maps.string()}),
                  {"--maps", "\\u0000", "has a control character in its name"});
    write_episodes(episodes, {"a", std::string(300, 'x')});
    check_refused(run_analyze({"--model", model, "--episodes", episodes.string(), "--maps", maps.string()}),
                  {"--maps", "a file name takes at most 255"});
    write_episodes(episodes, {"a/b", "a_b"});
    check_refused(run_analyze({"--model", model, "--episodes", episodes.string(), "--maps", maps.string()}),
                  {"--maps", "two rows would write \"a_b_0_row5.json\""});
    CHECK_FALSE(fs::exists(maps));
    // Every row of 60000 tokens kept: over 900 GB of maps, refused before the folder is made.
    std::string many;
    for (int i = 0; i < 60000; ++i) many += "5 ";
    check_refused(run_analyze({"--model", model, "--tokens", many, "--rows", "all", "--maps", maps.string()}),
                  {"--maps: the kept maps of sequence \"tokens\" would take", "bytes of physical memory"});
    CHECK_FALSE(fs::exists(maps));
    // A map file of someone else's in the maps folder stays.
    fs::create_directories(maps);
    std::ofstream(maps / "tokens_row0.json") << "{}";
    check_refused(with({"--maps", maps.string()}), {"--maps", "tokens_row0.json", "is not an earlier output"});
    CHECK(cli_test::read_all(maps / "tokens_row0.json") == "{}");
    fs::remove(maps / "tokens_row0.json");

    // Their own earlier outputs are replaced.
    REQUIRE(with({"--maps", maps.string(), "--json", out.string()}).status == 0);
    const Run again = with({"--maps", maps.string(), "--json", out.string()});
    INFO(again.err);
    CHECK(again.status == 0);
    CHECK(read_json(out).at("format") == "diffattn-analysis-2");
    CHECK(read_json(out).at("written_by") == "diffattn-analyze --json");
    CHECK(read_json(maps / "tokens_row0.json").at("written_by") == "diffattn-analyze --maps");
    // A JSON object with a map file's members but without the mark of --maps is someone else's.
    const std::string theirs = R"({"sequence": "tokens", "attention": "diff", "position": 0, "layers": []})";
    std::ofstream(maps / "tokens_row0.json") << theirs;
    check_refused(with({"--maps", maps.string()}), {"--maps", "tokens_row0.json", "is not an earlier output of --maps"});
    CHECK(cli_test::read_all(maps / "tokens_row0.json") == theirs);
}

TEST_CASE("diffattn-analyze: --maps and --json under the model's folder are refused, nothing made", "[examples][cli][analysis]") {
    model_test::TempDir dir;
    const fs::path model = dir.path() / "model";
    fs::create_directories(model / "sub");
    for (const char* name : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(model_dir("diff")) / name, model / name);
    fs::create_directory_symlink(model, dir.path() / "link");
    const std::vector<std::string> tokens = {"--model", model.string(), "--tokens", "1 2 3 4"};
    for (const fs::path& maps : {model / "maps", model / "sub" / "maps", dir.path() / "link" / "maps",
                                 dir.path() / "x" / ".." / "model" / "maps"}) {
        std::vector<std::string> args = tokens;
        args.insert(args.end(), {"--maps", maps.string()});
        check_refused(run_analyze(args), {"--maps", "is in the model's folder"});
    }
    std::vector<std::string> args = tokens;
    args.insert(args.end(), {"--json", (model / "sub" / "out.json").string()});
    check_refused(run_analyze(args), {"--json", "is in the model's folder"});
    CHECK(io_test::entries_of(model) == std::set<std::string>{"config.json", "model.safetensors", "sub"});
    CHECK(io_test::entries_of(model / "sub").empty());
}

TEST_CASE("diffattn-analyze: a malformed episodes file is named where it is wrong", "[examples][cli][analysis]") {
    const std::string model = model_dir("diff");
    model_test::TempDir dir;
    const fs::path episodes = dir.path() / "episodes.json";
    const auto refused = [&](const json& sets, std::initializer_list<const char*> fragments) {
        std::ofstream(episodes) << json{{"format", "diffattn-retrieval-episodes-1"}, {"sets", sets}}.dump();
        const Run run = run_analyze({"--model", model, "--episodes", episodes.string()});
        check_refused(run, fragments);
        CHECK(run.err.find("json.exception") == std::string::npos);  // not nlohmann's own words
    };
    // The top level: its "format" and "sets" named, with what they hold.
    for (const auto& [doc, fragment] : std::vector<std::pair<json, const char*>>{
             {{{"format", 5}, {"sets", json::array()}}, "not an episodes file: key \"format\" must be \"diffattn-retrieval-episodes-1\", got 5"},
             {{{"format", "other-1"}, {"sets", json::array()}}, "key \"format\" must be \"diffattn-retrieval-episodes-1\", got \"other-1\""},
             {{{"sets", json::array()}}, "has no \"format\""},
             {{{"format", "diffattn-retrieval-episodes-1"}}, "has no \"sets\""},
             {{{"format", "diffattn-retrieval-episodes-1"}, {"sets", 5}}, "key \"sets\" must be a list of sets, got 5"},
             {json::array({1}), "not an episodes file: a JSON object of format diffattn-retrieval-episodes-1"}}) {
        std::ofstream(episodes) << doc.dump();
        const Run run = run_analyze({"--model", model, "--episodes", episodes.string()});
        check_refused(run, {"episodes file \"", fragment});
        CHECK(run.err.find("json.exception") == std::string::npos);
    }
    refused(json::array({5}), {"set 0 must be a JSON object, got 5"});
    refused(json::array({{{"name", 5}, {"episodes", json::array()}}}), {"set 0: \"name\" must be a string"});
    refused(json::array({{{"name", "a"}}}), {"set 0 has no \"episodes\""});
    refused(json::array({{{"name", "a"}, {"episodes", 5}}}), {"\"episodes\" must be a list of episodes"});
    refused(json::array({{{"name", "a"}, {"episodes", json::array()}}, {{"name", "a"}, {"episodes", json::array()}}}),
            {"set 1: another set is also named \"a\"; give each set its own name"});
    refused(json::array({{{"name", "a"}, {"episodes", {5}}}}), {"set \"a\" episode 0 must be a JSON object"});
    refused(json::array({{{"name", "a"}, {"episodes", {{{"score_pos", {0}}, {"targets", {1}}}}}}}),
            {"set \"a\" episode 0 has no \"tokens\""});
    const json past_end = {{"tokens", {1, 2, 3}}, {"score_pos", {3}}, {"targets", {1}}};
    refused(json::array({{{"name", "a"}, {"episodes", {past_end}}}}),
            {"episodes file \"", "\": a/0: rows[0] is query row 3, outside the sequence of 3 tokens"});
    // Over 64 MB is refused by its size before it is read (its JSON tree would take ~16x that).
    std::ofstream(episodes) << "{}";
    fs::resize_file(episodes, (std::uintmax_t(64) << 20) + 1);
    check_refused(run_analyze({"--model", model, "--episodes", episodes.string()}),
                  {"episodes file", "over the 67108864-byte limit for an episodes file"});
    // An id above the largest signed integer is named as written, not wrapped to a negative one.
    const json huge_token = {{"tokens", {18446744073709551615ULL}}, {"score_pos", {0}}, {"targets", {1}}};
    refused(json::array({{{"name", "a"}, {"episodes", {huge_token}}}}),
            {"tokens[0] is 18446744073709551615"});
}
