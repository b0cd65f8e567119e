// Shared by the tests/text tests: the tokenizer data files (tests/data/text/README.md) and
// small tokenizer.json builders for the bad-input and behaviour tests.
#pragma once

#include "diffattn/text/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace text_test {

inline std::string data_path(const std::string& name) { return std::string(DIFFATTN_TEST_DATA_DIR) + "/text/" + name; }

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::ostringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
}

/// The committed goldens (tools/make_tokenizer_goldens.sh).
inline const nlohmann::json& goldens() {
    static const nlohmann::json g = read_json(data_path("tokenizer_goldens.json"));
    return g;
}

/// The tokenizer.json of a golden tokenizer: its file with the listed top-level keys replaced.
inline nlohmann::json golden_tokenizer_json(const std::string& name) {
    const nlohmann::json& spec = goldens().at("tokenizers").at(name);
    nlohmann::json json = read_json(data_path(spec.at("file").get<std::string>()));
    if (spec.contains("override")) {
        for (const auto& item : spec.at("override").items()) json[item.key()] = item.value();
    }
    return json;
}

inline diffattn::text::Tokenizer golden_tokenizer(const std::string& name) {
    return diffattn::text::Tokenizer::from_json(golden_tokenizer_json(name), name);
}

/// A byte-level tokenizer.json with all 256 byte tokens (ids 0..255) and nothing else: `vocab`
/// and `merges` extend it. Pre-tokenizer: ByteLevel(use_regex true, no prefix space), decoder
/// ByteLevel, no post-processor.
inline nlohmann::json byte_tokenizer_json() {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) {
        vocab[diffattn::text::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
    }
    return {{"version", "1.0"},
            {"normalizer", nullptr},
            {"added_tokens", nlohmann::json::array()},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"}, {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
              {"merges", nlohmann::json::array()}}}};
}

/// byte_tokenizer_json with merges (each "a b", byte-level strings) and their results appended
/// to the vocabulary in order, from id 256.
inline nlohmann::json with_merges(nlohmann::json json, const std::vector<std::string>& merges) {
    auto& vocab = json["model"]["vocab"];
    for (const std::string& m : merges) {
        const std::size_t space = m.find(' ');
        const std::string merged = m.substr(0, space) + m.substr(space + 1);
        if (!vocab.contains(merged)) vocab[merged] = static_cast<int>(vocab.size());
        json["model"]["merges"].push_back(m);
    }
    return json;
}

}  // namespace text_test
