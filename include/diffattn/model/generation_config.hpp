// The end-of-sequence ids of a checkpoint directory (docs/checkpoints.md, "generation_config.json
// and greedy decoding"): `eos_token_id` of generation_config.json, an int or a list of ints; only
// when that file or key is absent, config.json's. transformers' generate() reads the generation
// config the same way; mlx-motif registers every id of a list.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
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

/// The ids of `eos` (an int, a list of ints, or null: none), sorted and unique; ConfigError otherwise.
inline std::vector<Token> eos_token_ids(const nlohmann::json& eos, const std::string& source) {
    std::vector<Token> ids;
    const auto add = [&](const nlohmann::json& id) {
        const bool ok = id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                        id.get<std::int64_t>() <= std::numeric_limits<Token>::max();
        require<ConfigError>(ok, source, ": key \"eos_token_id\" must be a token id (an integer >= 0) or a list of them, got ",
                             eos.dump());
        ids.push_back(static_cast<Token>(id.get<std::int64_t>()));
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

/// The end-of-sequence ids of model directory `dir`: generation_config.json's `eos_token_id`,
/// else config.json's, else none (our own format has neither). FileError / ConfigError for an
/// unreadable file or a value that is not an id or a list of ids.
inline std::vector<Token> read_eos_token_ids(const std::filesystem::path& dir) {
    for (const char* name : {"generation_config.json", "config.json"}) {
        const std::filesystem::path path = dir / name;
        std::error_code ignored;
        if (!std::filesystem::exists(path, ignored)) continue;
        const std::string source = detail::concat(name, " \"", path.string(), "\"");
        const nlohmann::json json = detail::parse_json_text(
            detail::read_text_file(path, source, max_config_json_bytes, "a config file"), source, max_config_json_depth,
            "a config file");
        require<ConfigError>(json.is_object(), source, ": expected a JSON object, got ", json.type_name());
        if (json.contains("eos_token_id")) return detail::eos_token_ids(json.at("eos_token_id"), source);
    }
    return {};
}

}  // namespace diffattn
