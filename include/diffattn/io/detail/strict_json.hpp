// A strict check of JSON text before nlohmann builds a DOM from it: what nlohmann's parser
// accepts silently (a NUL byte ends its input, a duplicate key keeps the last value) or pays for
// unboundedly (deep nesting, long arrays) is found first, in one linear SAX pass that builds
// nothing. The caller turns the JsonProblem into its own error message.
//
// (nlohmann's callback parser could limit the depth while building the DOM, but it rescans the
// parent container after each value closes: quadratic, 75 s for a 1 MiB object of 88,000 empty
// objects.)
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace diffattn::detail {

/// What check_json_text found; kind none when the text is valid and within the limits.
struct JsonProblem {
    enum class Kind {
        none,
        nul_byte,
        syntax,
        too_deep,
        array_too_long,
        object_too_large,         ///< an object below the top level, other than the counted one
        duplicate_key,
        too_many_top_level_keys,  ///< counted to the end of the text: `count` is the whole count
        too_many_counted_members, ///< likewise, in the top-level object JsonLimits::counted_object
        too_many_values,          ///< likewise: values in the whole text (JsonLimits::max_values)
    };
    Kind kind = Kind::none;
    std::size_t offset = 0;       ///< nul_byte: the byte offset of the first NUL
    std::size_t count = 0;        ///< too_many_*: how many there are
    std::string message;          ///< syntax: nlohmann's message (parse_error, or out_of_range for 1e400)
    std::string key;              ///< duplicate_key: the key, as a JSON string literal
    std::string top_level_key;    ///< duplicate_key, object_too_large: the top-level key it is under,
                                  ///< unquoted ("" at the top level)
    std::string path;             ///< array_too_long, object_too_large: the container, as "model.merges"
                                  ///< ("a[2]" for an array element; "" for the top-level value)
    std::size_t limit = 0;        ///< array_too_long, object_too_large: the limit that applied

    explicit operator bool() const { return kind != Kind::none; }
};

/// Limits of check_json_text. The count limits let a reader refuse a text of millions of tiny
/// entries before any DOM is built, with the whole count in its message: past a count limit the
/// pass keeps no more keys and only counts.
struct JsonLimits {
    static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
    int max_depth = 32;                        ///< open containers at most
    std::size_t max_array_size = unlimited;    ///< elements of one array at most
    std::size_t max_object_members = unlimited;  ///< members of an object below the top level
    std::size_t max_top_level_keys = unlimited;  ///< top-level keys, counted_object not counted
    std::string counted_object;                ///< a top-level key whose object's members are counted
    std::size_t max_counted_members = unlimited; ///< members of that object at most
    std::size_t max_values = unlimited;        ///< values (containers included) in the whole text
    /// A container (named by its path, as JsonProblem::path) allowed more members than
    /// max_array_size / max_object_members: a tokenizer's vocabulary among its small objects.
    struct LargeContainer {
        std::string path;
        std::size_t max_members;
    };
    std::vector<LargeContainer> large_containers;

    /// The members allowed in the container at `path` (an array or an object): its LargeContainer's
    /// limit, else max_array_size / max_object_members.
    std::size_t max_members(const std::string& path, bool array) const {
        for (const LargeContainer& large : large_containers) {
            if (large.path == path) return large.max_members;
        }
        return array ? max_array_size : max_object_members;
    }
};

/// `text` as a JSON string literal (control characters escaped, invalid UTF-8 replaced), for messages.
inline std::string quote_json(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// `text` with every byte outside printable ASCII written as \xNN: nlohmann's syntax messages quote
/// the bytes last read as they are, and a hostile file's bytes must not reach a terminal raw.
inline std::string printable_ascii(const std::string& text) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const char byte : text) {
        const auto c = static_cast<unsigned char>(byte);
        if (c >= 0x20 && c < 0x7f) {
            out += byte;
        } else {
            out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
        }
    }
    return out;
}

/// Checks the JSON text [first, last): no NUL byte, valid JSON (strict: one value, nothing after
/// it, no comments), nesting at most limits.max_depth, arrays and inner objects within their
/// limits, no key twice in one object, and the top-level and counted-object key counts. Returns
/// the first problem found (a count over its limit is reported after the whole pass).
inline JsonProblem check_json_text(const char* first, const char* last, const JsonLimits& limits = {}) {
    JsonProblem problem;
    // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0<anything>" would parse;
    // JSON text never holds a raw NUL (not even inside a string).
    if (const void* nul = std::memchr(first, 0, static_cast<std::size_t>(last - first))) {
        problem.kind = JsonProblem::Kind::nul_byte;
        problem.offset = static_cast<std::size_t>(static_cast<const char*>(nul) - first);
        return problem;
    }
    struct Container {
        bool array = false;
        bool counted = false;         // the top-level object limits.counted_object
        std::size_t members = 0;      // elements (array) or keys (object) so far
        std::set<std::string> keys;   // keys seen, for duplicates (none kept past a count limit)
        std::string path;             // JsonProblem::path, cut to about 160 bytes
        std::size_t max_members = 0;  // max_array_size, max_object_members or a LargeContainer's
    };
    struct Checker {
        const JsonLimits& limits;
        JsonProblem& problem;
        std::vector<Container> open_containers;  // innermost last
        std::string top_level_key;               // the top-level entry being parsed
        std::string parent_key;                  // the last key below the top level (cut), for paths
        std::size_t top_level_keys = 0;
        std::size_t counted_members = 0;
        std::size_t values = 0;

        bool fail_size(JsonProblem::Kind kind, const Container& container) {
            problem.path = container.path;
            problem.limit = container.max_members;
            return fail(kind);
        }

        bool fail(JsonProblem::Kind kind) {
            problem.kind = kind;
            return false;  // stops the parse
        }
        bool element() {  // a value (or a container) inside the innermost container
            ++values;  // counted to the end, like the keys: reported after the pass
            if (!open_containers.empty() && open_containers.back().array &&
                ++open_containers.back().members > open_containers.back().max_members) {
                return fail_size(JsonProblem::Kind::array_too_long, open_containers.back());
            }
            return true;
        }
        bool open(bool array) {
            if (!element()) return false;
            if (open_containers.size() >= static_cast<std::size_t>(limits.max_depth)) {
                return fail(JsonProblem::Kind::too_deep);
            }
            const bool counted = !array && open_containers.size() == 1 && !limits.counted_object.empty() &&
                                 top_level_key == limits.counted_object;
            Container container{array, counted, 0, {}, child_path(), 0};
            container.max_members = limits.max_members(container.path, array);
            open_containers.push_back(std::move(container));
            return true;
        }
        std::string child_path() const {  // the path of a value opened now
            if (open_containers.empty()) return {};
            const Container& parent = open_containers.back();
            std::string path = parent.path;
            if (path.size() > 160) return path;  // cut: a hostile key or depth costs no more
            if (parent.array) return path + "[" + std::to_string(parent.members - 1) + "]";
            const std::string& key = open_containers.size() == 1 ? top_level_key : parent_key;
            path += path.empty() ? key.substr(0, 161) : "." + key.substr(0, 161);
            if (path.size() > 160) path.replace(160, std::string::npos, "...");
            return path;
        }
        bool close() {
            open_containers.pop_back();
            return true;
        }
        bool null() { return element(); }
        bool boolean(bool) { return element(); }
        bool number_integer(nlohmann::json::number_integer_t) { return element(); }
        bool number_unsigned(nlohmann::json::number_unsigned_t) { return element(); }
        bool number_float(nlohmann::json::number_float_t, const nlohmann::json::string_t&) { return element(); }
        bool string(nlohmann::json::string_t&) { return element(); }
        bool binary(nlohmann::json::binary_t&) { return element(); }
        bool start_object(std::size_t) { return open(false); }
        bool end_object() { return close(); }
        bool start_array(std::size_t) { return open(true); }
        bool end_array() { return close(); }
        bool key(nlohmann::json::string_t& key) {
            Container& object = open_containers.back();
            ++object.members;
            const bool top_level = open_containers.size() == 1;
            bool over_limit = false;  // counted, reported after the pass; keep no more keys
            if (top_level) {
                if (limits.counted_object.empty() || key != limits.counted_object) ++top_level_keys;
                over_limit = top_level_keys > limits.max_top_level_keys;
            } else if (object.counted) {
                ++counted_members;
                over_limit = counted_members > limits.max_counted_members;
            } else if (object.members > object.max_members) {
                problem.top_level_key = top_level_key;
                return fail_size(JsonProblem::Kind::object_too_large, object);
            }
            if (!over_limit && !object.keys.insert(key).second) {
                problem.key = quote_json(key);
                if (!top_level) problem.top_level_key = top_level_key;
                return fail(JsonProblem::Kind::duplicate_key);
            }
            if (top_level) {
                top_level_key = key;
            } else {
                parent_key.assign(key, 0, std::min<std::size_t>(key.size(), 161));
            }
            return true;
        }
        bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& error) {
            problem.message = printable_ascii(error.what());
            return fail(JsonProblem::Kind::syntax);
        }
    };
    Checker checker{limits, problem, {}, {}, {}, 0, 0, 0};
    checker.open_containers.reserve(static_cast<std::size_t>(limits.max_depth > 0 ? limits.max_depth : 0));
    nlohmann::json::sax_parse(first, last, &checker, nlohmann::json::input_format_t::json, /*strict=*/true,
                              /*ignore_comments=*/false);
    if (problem) return problem;
    if (checker.top_level_keys > limits.max_top_level_keys) {
        problem.kind = JsonProblem::Kind::too_many_top_level_keys;
        problem.count = checker.top_level_keys;
    } else if (checker.counted_members > limits.max_counted_members) {
        problem.kind = JsonProblem::Kind::too_many_counted_members;
        problem.count = checker.counted_members;
    } else if (checker.values > limits.max_values) {
        problem.kind = JsonProblem::Kind::too_many_values;
        problem.count = checker.values;
    }
    return problem;
}

}  // namespace diffattn::detail
