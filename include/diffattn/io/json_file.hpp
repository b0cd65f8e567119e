// Small JSON files (config.json, generation_config.json, model.safetensors.index.json): read with a
// size limit checked before anything is read, parsed with a nesting limit checked while parsing,
// so that a huge or pathological file costs neither memory nor a deep recursion.
#pragma once

#include "diffattn/core/error.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace diffattn::detail {

/// The text of the regular file `path`, at most `max_bytes` long. `source` starts every message
/// (e.g. "config.json \"<path>\""), `kind` names the file in the size message ("a config.json").
/// FileError when the file is missing, not a regular file, too large or unreadable.
inline std::string read_text_file(const std::filesystem::path& path, std::uintmax_t max_bytes, const std::string& source,
                                  const char* kind) {
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) {
        throw FileError(concat(source, ": cannot open the file: no such file",
                               error && error != std::errc::no_such_file_or_directory ? " (" + error.message() + ")"
                                                                                     : std::string()));
    }
    require<FileError>(!error, source, ": cannot open the file: cannot access it: ", error.message());
    require<FileError>(status.type() != fs::file_type::directory, source,
                       ": cannot open the file: it is a directory, not a file");
    require<FileError>(status.type() == fs::file_type::regular, source,
                       ": cannot open the file: it is not a regular file (a FIFO, socket or device)");
    const std::uintmax_t size = fs::file_size(path, error);
    require<FileError>(!error, source, ": cannot get the file size: ", error.message());
    require<FileError>(size <= max_bytes, source, ": the file is ", size, " bytes, over the ", max_bytes,
                       "-byte limit for ", kind);
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
    require<FileError>(text.size() == size, source, ": read ", text.size(), " bytes but the file size is ", size,
                       " (the file changed while being read)");
    return text;
}

/// `text` parsed as JSON, nesting at most `max_depth` levels; otherwise ErrorType
/// "<source>: not valid JSON[ for <kind>]: ...".
template <typename ErrorType>
nlohmann::json parse_json_text(const std::string& text, int max_depth, const std::string& source, const char* kind) {
    const auto limit_depth = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if ((event == nlohmann::json::parse_event_t::object_start ||
             event == nlohmann::json::parse_event_t::array_start) &&
            depth >= max_depth) {
            throw ErrorType(concat(source, ": not valid JSON for ", kind, ": it nests deeper than ", max_depth,
                                   " levels"));
        }
        return true;
    };
    try {
        return nlohmann::json::parse(text, limit_depth);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
        throw ErrorType(concat(source, ": not valid JSON: ", e.what()));
    }
}

}  // namespace diffattn::detail
