// tokenizer_config.json, which transformers keeps beside tokenizer.json: the bos_token and
// eos_token that name Tokenizer::bos_id() / eos_id() (docs/tokenizer.md). Other keys are ignored.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/json_reader.hpp"
#include "diffattn/text/tokenizer_json.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace diffattn::text {

/// Largest tokenizer_config.json read beside tokenizer.json (Llama 3's, with its chat template,
/// is about 50 kB).
inline constexpr std::uintmax_t max_tokenizer_config_json_bytes = std::uintmax_t(16) << 20;

/// tokenizer_config.json's bos_token and eos_token: a token string, or an object with "content".
struct TokenizerConfigJson {
    std::optional<std::string> bos_token, eos_token;
};

inline TokenizerConfigJson read_tokenizer_config_json(const nlohmann::json& json, const std::string& source) {
    const diffattn::detail::ConfigReader read(json, source);
    const auto token = [&](const char* key) -> std::optional<std::string> {
        const nlohmann::json* value = detail::find_value(json, key);
        if (value == nullptr) return std::nullopt;
        if (value->is_object()) {
            const diffattn::detail::ConfigReader object(*value, diffattn::detail::concat(source, ": ", key));
            return detail::string_value(*value, object, "content");
        }
        require<ConfigError>(value->is_string(), source, ": key \"", key,
                             "\" must be a token string or an object with \"content\", got ", value->dump());
        return value->get<std::string>();
    };
    return {token("bos_token"), token("eos_token")};
}

}  // namespace diffattn::text
