// Reading a JSON object key by key for the configuration files (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json): each accessor checks the type
// and range of one key and throws a ConfigError naming the file (`source`), the key and the value.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace diffattn::detail {

/// Reads one JSON object key by key; errors are prefixed with `source`.
class ConfigReader {
public:
    ConfigReader(const nlohmann::json& json, std::string source) : json_(json), source_(std::move(source)) {
        require<ConfigError>(json.is_object(), source_, ": expected a JSON object, got ", json.type_name());
    }

    /// True when `key` is present and not null.
    bool has(const char* key) const {
        const auto it = json_.find(key);
        return it != json_.end() && !it->is_null();
    }

    /// Largest integer() accepted: dimensions stay in int, so that the Index products of sizes
    /// derived from them (ModelConfig::validate) cannot overflow.
    static constexpr Index max_integer = std::numeric_limits<int>::max();

    /// An integer in [minimum, max_integer]; `fallback` when absent (if required, absence is an error).
    Index integer(const char* key, Index minimum, bool required, Index fallback) const {
        if (!has(key)) {
            require<ConfigError>(!required, source_, ": missing required key \"", key, "\"");
            return fallback;
        }
        const nlohmann::json& value = json_.at(key);
        // Above the range: any number, 1e12 as much as 1099511627776 (a float is refused either way).
        const bool too_large = value.is_number_unsigned()  ? value.get<std::uint64_t>() > std::uint64_t{max_integer}
                               : value.is_number_integer() ? value.get<std::int64_t>() > max_integer
                               : value.is_number_float()   ? value.get<double>() > static_cast<double>(max_integer)
                                                           : false;
        require<ConfigError>(!too_large, source_, ": key \"", key, "\" must be an integer in [", minimum, ", ",
                             max_integer, "], got ", value.dump(), ": too large to index");
        const bool ok = value.is_number_integer() && value.get<std::int64_t>() >= minimum;
        require<ConfigError>(ok, source_, ": key \"", key, "\" must be an integer >= ", minimum, ", got ",
                             value.dump());
        return static_cast<Index>(value.get<std::int64_t>());
    }

    /// A finite number > 0; `fallback` when absent.
    double positive_number(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        const nlohmann::json& value = json_.at(key);
        const bool ok = value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() > 0;
        require<ConfigError>(ok, source_, ": key \"", key, "\" must be a finite number > 0, got ", value.dump());
        return value.get<double>();
    }

    bool boolean(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        const nlohmann::json& value = json_.at(key);
        require<ConfigError>(value.is_boolean(), source_, ": key \"", key, "\" must be true or false, got ",
                             value.dump());
        return value.get<bool>();
    }

    /// One of the spellings accepted by `parse`; `fallback` when absent (if required, an error).
    template <typename Enum, typename Parse>
    Enum choice(const char* key, Parse parse, const char* allowed, bool required, Enum fallback) const {
        if (!has(key)) {
            require<ConfigError>(!required, source_, ": missing required key \"", key, "\" (one of ", allowed, ")");
            return fallback;
        }
        const nlohmann::json& value = json_.at(key);
        Enum result = fallback;
        const bool ok = value.is_string() && parse(value.get<std::string>(), result);
        require<ConfigError>(ok, source_, ": key \"", key, "\" must be one of ", allowed, ", got ", value.dump());
        return result;
    }

    const std::string& source() const { return source_; }

private:
    const nlohmann::json& json_;
    std::string source_;
};

}  // namespace diffattn::detail
