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

#include <cstddef>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace diffattn::detail {

/// What check_json_text found; kind none when the text is valid and within the limits.
struct JsonProblem {
    enum class Kind { none, nul_byte, syntax, too_deep, array_too_long, duplicate_key };
    Kind kind = Kind::none;
    std::size_t offset = 0;       ///< nul_byte: the byte offset of the first NUL
    std::string message;          ///< syntax: nlohmann's message (parse_error, or out_of_range for 1e400)
    std::string key;              ///< duplicate_key: the key, as a JSON string literal
    std::string top_level_key;    ///< duplicate_key: the top-level key it is under, quoted ("" at the top level)

    explicit operator bool() const { return kind != Kind::none; }
};

/// Limits of check_json_text.
struct JsonLimits {
    int max_depth = 32;                                                    ///< open containers at most
    std::size_t max_array_size = std::numeric_limits<std::size_t>::max();  ///< elements of one array at most
};

/// `text` as a JSON string literal (control characters escaped, invalid UTF-8 replaced), for messages.
inline std::string json_quoted(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Checks the JSON text [first, last): no NUL byte, valid JSON (strict: one value, nothing after
/// it, no comments), nesting at most limits.max_depth, arrays of at most limits.max_array_size
/// elements, no key twice in one object. Returns the first problem found.
inline JsonProblem check_json_text(const char* first, const char* last, const JsonLimits& limits = {}) {
    JsonProblem problem;
    // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0<anything>" would parse;
    // JSON text never holds a raw NUL (not even inside a string).
    if (const void* nul = std::memchr(first, 0, static_cast<std::size_t>(last - first))) {
        problem.kind = JsonProblem::Kind::nul_byte;
        problem.offset = static_cast<std::size_t>(static_cast<const char*>(nul) - first);
        return problem;
    }
    struct Checker {
        const JsonLimits& limits;
        JsonProblem& problem;
        std::vector<std::set<std::string>> object_keys;  // keys seen so far, innermost object last
        std::vector<std::size_t> array_sizes;            // elements so far, innermost array last
        std::vector<bool> is_array;                      // every open container, innermost last
        std::string top_level_key;                       // the top-level entry being parsed

        bool fail(JsonProblem::Kind kind) {
            problem.kind = kind;
            return false;  // stops the parse
        }
        bool element() {  // a value (or a container) inside the innermost container
            if (!is_array.empty() && is_array.back() && ++array_sizes.back() > limits.max_array_size) {
                return fail(JsonProblem::Kind::array_too_long);
            }
            return true;
        }
        bool open(bool array) {
            if (!element()) return false;
            if (is_array.size() >= static_cast<std::size_t>(limits.max_depth)) return fail(JsonProblem::Kind::too_deep);
            is_array.push_back(array);
            if (array) {
                array_sizes.push_back(0);
            } else {
                object_keys.emplace_back();
            }
            return true;
        }
        bool close() {
            if (is_array.back()) {
                array_sizes.pop_back();
            } else {
                object_keys.pop_back();
            }
            is_array.pop_back();
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
            const bool top_level = is_array.size() == 1;
            if (!object_keys.back().insert(key).second) {
                problem.key = json_quoted(key);
                if (!top_level) problem.top_level_key = json_quoted(top_level_key);
                return fail(JsonProblem::Kind::duplicate_key);
            }
            if (top_level) top_level_key = key;
            return true;
        }
        bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& error) {
            problem.message = error.what();
            return fail(JsonProblem::Kind::syntax);
        }
    };
    Checker checker{limits, problem, {}, {}, {}, {}};
    nlohmann::json::sax_parse(first, last, &checker, nlohmann::json::input_format_t::json, /*strict=*/true,
                              /*ignore_comments=*/false);
    return problem;
}

}  // namespace diffattn::detail
