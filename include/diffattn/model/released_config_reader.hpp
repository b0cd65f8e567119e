// The checks of a released checkpoint's config.json (docs/checkpoints.md): a reader whose every
// message names the file and the family, the required and refused keys, and the rotary settings
// resolved as transformers resolves them ("Which settings": rope_scaling / rope_parameters, theta,
// llama3). Used by model/checkpoint_config.hpp for each family.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/json_reader.hpp"
#include "diffattn/layers/checkpoint_family.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/model/config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <utility>

namespace diffattn {

namespace detail {

/// `json[key]` for a message: the JSON text, or "absent".
inline std::string json_value_text(const nlohmann::json& json, const char* key) {
    const auto it = json.find(key);
    return it == json.end() ? std::string("absent") : it->dump();
}

/// A number (not a bool) at `json[key]`.
inline bool is_json_number(const nlohmann::json& json, const char* key) {
    const auto it = json.find(key);
    return it != json.end() && it->is_number();
}

/// Checks of a released checkpoint's config.json: every message starts "<source>: <family> checkpoint: ".
class ReleasedConfigReader {
public:
    ReleasedConfigReader(const nlohmann::json& json, const std::string& source, CheckpointFamily family)
        : json_(json), read_(json, source), prefix_(concat(source, ": ", to_string(family), " checkpoint: ")) {}

    const ConfigReader& read() const { return read_; }
    const nlohmann::json& json() const { return json_; }

    template <typename... Parts>
    void require(bool condition, Parts&&... parts) const {
        if (!condition) throw ConfigError(concat(prefix_, std::forward<Parts>(parts)...));
    }

    /// A finite number > 0 that must be present.
    double required_number(const char* key, const char* why) const {
        require(read_.has(key), "key \"", key, "\" is required (", why, ")");
        return read_.positive_number(key, 0.0);
    }

    /// Refuses `key` when it is true (absent or false is fine).
    void refuse_true(const char* key, const char* why) const {
        require(!read_.boolean(key, false), "key \"", key, "\" is true: ", why);
    }

    /// The resolved rotary settings (docs/checkpoints.md, "Which settings"): theta into
    /// config.rope_theta, llama3 into config.conventions.rope_scaling.
    void rope(ModelConfig& config) const {
        const nlohmann::json* dict = nullptr;
        const char* dict_key = "rope_scaling";
        for (const char* key : {"rope_scaling", "rope_parameters"}) {
            const auto it = json_.find(key);
            if (it == json_.end() || it->is_null() || (it->is_object() && it->empty())) continue;
            require(it->is_object(), "key \"", key, "\" must be an object, got ", it->dump());
            dict = &*it;
            dict_key = key;
            break;
        }
        static const nlohmann::json empty = nlohmann::json::object();
        const nlohmann::json& rope = dict != nullptr ? *dict : empty;
        const auto string_at = [&](const char* key) -> std::string {
            const auto it = rope.find(key);
            require(it->is_string(), "key \"", dict_key, ".", key, "\" must be a string, got ", it->dump());
            return it->get<std::string>();
        };
        const std::string type_key = rope.contains("rope_type") ? "rope_type" : "type";
        const std::string type = rope.contains(type_key) ? string_at(type_key.c_str()) : "default";

        // theta: the dict's, else the top level's, else 10000; both and different: refused.
        const bool inner_theta = is_json_number(rope, "rope_theta"), top_theta = read_.has("rope_theta");
        require(!rope.contains("rope_theta") || inner_theta, "key \"", dict_key, ".rope_theta\" must be a number, got ",
                json_value_text(rope, "rope_theta"));
        const double outer = read_.positive_number("rope_theta", 10000.0);
        if (inner_theta && top_theta) {
            require(rope.at("rope_theta").get<double>() == outer, "key \"rope_theta\" (", json_.at("rope_theta").dump(),
                    ") and \"", dict_key, ".rope_theta\" (", rope.at("rope_theta").dump(),
                    ") disagree (transformers 4 reads the first, 5 the second)");
        }
        config.rope_theta = inner_theta ? rope.at("rope_theta").get<double>() : outer;
        require(config.rope_theta > 0 && std::isfinite(config.rope_theta), "rope_theta must be a finite number > 0, got ",
                config.rope_theta);

        for (const nlohmann::json* where : {&rope, &json_}) {
            const auto it = where->find("partial_rotary_factor");
            if (it == where->end() || it->is_null()) continue;
            require(it->is_number() && it->get<double>() == 1.0, "key \"",
                    where == &rope ? std::string(dict_key) + "." : std::string(),
                    "partial_rotary_factor\" is ", it->dump(), ": only 1 (rotary over the whole head) is supported");
        }
        if (type == "default") return;
        require(type == "llama3", "key \"", dict_key, ".", type_key, "\" is \"", type,
                "\": only rope types \"default\" and \"llama3\" are supported");
        Llama3RopeScaling& llama3 = config.conventions.rope_scaling;
        double* fields[] = {&llama3.factor, &llama3.low_freq_factor, &llama3.high_freq_factor};
        const char* names[] = {"factor", "low_freq_factor", "high_freq_factor"};
        for (int i = 0; i < 3; ++i) {
            require(is_json_number(rope, names[i]) && rope.at(names[i]).get<double>() > 0, "llama3 key \"", dict_key, ".",
                    names[i], "\" must be a number > 0, got ", json_value_text(rope, names[i]));
            *fields[i] = rope.at(names[i]).get<double>();
        }
        require(llama3.high_freq_factor > llama3.low_freq_factor, "llama3 key \"", dict_key,
                ".high_freq_factor\" (", llama3.high_freq_factor, ") must exceed low_freq_factor (",
                llama3.low_freq_factor, ")");
        // original_max_position_embeddings: the top level's, else the dict's, else
        // max_position_embeddings; both and different: refused.
        const char* omax_key = "original_max_position_embeddings";
        const bool top = read_.has(omax_key), inner = rope.contains(omax_key) && !rope.at(omax_key).is_null();
        if (top && inner) {
            require(rope.at(omax_key) == json_.at(omax_key), "llama3 key \"", omax_key, "\" (", json_.at(omax_key).dump(),
                    ") and \"", dict_key, ".", omax_key, "\" (", rope.at(omax_key).dump(),
                    ") disagree (transformers 4 reads the second, 5 the first)");
        }
        const nlohmann::json* omax = top ? &json_.at(omax_key) : inner ? &rope.at(omax_key) : nullptr;
        const char* omax_name = top || inner ? omax_key : "max_position_embeddings";
        if (omax == nullptr && read_.has("max_position_embeddings")) omax = &json_.at("max_position_embeddings");
        require(omax != nullptr && omax->is_number_integer() && omax->get<long long>() > 0,
                "llama3 rope scaling needs a positive integer ", omax_name, ", got ",
                omax != nullptr ? omax->dump() : std::string("none (neither ") + omax_key +
                                                     " nor max_position_embeddings is given)");
        llama3.original_max_position_embeddings = static_cast<double>(omax->get<long long>());
    }

private:
    const nlohmann::json& json_;
    ConfigReader read_;
    std::string prefix_;
};

}  // namespace detail

}  // namespace diffattn
