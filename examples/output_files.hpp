// The files the example programs write (diffattn-forward --logits, diffattn-analyze --json and
// --maps), checked before anything is computed or written. A program writes a new file, or replaces
// a file it wrote itself on an earlier run (which the caller recognises by its contents), and
// nothing else: never one of the run's inputs, never a file in the model's folder, never a file of
// someone else's that happens to have the name. The write itself then goes through
// detail::ReplacingFile (io/replace_file.hpp): complete or not at all.
#pragma once

#include "cli_support.hpp"

#include "diffattn/io/detail/strict_json.hpp"
#include "diffattn/io/file_kind.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace cli {

/// True when the regular file at `path` holds an earlier output of the same kind, so that a
/// program may replace it: e.g. a safetensors file whose only tensor is "logits".
using IsEarlierOutput = bool (*)(const std::filesystem::path&);

/// UsageError, naming `flag` and `target`, unless `target` may take the output of `flag`:
///   - its name is a file name (not empty, ".", ".."; no control character; at most 255 bytes,
///     the longest name Linux file systems take);
///   - its folder exists, or is `folder_made_later` (a folder the program creates before writing);
///   - its folder is not one of the folders in `inputs` (the model's), and it is not one of the
///     files in `inputs` (an episodes file);
///   - no file is there, or a regular file that `is_earlier_output` recognises.
inline void check_output_file(const std::string& flag, const std::filesystem::path& target,
                              const std::vector<std::filesystem::path>& inputs, IsEarlierOutput is_earlier_output,
                              const std::filesystem::path& folder_made_later = {}) {
    namespace fs = std::filesystem;
    // The path as a JSON string: a control character shows as an escape, not as itself.
    const auto refuse = [&](const std::string& why) {
        throw UsageError{flag + ": " + diffattn::detail::quote_json(target.string()) + " " + why};
    };
    const std::string name = target.filename().string();
    if (name.empty() || name == "." || name == "..") refuse("does not name a file");
    for (const char c : name) {
        if (static_cast<unsigned char>(c) < 0x20) refuse("has a control character in its name");
    }
    constexpr std::size_t kMaxNameBytes = 255;  // NAME_MAX of ext4, xfs, btrfs, tmpfs
    if (name.size() > kMaxNameBytes) {
        refuse("has a name of " + std::to_string(name.size()) + " bytes; a file name takes at most " +
               std::to_string(kMaxNameBytes));
    }
    const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::error_code error;
    if (folder_made_later.empty() || folder != folder_made_later) {
        if (!fs::is_directory(folder, error)) {
            refuse("is in a folder that does not exist (\"" + folder.string() + "\")");
        }
    }
    for (const fs::path& input : inputs) {
        if (fs::is_directory(input, error)) {
            if (fs::equivalent(folder, input, error)) {
                refuse("is in the model's folder \"" + input.string() + "\", which is only read; write elsewhere");
            }
        } else if (fs::equivalent(target, input, error)) {
            refuse("is an input of this run (\"" + input.string() + "\")");
        }
    }
    const fs::file_status status = fs::symlink_status(target, error);
    if (status.type() == fs::file_type::not_found) return;
    if (error) refuse("cannot be checked: " + error.message());
    if (status.type() == fs::file_type::symlink) {
        refuse("is a symbolic link: it is neither followed nor replaced; give the path of the file itself");
    }
    if (const char* kind = diffattn::detail::not_a_regular_file(status.type())) {
        refuse(std::string(kind) + "; only a regular file is replaced");
    }
    if (!is_earlier_output(target)) {
        refuse("exists and is not an earlier output of " + flag +
               ": a file this program did not write is never replaced; remove it or give another path");
    }
}

}  // namespace cli
