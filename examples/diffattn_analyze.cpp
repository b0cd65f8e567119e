// diffattn-analyze: the attention maps of a model, per layer and head, for chosen query rows
// (include/diffattn/analysis/, docs/analysis.md).
//
//   diffattn-analyze --model DIR --tokens "1 5 9 ..." [--rows 44,45 | --rows last | --rows all]
//                    [--answer 12:15] [--noise 1:12,15:40]
//   diffattn-analyze --model DIR --episodes episodes.json [--set NAME]
//   ... [--json OUT] [--maps OUT_DIR] [--precision float|double] [--threads T]
//
// Prints, per layer and head, the figures of the analysed rows (analysis/figures.hpp: the |P| share
// of answer and noise, the raw signed masses, the row sum; each a ratio of sums over the rows with
// its standard error, analysis/row_summary.hpp). --json writes every figure of every row and of
// every set, with the definitions; --maps one JSON file per kept row with its maps (A1, A2,
// DINT's integral, the combined map) per layer and head, the data for pictures. Every error
// prints a message and exits with status 2 before anything is written.
#include "diffattn/analysis/attention_analysis.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/replace_file.hpp"
#include "diffattn/io/safetensors_header.hpp"
#include "diffattn/model/decoder_model.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include "cli_support.hpp"
#include "output_files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace {

using namespace diffattn;
using namespace diffattn::analysis;
namespace fs = std::filesystem;
using cli::parse_integer;
using cli::parse_tokens;
using cli::UsageError;  // a command-line or episode-file problem: exit status 2

constexpr const char* kMeasure =
    "c = the combined map row over the keys the row may see (docs/analysis.md, The measures); "
    "answer_share = sum of |c| over the answer positions / sum of |c| over every visible key (in [0, 1]); "
    "noise_share likewise over the noise positions; answer_mass, noise_mass: sums of c, signed, raw; "
    "noise_positive, noise_negative: the noise mass's parts of each sign; row_sum = sum c; "
    "answer_normalised = answer_mass / row_sum (secondary)";
constexpr const char* kAveraging =
    "every figure of many rows i is a ratio of sums, sum_i x_i / sum_i y_i (a mean: y_i = 1), never a "
    "mean of per-row ratios; per layer the heads are pooled (x_i, y_i summed over the heads); *_se: its "
    "standard error sqrt(sum_i (x_i - R y_i)^2 / (n (n - 1))) / mean_i y_i, the n rows independent; "
    "accuracy standard_error: sqrt(p (1 - p) / total)";

struct Options {
    std::string model_dir;
    std::optional<std::string> tokens_text, rows_text, answer_text, noise_text;
    std::optional<std::string> episodes_path, set_name, json_path, maps_dir;
    int threads = 1;
    bool use_double = false;
};

void print_help(std::ostream& out) {
    out << "usage: diffattn-analyze --model DIR (--tokens \"ID ...\" [--rows R] [--answer SPANS] [--noise SPANS]\n"
           "                        | --episodes FILE [--set NAME]) [--json OUT] [--maps OUT_DIR]\n"
           "                        [--precision float|double] [--threads T] [--help]\n"
           "\n"
           "Runs the model over a token sequence (or every episode of a retrieval episode file) and\n"
           "reports, per layer and head, the attention measure of the asked query rows.\n"
           "\n"
           "  --model DIR      model directory (config.json + model.safetensors, or a released checkpoint).\n"
           "  --tokens \"...\"   token ids separated by spaces or commas.\n"
           "  --rows R         query rows: positions \"44,45\", \"last\" (default) or \"all\".\n"
           "  --answer SPANS   answer positions as half-open spans \"12:15\" (12, 13, 14), comma-separated;\n"
           "                   a single position \"12\" is allowed. Default: none.\n"
           "  --noise SPANS    noise-context positions, likewise. Default: none.\n"
           "  --episodes FILE  episodes JSON (format diffattn-retrieval-episodes-1, tools/retrieval_figures.py):\n"
           "                   every episode of every set. The rows are each episode's scored positions:\n"
           "                   the accuracy of the argmax there is printed per set, and episodes that\n"
           "                   mark answer and noise positions are analysed. --set NAME: that set only.\n"
           "  --json OUT       write every figure of every row, of every layer and head over the rows\n"
           "                   (with standard errors) and the definitions.\n"
           "  --maps OUT_DIR   write the full maps of the kept rows, one JSON file per row (created;\n"
           "                   with --episodes, the first episode of each set).\n"
           "                   --json and --maps write new files or replace the files an earlier\n"
           "                   run wrote; never a file of the model's folder or anyone else's.\n"
           "  --precision P    float (default) or double.\n"
           "  --threads T      the forward's heads on T threads (OpenMP builds).\n"
           "\n"
           "Measure: "
        << kMeasure << ".\nAveraging: " << kAveraging
        << ".\n\nExit status: 0 on success, 2 for any error (flags, files, spans or rows outside the\n"
           "sequence), before anything is written.\n";
}

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(text);
    while (std::getline(in, part, separator)) parts.push_back(part);
    return parts;
}

Options parse_arguments(int argc, char** argv) {
    Options o;
    std::optional<std::string> model;
    cli::Flags flags(argc, argv, print_help);
    while (flags.next()) {
        const std::string& flag = flags.flag();
        const auto value = [&] { return flags.value(); };
        if (flag == "--model") model = value();
        else if (flag == "--tokens") o.tokens_text = value();
        else if (flag == "--rows") o.rows_text = value();
        else if (flag == "--answer") o.answer_text = value();
        else if (flag == "--noise") o.noise_text = value();
        else if (flag == "--episodes") o.episodes_path = value();
        else if (flag == "--set") o.set_name = value();
        else if (flag == "--json") o.json_path = value();
        else if (flag == "--maps") o.maps_dir = value();
        else if (flag == "--threads") o.threads = static_cast<int>(parse_integer(flag, value(), 1, 1024));
        else if (flag == "--precision") {
            const std::string p = value();
            if (p != "float" && p != "double") throw UsageError{"--precision must be float or double, got \"" + p + "\""};
            o.use_double = p == "double";
        } else {
            throw UsageError{"unknown argument \"" + flag + "\""};
        }
    }
    if (!model) throw UsageError{"--model DIR is required"};
    o.model_dir = *model;
    if (o.tokens_text.has_value() == o.episodes_path.has_value()) throw UsageError{"give either --tokens or --episodes"};
    if (o.episodes_path && (o.rows_text || o.answer_text || o.noise_text)) {
        throw UsageError{"--rows, --answer and --noise go with --tokens; an episode file marks its own"};
    }
    if (o.set_name && !o.episodes_path) throw UsageError{"--set NAME needs --episodes"};
    return o;
}

/// Positions of "12:15,20" (half-open spans and single positions) inside a sequence of n tokens.
std::vector<Index> parse_spans(const std::string& flag, const std::string& text, Index n) {
    std::set<Index> positions;
    for (const std::string& span : split(text, ',')) {
        const std::size_t colon = span.find(':');
        const std::string what = flag + " span \"" + span + "\" (of a sequence of " + std::to_string(n) + " tokens)";
        const Index begin = parse_integer(what, span.substr(0, colon), 0, n - 1);
        const Index end = colon == std::string::npos ? begin + 1 : parse_integer(what + " end", span.substr(colon + 1), 0, n);
        if (end <= begin) throw UsageError{what + " is empty: its end must be after its start"};
        for (Index j = begin; j < end; ++j) positions.insert(j);
    }
    if (positions.empty()) throw UsageError{flag + ": no span in \"" + text + "\""};
    return {positions.begin(), positions.end()};
}

std::vector<Index> parse_rows(const std::string& text, Index n) {
    if (text == "last") return {n - 1};
    std::vector<Index> rows;
    if (text == "all") {
        for (Index r = 0; r < n; ++r) rows.push_back(r);
        return rows;
    }
    for (const std::string& part : split(text, ',')) rows.push_back(parse_integer("--rows: row \"" + part + "\" (of a sequence of " + std::to_string(n) + " tokens)", part, 0, n - 1));
    std::sort(rows.begin(), rows.end());
    if (std::adjacent_find(rows.begin(), rows.end()) != rows.end()) throw UsageError{"--rows: a row is given twice in \"" + text + "\""};
    if (rows.empty()) throw UsageError{"--rows: no rows in \"" + text + "\""};
    return rows;
}

/// One sequence to analyse: its tokens, rows, and (episodes) the expected ids at the rows.
struct Sequence {
    std::string name;  // "tokens", or "<set>/<episode index>"
    std::string set;
    std::vector<Token> tokens;
    std::vector<AnalysisRow> rows;
    std::vector<Token> targets;  // episodes: the expected next token at each row
    bool marked = true;          // rows carry answer and noise positions (else: accuracy only)
};

Index json_index(const nlohmann::json& j, const std::string& where) {
    if (!j.is_number_integer()) throw UsageError{where + " must be an integer, got " + j.dump()};
    // An unsigned JSON number above the largest Index would wrap to a negative one.
    const auto largest = static_cast<std::uint64_t>(std::numeric_limits<Index>::max());
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > largest) {
        throw UsageError{where + " is " + j.dump() + ", far outside any sequence or vocabulary"};
    }
    return j.get<Index>();
}

/// Member `key` of the JSON object `j` of an episodes file; UsageError naming `where` when `j` is
/// not an object or has no such member.
const nlohmann::json& json_member(const nlohmann::json& j, const char* key, const std::string& where) {
    if (!j.is_object()) throw UsageError{where + " must be a JSON object, got " + detail::brief_json(j)};
    const auto found = j.find(key);
    if (found == j.end()) throw UsageError{where + " has no \"" + key + "\""};
    return *found;
}

std::vector<Index> json_positions(const nlohmann::json& j, const std::string& where) {
    if (!j.is_array()) throw UsageError{where + " must be a list of positions"};
    std::vector<Index> out;
    for (std::size_t i = 0; i < j.size(); ++i) out.push_back(json_index(j[i], where + "[" + std::to_string(i) + "]"));
    return out;
}

/// The largest episodes file read: 64 MB (the shipped evaluation episodes are 0.4 MB), as its JSON
/// tree takes up to ~16x the file's bytes.
constexpr std::uintmax_t kMaxEpisodesFileBytes = std::uintmax_t(64) << 20;

/// The episodes of an episode file (format diffattn-retrieval-episodes-1). Episodes that mark
/// answer and noise positions are analysed at their scored rows; the others (accuracy sets) only
/// score the argmax there.
std::vector<Sequence> read_episodes(const Options& o, Index vocab_size) {
    const std::string source = "episodes file \"" + *o.episodes_path + "\"";
    const nlohmann::json doc = detail::parse_json_text<FileError>(
        detail::read_text_file(*o.episodes_path, source, kMaxEpisodesFileBytes, "an episodes file"), source, 16,
        "an episodes file");
    constexpr const char* kFormat = "diffattn-retrieval-episodes-1";
    if (!doc.is_object()) {
        throw UsageError{source + ": not an episodes file: a JSON object of format " + kFormat +
                         " with \"sets\" is expected, got " + detail::brief_json(doc)};
    }
    const nlohmann::json& format = json_member(doc, "format", source);
    if (!format.is_string() || format.get<std::string>() != kFormat) {
        throw UsageError{source + ": not an episodes file: key \"format\" must be \"" + kFormat + "\", got " +
                         detail::brief_json(format)};
    }
    const nlohmann::json& sets = json_member(doc, "sets", source);
    if (!sets.is_array()) {
        throw UsageError{source + ": not an episodes file: key \"sets\" must be a list of sets, got " +
                         detail::brief_json(sets)};
    }
    std::vector<Sequence> out;
    bool set_found = false;
    std::set<std::string> set_names;
    for (std::size_t set_index = 0; set_index < sets.size(); ++set_index) {
        const nlohmann::json& set = sets[set_index];
        const std::string set_where = source + ": set " + std::to_string(set_index);
        if (!set.is_object()) throw UsageError{set_where + " must be a JSON object, got " + detail::brief_json(set)};
        const auto name_entry = set.find("name");
        if (name_entry != set.end() && !name_entry->is_string()) {
            throw UsageError{set_where + ": \"name\" must be a string, got " + detail::brief_json(*name_entry)};
        }
        const std::string name = name_entry != set.end() ? name_entry->get<std::string>() : std::string();
        // Sets are reported, averaged and named in --maps files by name: two of one name would merge.
        if (!set_names.insert(name).second) {
            throw UsageError{set_where + ": another set is also named " + detail::quote_json(name) +
                             "; give each set its own name"};
        }
        if (o.set_name && name != *o.set_name) continue;
        set_found = true;
        const nlohmann::json& episodes = json_member(set, "episodes", set_where);
        if (!episodes.is_array()) throw UsageError{set_where + ": \"episodes\" must be a list of episodes"};
        for (std::size_t e = 0; e < episodes.size(); ++e) {
            const nlohmann::json& ep = episodes[e];
            const std::string where = source + ": set \"" + name + "\" episode " + std::to_string(e);
            const bool marked = ep.is_object() && ep.contains("answer") && ep.contains("noise");
            Sequence s{name + "/" + std::to_string(e), name, {}, {}, {}, marked};
            for (const Index t : json_positions(json_member(ep, "tokens", where), where + " tokens")) {
                if (t < 0 || t >= vocab_size) throw UsageError{where + ": token id " + std::to_string(t) + " outside the vocabulary"};
                s.tokens.push_back(static_cast<Token>(t));
            }
            const std::vector<Index> score = json_positions(json_member(ep, "score_pos", where), where + " score_pos");
            const std::vector<Index> targets = json_positions(json_member(ep, "targets", where), where + " targets");
            const nlohmann::json no_answers = nlohmann::json::array();
            const nlohmann::json& answers = marked ? ep["answer"] : no_answers;
            if (targets.size() != score.size() || score.empty() ||
                (marked && (!answers.is_array() || answers.size() != score.size()))) {
                throw UsageError{where + ": score_pos, targets (and answer) must have one entry per question"};
            }
            const std::vector<Index> noise =
                marked ? json_positions(ep["noise"], where + " noise") : std::vector<Index>{};
            for (std::size_t r = 0; r < score.size(); ++r) {
                s.rows.push_back(AnalysisRow{score[r], marked ? json_positions(answers[r], where + " answer") : std::vector<Index>{},
                                             noise, false});
                if (targets[r] < 0 || targets[r] >= vocab_size) {
                    throw UsageError{where + ": target id " + std::to_string(targets[r]) + " outside the vocabulary"};
                }
                s.targets.push_back(static_cast<Token>(targets[r]));
            }
            out.push_back(std::move(s));
        }
    }
    if (o.set_name && !set_found) throw UsageError{source + ": no set named \"" + *o.set_name + "\""};
    if (out.empty()) throw UsageError{source + ": no episodes"};
    return out;
}

/// Every figure of one row, and the sums of its measure that are no figure of their own.
nlohmann::json figures_json(const HeadRowFigures& f) {
    nlohmann::json j = nlohmann::json::object();
    for (const FigureInfo& info : figure_list()) j[info.name] = figure_of(info.figure, f);
    const RowMeasure& m = f.measure;
    j["answer_positive"] = m.answer_positive;
    j["answer_negative"] = m.answer_negative;
    j["negative_abs"] = m.negative_abs;
    j["negatives"] = m.negatives;
    j["visible"] = m.visible;
    return j;
}

/// Every figure of (layer, head) of `summary` (head -1: the layer) and its standard error.
nlohmann::json estimates_json(const RowSummary& summary, Index layer, Index head) {
    nlohmann::json j = nlohmann::json::object();
    for (const FigureInfo& info : figure_list()) {
        const Estimate e = summary.estimate(layer, head, info.figure);
        j[info.name] = e.value;
        j[std::string(info.name) + "_se"] = e.standard_error;
    }
    return j;
}

nlohmann::json summary_json(const RowSummary& summary) {
    nlohmann::json layers = nlohmann::json::array(), heads = nlohmann::json::array();
    for (Index l = 0; l < summary.layers(); ++l) {
        layers.push_back(estimates_json(summary, l, -1));
        nlohmann::json row = nlohmann::json::array();
        for (Index h = 0; h < summary.heads(); ++h) row.push_back(estimates_json(summary, l, h));
        heads.push_back(row);
    }
    return {{"rows", summary.rows()}, {"per_layer", layers}, {"per_layer_head", heads}};
}

/// The definition of every figure, by name.
nlohmann::json definitions_json() {
    nlohmann::json j = nlohmann::json::object();
    for (const FigureInfo& info : figure_list()) j[info.name] = info.definition;
    return j;
}

std::vector<double> as_vector(const Vector<double>& v) { return {v.data(), v.data() + v.size()}; }

/// The mark of a flag's files (output_files.hpp): "diffattn-analyze --json" / "--maps".
std::string output_mark(const char* flag) { return std::string("diffattn-analyze ") + flag; }

/// Writes `j` to `path` (checked by check_output_file first) with the mark of `flag` (which starts
/// any message), complete or not at all.
void write_json(const char* flag, const fs::path& path, nlohmann::json j) {
    j[cli::kWrittenByKey] = output_mark(flag);
    const std::string text = j.dump(1) + "\n";
    detail::ReplacingFile file(path, flag);
    file.write(text.data(), text.size());
    file.commit();
}

/// The file --maps writes for row `position` of `s`: "<name>_row<position>.json", each "/" of the
/// name (an episode is "<set>/<index>") as "_".
std::string map_file_name(const Sequence& s, Index position) {
    std::string file = s.name + "_row" + std::to_string(position) + ".json";
    std::replace(file.begin(), file.end(), '/', '_');
    return file;
}

/// Checks every file --json and --maps will write, before anything is computed or written, then
/// makes the --maps folder. `map_entries`: the numbers of every map file (kept_map_entries).
void prepare_outputs(const Options& o, const std::vector<Sequence>& sequences, long double map_entries) {
    std::vector<fs::path> inputs{o.model_dir};
    if (o.episodes_path) inputs.emplace_back(*o.episodes_path);
    if (o.json_path) cli::check_output_file("--json", *o.json_path, inputs, cli::is_earlier_json_output, output_mark("--json"));
    if (!o.maps_dir) return;
    const fs::path maps(*o.maps_dir);
    if (cli::is_in_or_under(maps, o.model_dir)) {  // before it is made: not even a folder of its own there
        throw UsageError{"--maps: \"" + maps.string() + "\" is in the model's folder \"" + o.model_dir +
                         "\", which is only read; write elsewhere"};
    }
    std::error_code error;
    const fs::file_status status = fs::status(maps, error);
    if (status.type() != fs::file_type::not_found && status.type() != fs::file_type::directory) {
        throw UsageError{"--maps: \"" + maps.string() + "\" is not a folder"};
    }
    // At least 16 bytes per number as written (its digits, a comma, a line break and indentation).
    const fs::path existing = status.type() == fs::file_type::directory ? maps : maps.parent_path();
    const fs::space_info space = fs::space(existing.empty() ? fs::path(".") : existing, error);
    if (!error && 16 * map_entries > static_cast<long double>(space.available)) {
        throw UsageError{"--maps: the map files would take at least " + detail::byte_count_text(16 * map_entries) +
                         " bytes, more than the " + std::to_string(space.available) + " bytes free on its file system"};
    }
    std::set<std::string> files;
    for (const Sequence& s : sequences) {
        for (const AnalysisRow& row : s.rows) {
            if (!row.keep_maps) continue;
            const std::string file = map_file_name(s, row.position);
            if (!files.insert(file).second) {
                throw UsageError{"--maps: two rows would write \"" + file + "\" (sequence \"" + s.name +
                                 "\"): give the sets names that differ after \"/\" becomes \"_\""};
            }
            cli::check_output_file("--maps", maps / file, inputs, cli::is_earlier_json_output, output_mark("--maps"), maps);
            if (o.json_path && fs::path(*o.json_path).lexically_normal() == (maps / file).lexically_normal()) {
                throw UsageError{"--json: \"" + *o.json_path + "\" is also a file of --maps"};
            }
        }
    }
    fs::create_directories(maps, error);
    if (error || !fs::is_directory(maps)) throw UsageError{"--maps: cannot make the folder \"" + maps.string() + "\""};
}

/// The table of a summary: per layer (its heads pooled) and head, the |P| shares with their
/// standard errors, the raw signed masses, the row sum, the normalised answer and H(A1).
void print_summary(const std::string& title, const RowSummary& summary) {
    std::cout << title << " (" << summary.rows() << " rows; ratios of sums over the rows +- standard error; "
              << "layer \"all\": its heads pooled)\n"
              << "  layer head  answer_share +- se   noise_share +- se   answer   noise+   noise-  row_sum"
                 "  answer/S  H(A1)\n"
              << std::fixed;
    const auto value = [&](Index l, Index h, Figure f, int width, int digits) {
        std::cout << std::setw(width) << std::setprecision(digits) << summary.estimate(l, h, f).value;
    };
    for (Index l = 0; l < summary.layers(); ++l) {
        for (Index h = -1; h < summary.heads(); ++h) {
            std::cout << "  " << std::setw(5) << l << " " << std::setw(4) << (h < 0 ? std::string("all") : std::to_string(h));
            for (const Figure f : {Figure::answer_share, Figure::noise_share}) {
                const Estimate e = summary.estimate(l, h, f);
                std::cout << std::setw(10) << std::setprecision(4) << e.value << " +- " << std::setw(6) << e.standard_error;
            }
            value(l, h, Figure::answer_mass, 9, 4);
            value(l, h, Figure::noise_positive, 9, 4);
            value(l, h, Figure::noise_negative, 9, 4);
            value(l, h, Figure::row_sum, 9, 4);
            value(l, h, Figure::answer_normalised, 10, 4);
            value(l, h, Figure::entropy_a1, 7, 2);
            std::cout << "\n";
        }
    }
}

/// The argmax predictions of a set's scored rows against their targets.
struct SetScore {
    Index correct = 0;
    std::vector<Index> predicted;
    std::vector<double> margin;  // top-1 minus top-2 logit of each row

    void add(Index id, Token target, double row_margin) {
        correct += id == target ? 1 : 0;
        predicted.push_back(id);
        margin.push_back(row_margin);
    }
    Index total() const { return static_cast<Index>(predicted.size()); }
    double accuracy() const { return static_cast<double>(correct) / static_cast<double>(total()); }
    /// sqrt(p (1 - p) / total): the rows taken as independent (two questions of one episode are not quite).
    double standard_error() const { return std::sqrt(accuracy() * (1 - accuracy()) / static_cast<double>(total())); }
    nlohmann::json json() const {
        return {{"correct", correct},   {"total", total()},           {"accuracy", accuracy()},
                {"standard_error", standard_error()}, {"predicted", predicted}, {"margin", margin}};
    }
};

template <typename T>
int run(const Options& o) {
    std::vector<std::string> warnings;
    const DecoderModel<T> model = DecoderModel<T>::load(o.model_dir, &warnings);
    for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
    const ModelConfig& config = model.config();

    // Every input is read and checked before anything is computed or written.
    std::vector<Sequence> sequences;
    if (o.tokens_text) {
        Sequence s{"tokens", "tokens", parse_tokens(*o.tokens_text, config.vocab_size), {}, {}};
        const Index n = static_cast<Index>(s.tokens.size());
        const std::vector<Index> answer = o.answer_text ? parse_spans("--answer", *o.answer_text, n) : std::vector<Index>{};
        const std::vector<Index> noise = o.noise_text ? parse_spans("--noise", *o.noise_text, n) : std::vector<Index>{};
        const bool keep_maps = o.maps_dir.has_value();  // kept for --maps only: a long --rows all takes memory
        for (const Index r : parse_rows(o.rows_text.value_or("last"), n)) {
            s.rows.push_back(AnalysisRow{r, answer, noise, keep_maps});
        }
        sequences.push_back(std::move(s));
    } else {
        sequences = read_episodes(o, config.vocab_size);
        std::set<std::string> first_of_set;
        for (Sequence& s : sequences) {
            if (o.maps_dir && s.marked && first_of_set.insert(s.set).second) {
                for (AnalysisRow& row : s.rows) row.keep_maps = true;
            }
        }
    }
    Index max_len = 1;
    for (const Sequence& s : sequences) {
        max_len = std::max<Index>(max_len, static_cast<Index>(s.tokens.size()));
        try {
            check_rows(s.name.c_str(), s.rows, static_cast<Index>(s.tokens.size()));  // "<name>: rows[r] ..."
        } catch (const Error& e) {
            const std::string source = o.episodes_path ? "episodes file \"" + *o.episodes_path + "\": " : "";
            throw UsageError{source + e.what()};
        }
    }
    // The kept maps: one sequence's in memory at a time, every sequence's in the --maps files.
    long double map_entries = 0;
    for (const Sequence& s : sequences) {
        const Index n = static_cast<Index>(s.tokens.size());
        const std::string what = "--maps: the kept maps of sequence \"" + s.name + "\"";
        map_entries += AttentionAnalyzer<T>::require_kept_maps_fit(config, s.rows, n, what);
    }
    prepare_outputs(o, sequences, map_entries);

    int threads = o.threads;
#if !defined(DIFFATTN_HAS_OPENMP)
    threads = 1;
#endif
    AttentionAnalyzer<T> analyzer(config, max_len, threads);
    AnalysisResult result;
    RowSummary all;                            // rows that mark answer and noise positions
    std::map<std::string, RowSummary> per_set; // ... per set
    std::map<std::string, SetScore> scores;    // episodes: the argmax at the scored rows, per set
    nlohmann::json sequences_json = nlohmann::json::array();
    const std::vector<AnalysisRow> no_rows;    // accuracy-only episodes: the forward alone
    for (const Sequence& s : sequences) {
        analyzer.run(model, s.tokens, s.marked ? s.rows : no_rows, result);
        if (s.marked) {
            all.add(result);
            per_set[s.set].add(result);
        }
        nlohmann::json seq = {{"name", s.name}, {"tokens", s.tokens.size()}, {"lambda", result.lambda}};
        nlohmann::json rows = nlohmann::json::array();
        const ConstMatrixRef<T> logits = analyzer.logits(static_cast<Index>(s.tokens.size()));
        for (std::size_t r = 0; r < s.rows.size(); ++r) {
            const auto row_logits = logits.row(s.rows[r].position);
            const std::vector<Index> top = top_logits(row_logits, 2);
            const Index id = top.front();
            // top1 - top2: how far the row is from a tie (a near-tie may flip between precisions).
            const double margin = top.size() > 1 ? static_cast<double>(row_logits(top[0])) - static_cast<double>(row_logits(top[1]))
                                                 : std::numeric_limits<double>::infinity();
            rows.push_back({{"position", s.rows[r].position}, {"predicted", id}, {"margin", margin}});
            if (!s.targets.empty()) {
                rows.back()["target"] = s.targets[r];
                scores[s.set].add(id, s.targets[r], margin);
            }
            if (!s.marked) continue;
            nlohmann::json layers = nlohmann::json::array();
            for (Index l = 0; l < result.n_layers; ++l) {
                nlohmann::json heads = nlohmann::json::array();
                for (Index h = 0; h < result.n_heads; ++h) heads.push_back(figures_json(result.at(l, h, static_cast<Index>(r))));
                layers.push_back(heads);
            }
            rows.back()["per_layer_head"] = layers;
        }
        seq["rows"] = rows;
        sequences_json.push_back(seq);
        if (o.maps_dir) {
            for (std::size_t r = 0; r < s.rows.size(); ++r) {
                if (!s.rows[r].keep_maps) continue;
                nlohmann::json layers = nlohmann::json::array();
                for (Index l = 0; l < result.n_layers; ++l) layers.push_back(nlohmann::json::array());
                for (const KeptMaps& m : result.maps) {
                    if (m.row != static_cast<Index>(r)) continue;
                    layers[static_cast<std::size_t>(m.layer)].push_back(
                        {{"head", m.head}, {"weight", result.at(m.layer, m.head, m.row).weight}, {"a1", as_vector(m.a1)},
                         {"a2", as_vector(m.a2)}, {"integral", as_vector(m.integral)}, {"combined", as_vector(m.combined)}});
                }
                write_json("--maps", fs::path(*o.maps_dir) / map_file_name(s, s.rows[r].position),
                           {{"sequence", s.name}, {"attention", to_string(config.attention)}, {"position", s.rows[r].position},
                            {"tokens", s.tokens}, {"answer", s.rows[r].answer}, {"noise", s.rows[r].noise},
                            {"lambda", result.lambda}, {"layers", layers}});
            }
        }
    }

    std::cout << "model: " << o.model_dir << " (attention " << to_string(config.attention) << ", "
              << config.num_hidden_layers << " layers, " << config.num_attention_heads << " heads)\n"
              << "sequences: " << sequences.size() << ", rows: " << all.rows() << "\n"
              << "measure: " << kMeasure << "\n";
    std::vector<std::string> set_order;  // the sets in the order of the file
    for (const Sequence& s : sequences) {
        if (std::find(set_order.begin(), set_order.end(), s.set) == set_order.end()) set_order.push_back(s.set);
    }
    Index correct = 0, questions = 0;  // over every set
    for (const auto& [name, score] : scores) {
        correct += score.correct;
        questions += score.total();
    }
    if (questions > 0) {
        std::cout << "accuracy: " << correct << " / " << questions << "\n";
        if (scores.size() > 1) {
            std::cout << "accuracy per set (argmax at the scored rows; +- standard error):\n";
            for (const std::string& name : set_order) {
                const SetScore& score = scores.at(name);
                std::cout << "  " << std::left << std::setw(24) << name << std::right << std::setw(5) << score.correct
                          << " / " << std::setw(4) << score.total() << std::fixed << std::setprecision(3)
                          << std::setw(8) << score.accuracy() << " +- " << std::setw(5) << score.standard_error()
                          << "\n";
            }
        }
    }
    for (const std::string& name : set_order) {
        if (per_set.size() > 1 && per_set.count(name) > 0) print_summary("set " + name, per_set.at(name));
    }
    if (all.rows() > 0) print_summary("all rows", all);

    if (o.json_path) {
        nlohmann::json sets = nlohmann::json::object();
        for (const auto& [name, summary] : per_set) sets[name] = summary_json(summary);
        nlohmann::json accuracy_sets = nlohmann::json::object();
        for (const auto& [name, score] : scores) accuracy_sets[name] = score.json();
        nlohmann::json doc = {{"format", "diffattn-analysis-2"},
                              {"model", o.model_dir},
                              {"attention", to_string(config.attention)},
                              {"precision", std::is_same_v<T, double> ? "double" : "float"},
                              {"measure", kMeasure},
                              {"averaging", kAveraging},
                              {"figures", definitions_json()},
                              {"summary", all.rows() > 0 ? summary_json(all) : nlohmann::json()},
                              {"sets", sets},
                              {"sequences", sequences_json}};
        if (questions > 0) {
            doc["accuracy"] = {{"correct", correct}, {"total", questions}, {"sets", accuracy_sets}};
        }
        write_json("--json", *o.json_path, doc);
        std::cout << "wrote " << *o.json_path << "\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return cli::run_main("diffattn-analyze", [&] {
        const Options options = parse_arguments(argc, argv);
        return options.use_double ? run<double>(options) : run<float>(options);
    });
}
