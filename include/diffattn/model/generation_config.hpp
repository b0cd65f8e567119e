// The end-of-sequence ids of a checkpoint directory (docs/checkpoints.md, "generation_config.json
// and greedy decoding"): `eos_token_id` of generation_config.json, an int or a list of ints; only
// when that file or key is absent, config.json's. transformers' generate() reads the generation
// config the same way; mlx-motif registers every id of a list.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/safetensors_header.hpp"
#include "diffattn/model/config_json.hpp"
#include "diffattn/model/decoder_model.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace diffattn {

namespace detail {

/// The ids of `eos` (an int, a list of ints, or null: none), sorted and unique; ConfigError naming
/// `source` otherwise, or for an id outside the vocabulary [0, vocab_size) (an id the model can
/// never produce would never stop a generation). Linear in the list's length: the list is printed
/// only for a message.
inline std::vector<Token> eos_token_ids(const nlohmann::json& eos, const std::string& source, Index vocab_size) {
    std::vector<Token> ids;
    const auto add = [&](const nlohmann::json& id) {
        const bool ok = id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                        id.get<std::int64_t>() <= std::numeric_limits<Token>::max();
        if (!ok) {
            throw ConfigError(detail::concat(source, ": key \"eos_token_id\" must be a token id (an integer >= 0) or a list of ",
                                     "them, got ", brief_json(eos)));
        }
        const std::int64_t value = id.get<std::int64_t>();
        require<ConfigError>(value < vocab_size, source, ": key \"eos_token_id\" names id ", value,
                             ", outside the model's vocabulary [0, ", vocab_size, ")");
        ids.push_back(static_cast<Token>(value));
    };
    if (eos.is_array()) {
        for (const nlohmann::json& id : eos) add(id);
    } else if (!eos.is_null()) {
        add(eos);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

}  // namespace detail

/// The end-of-sequence ids of model directory `dir` for a model of `vocab_size` tokens:
/// generation_config.json's `eos_token_id`, else config.json's, else none (our own format has
/// neither). FileError / ConfigError for an unreadable file (a generation_config.json that is a
/// dangling link included), a value that is not an id or a list of ids, or an id outside the
/// vocabulary.
inline std::vector<Token> read_eos_token_ids(const std::filesystem::path& dir, Index vocab_size) {
    for (const char* name : {"generation_config.json", "config.json"}) {
        const std::filesystem::path path = dir / name;
        const std::string source = detail::concat(name, " \"", path.string(), "\"");
        if (!detail::optional_file_present(path, source)) continue;
        const nlohmann::json json = detail::parse_json_text(
            detail::read_text_file(path, source, max_config_json_bytes, "a config file"), source, max_config_json_depth,
            "a config file");
        require<ConfigError>(json.is_object(), source, ": expected a JSON object, got ", json.type_name());
        if (json.contains("eos_token_id")) return detail::eos_token_ids(json.at("eos_token_id"), source, vocab_size);
    }
    return {};
}

}  // namespace diffattn
