// tokenizer.json -> the parts of a Tokenizer, for the
// subset Llama 3, DiffLlama and Motif use (docs/tokenizer.md lists it). Anything outside it is a
// ConfigError naming the file and the key, never a tokenizer that encodes differently.
//
//   model           BPE: vocab, merges ("a b" strings or [a, b] arrays), ignore_merges;
//                   byte_fallback false, no dropout, no subword prefix / suffix
//   normalizer      null            truncation, padding   null
//   pre_tokenizer   Split(Regex or String, Isolated, invert false) and ByteLevel, alone or in a
//                   Sequence whose last step is its one ByteLevel
//   post_processor  null, ByteLevel, TemplateProcessing ("single" only: $A and special tokens),
//                   or a Sequence of them with at most one TemplateProcessing
//   decoder         ByteLevel
//   added_tokens    id, content, special, single_word, lstrip, rstrip, normalized
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/io/json_reader.hpp"
#include "diffattn/text/added_tokens.hpp"
#include "diffattn/text/pre_tokenizer.hpp"
#include "diffattn/text/tokenizer_limits.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace diffattn::text {

/// The parts of a tokenizer.json, read and checked key by key.
struct TokenizerJson {
    std::vector<std::pair<std::string, std::int32_t>> vocab;    // model.vocab
    std::vector<std::pair<std::string, std::string>> merges;    // model.merges, highest priority first
    bool ignore_merges = false;                                 // model.ignore_merges
    std::vector<AddedToken> added_tokens;                       // added_tokens
    std::vector<PreTokenizerStep> pre_tokenizer;                // pre_tokenizer, flattened
    std::vector<std::int32_t> prefix, suffix;                   // post_processor: ids around $A
};

namespace detail {

using diffattn::detail::ConfigReader;
using Json = nlohmann::json;

/// The value of `key` in `object`, or null when it is absent or JSON null.
inline const Json* find_value(const Json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
}

/// The string at `key` of an object read by `read` (required).
inline std::string string_value(const Json& object, const ConfigReader& read, const char* key) {
    const Json* value = find_value(object, key);
    require<ConfigError>(value != nullptr, read.source(), ": missing required key \"", key, "\"");
    require<ConfigError>(value->is_string(), read.source(), ": key \"", key, "\" must be a string, got ",
                         value->type_name());
    return value->get<std::string>();
}

/// The array at `key` (required).
inline const Json& array_value(const Json& object, const ConfigReader& read, const char* key) {
    const Json* value = find_value(object, key);
    require<ConfigError>(value != nullptr, read.source(), ": missing required key \"", key, "\"");
    require<ConfigError>(value->is_array(), read.source(), ": key \"", key, "\" must be an array, got ",
                         value->type_name());
    return *value;
}

/// The "type" of the component object `read` reads, which must be one of `allowed` ("A, B, C").
inline std::string component_type(const ConfigReader& read, std::string_view allowed) {
    const auto parse = [allowed](const std::string& type, std::string& out) {
        for (std::size_t begin = 0; begin <= allowed.size();) {
            const std::size_t end = std::min(allowed.find(", ", begin), allowed.size());
            if (allowed.substr(begin, end - begin) == type) {
                out = type;
                return true;
            }
            begin = end + 2;
        }
        return false;
    };
    return read.choice<std::string>("type", parse, std::string(allowed).c_str(), true, std::string());
}

/// A key that must be absent or null: the feature it turns on is not supported.
inline void require_null(const Json& object, const ConfigReader& read, const char* key, const char* why) {
    const Json* value = find_value(object, key);
    if (value == nullptr) return;
    const Json* type = value->is_object() ? find_value(*value, "type") : nullptr;
    throw ConfigError(diffattn::detail::concat(read.source(), ": key \"", key, "\" must be null (", why, "), got ",
                                               type != nullptr ? "one of type " + type->dump() : value->dump()));
}

inline std::string escape_literal(const std::string& literal) {
    std::string out;
    for (const char c : literal) {
        if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) out += '\\';
        out += c;
    }
    return out;
}

inline void read_model(const Json& json, const std::string& source, TokenizerJson& out) {
    const Json* model = find_value(json, "model");
    require<ConfigError>(model != nullptr, source, ": missing required key \"model\"");
    const ConfigReader read(*model, source + ": model");
    component_type(read, "BPE");
    if (const Json* dropout = find_value(*model, "dropout")) {
        require<ConfigError>(dropout->is_number() && dropout->get<double>() == 0, read.source(),
                             ": key \"dropout\" must be null or 0 (BPE dropout makes encoding random), got ",
                             dropout->dump());
    }
    require<ConfigError>(!read.boolean("byte_fallback", false), read.source(),
                         ": key \"byte_fallback\" must be false (diffattn's byte-level BPE needs no fallback)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const Json* affix = find_value(*model, key);
        require<ConfigError>(affix == nullptr || (affix->is_string() && affix->get<std::string>().empty()),
                             read.source(), ": key \"", key, "\" must be null (not supported), got ",
                             affix == nullptr ? std::string() : affix->dump());
    }
    out.ignore_merges = read.boolean("ignore_merges", false);

    const Json* vocab = find_value(*model, "vocab");
    require<ConfigError>(vocab != nullptr, read.source(), ": missing required key \"vocab\"");
    require<ConfigError>(vocab->is_object(), read.source(), ": key \"vocab\" must be an object (token -> id), got ",
                         vocab->type_name());
    out.vocab.reserve(vocab->size());
    for (const auto& item : vocab->items()) {
        const Json& id = item.value();
        const bool ok = (id.is_number_unsigned() &&
                         id.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<std::int32_t>::max())) ||
                        (id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                         id.get<std::int64_t>() <= std::numeric_limits<std::int32_t>::max());
        require<ConfigError>(ok, read.source(), ".vocab: the id of \"", item.key(),
                             "\" must be an integer in [0, 2147483647], got ", id.dump());
        out.vocab.emplace_back(item.key(), static_cast<std::int32_t>(id.get<std::int64_t>()));
    }

    const Json& merges = array_value(*model, read, "merges");
    out.merges.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const Json& m = merges[i];
        if (m.is_string()) {  // "left right"
            const std::string& s = m.get_ref<const std::string&>();
            const std::size_t space = s.find(' ');
            require<ConfigError>(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                                 read.source(), ".merges[", i, "] must be two tokens separated by one space, got ",
                                 m.dump());
            out.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else {  // ["left", "right"]
            require<ConfigError>(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                                 read.source(), ".merges[", i, "] must be \"left right\" or [\"left\", \"right\"], got ",
                                 m.dump());
            out.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        }
    }
}

inline void read_added_tokens(const Json& json, const std::string& source, TokenizerJson& out) {
    const Json* added = find_value(json, "added_tokens");
    if (added == nullptr) return;
    require<ConfigError>(added->is_array(), source, ": key \"added_tokens\" must be an array, got ", added->type_name());
    for (std::size_t i = 0; i < added->size(); ++i) {
        const ConfigReader read((*added)[i], diffattn::detail::concat(source, ": added_tokens[", i, "]"));
        AddedToken t;
        t.id = static_cast<std::int32_t>(read.integer("id", 0, true, 0));
        t.content = string_value((*added)[i], read, "content");
        t.special = read.boolean("special", false);
        t.single_word = read.boolean("single_word", false);
        t.lstrip = read.boolean("lstrip", false);
        t.rstrip = read.boolean("rstrip", false);
        t.normalized = read.boolean("normalized", true);
        out.added_tokens.push_back(std::move(t));
    }
}

inline void read_pre_tokenizer_step(const Json& json, const std::string& where, std::vector<PreTokenizerStep>& steps) {
    const ConfigReader read(json, where);
    const std::string type = component_type(read, "Sequence, Split, ByteLevel");
    if (type == "Sequence") {
        const Json& list = array_value(json, read, "pretokenizers");
        for (std::size_t i = 0; i < list.size(); ++i) {
            read_pre_tokenizer_step(list[i], diffattn::detail::concat(where, ".pretokenizers[", i, "]"), steps);
        }
        return;
    }
    // Checked before a step is built: a Split compiles a regex (memory and, with the JIT, executable pages).
    require<ConfigError>(steps.size() < max_tokenizer_pre_tokenizer_steps, where, ": the pre_tokenizer has more than ",
                         max_tokenizer_pre_tokenizer_steps, " steps, the limit (Sequences flattened)");
    if (type == "Split") {
        const Json* pattern = find_value(json, "pattern");
        const bool regex = pattern != nullptr && pattern->is_object() && pattern->size() == 1 &&
                           pattern->contains("Regex") && (*pattern)["Regex"].is_string();
        const bool literal = pattern != nullptr && pattern->is_object() && pattern->size() == 1 &&
                             pattern->contains("String") && (*pattern)["String"].is_string();
        require<ConfigError>(regex || literal, where, ": key \"pattern\" must be {\"Regex\": \"...\"} or ",
                             "{\"String\": \"...\"}, got ", pattern == nullptr ? "null" : pattern->dump());
        read.choice<bool>("behavior", [](const std::string& s, bool&) { return s == "Isolated"; },
                          "Isolated (the only split behaviour diffattn supports)", true, false);
        require<ConfigError>(!read.boolean("invert", false), where, ": key \"invert\" must be false (not supported)");
        steps.push_back(PreTokenizerStep::split(
            regex ? (*pattern)["Regex"].get<std::string>() : escape_literal((*pattern)["String"].get<std::string>()),
            where + ".pattern"));
    } else {  // ByteLevel; Hugging Face's defaults when a key is absent
        steps.push_back(PreTokenizerStep::byte_level(read.boolean("add_prefix_space", true),
                                                     read.boolean("use_regex", true)));
    }
}

inline void read_pre_tokenizer(const Json& json, const std::string& source, TokenizerJson& out) {
    const Json* pre = find_value(json, "pre_tokenizer");
    require<ConfigError>(pre != nullptr, source,
                         ": key \"pre_tokenizer\" is missing or null; diffattn needs one that ends with ByteLevel");
    read_pre_tokenizer_step(*pre, source + ": pre_tokenizer", out.pre_tokenizer);
    std::size_t byte_level = 0;
    for (const PreTokenizerStep& step : out.pre_tokenizer) byte_level += step.is_byte_level ? 1 : 0;
    require<ConfigError>(byte_level == 1 && out.pre_tokenizer.back().is_byte_level, source,
                         ": pre_tokenizer must have exactly one ByteLevel step, its last (it has ", byte_level,
                         byte_level == 1 ? ", not last)" : ")");
}

inline void read_post_processor_step(const Json& json, const std::string& where, bool& template_seen,
                                     TokenizerJson& out) {
    const ConfigReader read(json, where);
    const std::string type = component_type(read, "ByteLevel, TemplateProcessing, Sequence");
    if (type == "Sequence") {
        const Json& list = array_value(json, read, "processors");
        for (std::size_t i = 0; i < list.size(); ++i) {
            read_post_processor_step(list[i], diffattn::detail::concat(where, ".processors[", i, "]"), template_seen,
                                     out);
        }
    } else if (type == "TemplateProcessing") {
        require<ConfigError>(!template_seen, where, ": a second TemplateProcessing (diffattn supports one)");
        template_seen = true;
        const Json& single = array_value(json, read, "single");
        const Json* specials = find_value(json, "special_tokens");
        bool sequence_seen = false;
        for (std::size_t i = 0; i < single.size(); ++i) {
            const Json& piece = single[i];
            const std::string at = diffattn::detail::concat(where, ".single[", i, "]");
            const bool is_special = piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken");
            const bool is_sequence = piece.is_object() && piece.size() == 1 && piece.contains("Sequence");
            require<ConfigError>(is_special || is_sequence, at, ": must be {\"SpecialToken\": {...}} or ",
                                 "{\"Sequence\": {...}}, got ", piece.dump());
            const Json& body = is_special ? piece["SpecialToken"] : piece["Sequence"];
            const ConfigReader body_read(body, at);
            const std::string name = string_value(body, body_read, "id");
            if (is_sequence) {
                require<ConfigError>(name == "A" && !sequence_seen, at,
                                     ": the single template must hold one sequence, $A; got ", body.dump());
                sequence_seen = true;
                continue;
            }
            const Json* special = specials != nullptr && specials->is_object() ? find_value(*specials, name.c_str())
                                                                                : nullptr;
            const Json* ids = special != nullptr && special->is_object() ? find_value(*special, "ids") : nullptr;
            require<ConfigError>(ids != nullptr && ids->is_array(), at, ": special token \"", name,
                                 "\" has no \"ids\" array in ", where, ".special_tokens");
            for (const Json& id : *ids) {
                // A piece may name one special token's ids many times: the sum is what encode copies.
                require<ConfigError>(out.prefix.size() + out.suffix.size() < max_tokenizer_template_ids, at,
                                     ": the template puts more than ", max_tokenizer_template_ids,
                                     " special-token ids around the text, the limit");
                require<ConfigError>(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                                         id.get<std::int64_t>() <= std::numeric_limits<std::int32_t>::max(),
                                     where, ".special_tokens[\"", name, "\"].ids must hold ids, got ", id.dump());
                (sequence_seen ? out.suffix : out.prefix).push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
            }
        }
        require<ConfigError>(sequence_seen, where, ".single has no {\"Sequence\": {\"id\": \"A\"}}");
    }
    // ByteLevel: adds no ids.
}

inline void read_decoder(const Json& json, const std::string& source) {
    const Json* decoder = find_value(json, "decoder");
    require<ConfigError>(decoder != nullptr, source, ": key \"decoder\" is missing or null; diffattn needs ByteLevel");
    const ConfigReader read(*decoder, source + ": decoder");
    component_type(read, "ByteLevel");
}

}  // namespace detail

/// Reads a parsed tokenizer.json; `source` prefixes every message ("tokenizer.json \"path\"").
inline TokenizerJson read_tokenizer_json(const nlohmann::json& json, const std::string& source) {
    const diffattn::detail::ConfigReader read(json, source);
    detail::require_null(json, read, "normalizer", "diffattn supports no normalizer");
    detail::require_null(json, read, "truncation", "encode returns every id");
    detail::require_null(json, read, "padding", "encode returns every id");
    TokenizerJson out;
    detail::read_model(json, source, out);
    detail::read_added_tokens(json, source, out);
    detail::read_pre_tokenizer(json, source, out);
    if (const nlohmann::json* post = detail::find_value(json, "post_processor")) {
        bool template_seen = false;
        detail::read_post_processor_step(*post, source + ": post_processor", template_seen, out);
    }
    detail::read_decoder(json, source);
    return out;
}

}  // namespace diffattn::text
