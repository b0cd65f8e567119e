// Small JSON files (config.json, generation_config.json, model.safetensors.index.json,
// tokenizer.json): read with a size limit checked before anything is read, and parsed only after
// one linear strict-JSON pass (io/detail/strict_json.hpp) has refused a NUL byte, a duplicate key
// or nesting deeper than the caller's limit, so that a huge or pathological file costs neither
// memory nor a deep recursion, and no key silently means what the last copy says.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/detail/counted.hpp"
#include "diffattn/io/detail/strict_json.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace diffattn::detail {

/// Parses JSON text that must be strictly one JSON value (check_json_text, one linear pass before
/// the DOM is built): ErrorType (ConfigError unless the caller says) prefixed with `source` for a
/// syntax error, a NUL byte (naming its offset; nlohmann would stop reading there), nesting deeper
/// than `limits.max_depth` (so that no recursive walk ever meets a pathological depth), a key twice
/// in one object (naming it; nlohmann would keep the last value silently), or a container or value
/// count over its limit (naming the container and the limit), so that the DOM is built only within
/// them. `what` names the content in the messages ("a config").
template <typename ErrorType = ConfigError>
nlohmann::json parse_json_text(const std::string& text, const std::string& source, const JsonLimits& limits,
                               const char* what) {
    using Problem = JsonProblem;
    const Problem problem = check_json_text(text.data(), text.data() + text.size(), limits);
    const auto container = [&](const char* kind) {
        return problem.path.empty() ? concat("the top-level ", kind) : concat(kind, " ", problem.path);
    };
    switch (problem.kind) {
        case Problem::Kind::none: break;
        case Problem::Kind::nul_byte:
            throw ErrorType(concat(source, ": not valid JSON: it holds a NUL byte at byte offset ",
                                             problem.offset));
        case Problem::Kind::too_deep:
            throw ErrorType(
                concat(source, ": not valid JSON for ", what, ": it nests deeper than ", limits.max_depth, " levels"));
        case Problem::Kind::duplicate_key:
            throw ErrorType(concat(source, ": duplicate key ", problem.key,
                                             problem.top_level_key.empty() ? "" : " inside ",
                                             problem.top_level_key.empty() ? "" : quote_json(problem.top_level_key),
                                             ": JSON readers disagree on which value counts"));
        case Problem::Kind::array_too_long:
            throw ErrorType(concat(source, ": ", container("array"), " holds more than ", problem.limit,
                                   " elements, the limit for ", what));
        case Problem::Kind::object_too_large:
            throw ErrorType(concat(source, ": ", container("object"), " holds more than ", problem.limit,
                                   " members, the limit for ", what));
        case Problem::Kind::too_many_top_level_keys:
            throw ErrorType(concat(source, ": the top-level object holds ", problem.count, " keys, over the limit of ",
                                   limits.max_top_level_keys, " for ", what));
        case Problem::Kind::too_many_counted_members:
            throw ErrorType(concat(source, ": ", quote_json(limits.counted_object), " holds ", problem.count,
                                   " entries, over the limit of ", limits.max_counted_members, " for ", what));
        case Problem::Kind::too_many_values:
            throw ErrorType(concat(source, ": the file holds ", problem.count, " JSON values, over the limit of ",
                                   limits.max_values, " for ", what));
        default:  // syntax, and out_of_range for a number like 1e400
            throw ErrorType(concat(source, ": not valid JSON: ", problem.message));
    }
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {  // not expected after the check; kept as a guard
        throw ErrorType(concat(source, ": not valid JSON: ", e.what()));
    }
    return json;
}

/// parse_json_text with only a depth limit.
template <typename ErrorType = ConfigError>
nlohmann::json parse_json_text(const std::string& text, const std::string& source, int max_depth,
                               const char* what) {
    JsonLimits limits;
    limits.max_depth = max_depth;
    return parse_json_text<ErrorType>(text, source, limits, what);
}

/// Reads a whole file of at most `max_bytes` bytes. FileError prefixed with `source` if it is
/// missing, not a regular file (a directory, a FIFO, a device), larger than `max_bytes`, or cannot
/// be read; `what` names the kind of file in the size message ("a config.json").
inline std::string read_text_file(const std::filesystem::path& path, const std::string& source,
                                  std::uintmax_t max_bytes, const char* what) {
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) {
        throw FileError(concat(source, ": cannot open the file: no such file",
                                       error && error != std::errc::no_such_file_or_directory
                                           ? " (" + error.message() + ")"
                                           : std::string()));
    }
    require<FileError>(!error, source, ": cannot open the file: cannot access it: ", error.message());
    require<FileError>(status.type() != fs::file_type::directory, source,
                       ": cannot open the file: it is a directory, not a file");
    require<FileError>(status.type() == fs::file_type::regular, source,
                       ": cannot open the file: it is not a regular file (a FIFO, socket or device)");
    const std::uintmax_t size = fs::file_size(path, error);
    require<FileError>(!error, source, ": cannot get the file size: ", error.message());
    require<FileError>(size <= max_bytes, source, ": the file is ", bytes_count(size), ", over the ", max_bytes,
                       "-byte limit for ", what);
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int reason = errno;
        throw FileError(concat(source, ": cannot open the file",
                                       reason != 0 ? ": " + std::generic_category().message(reason) : std::string()));
    }
    // size + 1 bytes at most (size <= the limit), whatever happens to the file meanwhile.
    std::string text(static_cast<std::size_t>(size) + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    require<FileError>(!in.bad(), source, ": read error");
    text.resize(static_cast<std::size_t>(in.gcount()));
    require<FileError>(text.size() == size, source, ": read ", bytes_count(text.size()), " but the file size is ", size,
                       " (the file changed while being read)");
    return text;
}

/// Whether the optional file `path` (a tokenizer_config.json, a generation_config.json) is to be
/// read: false only when nothing has that name. A name that is there but leads nowhere (a
/// dangling symbolic link, as a Hub cache with a missing blob has, or a link loop) is a FileError
/// prefixed with `source`: skipping it would silently drop what the file says.
inline bool optional_file_present(const std::filesystem::path& path, const std::string& source) {
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::file_status own = fs::symlink_status(path, error);
    if (own.type() == fs::file_type::not_found) return false;
    require<FileError>(own.type() != fs::file_type::none, source, ": cannot access it: ", error.message());
    if (fs::is_symlink(own)) {
        const fs::file_status target = fs::status(path, error);
        if (target.type() == fs::file_type::not_found) {
            throw FileError(concat(source, ": it is a symbolic link to \"", fs::read_symlink(path, error).string(),
                                   "\", which does not exist"));
        }
        require<FileError>(target.type() != fs::file_type::none, source, ": cannot access it: ", error.message());
    }
    return true;
}

}  // namespace diffattn::detail
