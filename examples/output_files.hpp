// The files the example programs write (diffattn-forward --logits, diffattn-analyze --json and
// --maps), checked before anything is computed or written. A program writes a new file, or replaces
// a file it wrote itself on an earlier run, and nothing else: never one of the run's inputs, never a
// file in or under the model's folder, never a file of someone else's that happens to have the
// name or the shape. An earlier output is known by a mark that only these writers leave: the entry
// "written_by" naming the program and the flag ("diffattn-forward --logits"), in a safetensors
// file's __metadata__ or as a member of a JSON file's top-level object. The write itself then goes
// through detail::ReplacingFile (io/replace_file.hpp): complete or not at all.
#pragma once

#include "cli_support.hpp"

#include "diffattn/io/detail/strict_json.hpp"
#include "diffattn/io/file_kind.hpp"
#include "diffattn/io/safetensors_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace cli {

/// The key of the mark: its value names the program and the flag that wrote the file.
constexpr const char* kWrittenByKey = "written_by";

/// True when the regular file at `path` is an earlier output that carries `mark`.
using IsEarlierOutput = bool (*)(const std::filesystem::path& path, const std::string& mark);

/// A safetensors file whose __metadata__ has "written_by": `mark` (write it with that entry).
inline bool is_earlier_safetensors_output(const std::filesystem::path& path, const std::string& mark) {
    try {
        const diffattn::SafetensorsFile file(path);
        const auto found = file.metadata().find(kWrittenByKey);
        return found != file.metadata().end() && found->second == mark;
    } catch (const diffattn::Error&) {
        return false;
    }
}

namespace detail {

/// Reads only the top level of a JSON document in one streaming pass that keeps nothing below it:
/// whether it is an object and its "written_by" string. Recognising an earlier output (which can be
/// hundreds of MB, or nested deeply) so costs neither a tree in memory nor a deep recursion.
class TopLevelMark final : public nlohmann::json::json_sax_t {
public:
    bool is_object = false;
    std::string mark;

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool string(string_t& value) override {
        if (depth_ == 1 && key_ == kWrittenByKey) mark = value;
        return true;
    }
    bool key(string_t& name) override {
        if (depth_ == 1) key_ = name;
        return true;
    }
    bool start_object(std::size_t) override { return open(true); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override { return false; }

private:
    bool open(bool object) {
        if (depth_ == 0) is_object = object;
        ++depth_;
        return depth_ == 1 ? object : true;  // a document that is not an object: stop reading
    }
    bool close() {
        --depth_;
        key_.clear();
        return true;
    }
    std::size_t depth_ = 0;
    std::string key_;
};

}  // namespace detail

/// A JSON file whose top-level object has "written_by": `mark` (syntax checked to the end).
inline bool is_earlier_json_output(const std::filesystem::path& path, const std::string& mark) {
    std::ifstream in(path, std::ios::binary);
    detail::TopLevelMark top;
    return in && nlohmann::json::sax_parse(in, &top) && top.is_object && top.mark == mark;
}

/// True when `path`, once resolved (symbolic links, "." and ".."; a part that does not exist yet is
/// taken as written), is the folder `dir` or lies under it.
inline bool is_in_or_under(const std::filesystem::path& path, const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::path outer = fs::weakly_canonical(fs::absolute(dir, error), error);
    if (error) return false;
    const fs::path inner = fs::weakly_canonical(fs::absolute(path, error), error);
    if (error) return false;
    const auto [left, right] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
    return left == outer.end() || (std::next(left) == outer.end() && left->empty());  // "dir/" ends in ""
}

/// UsageError, naming `flag` and `target`, unless `target` may take the output of `flag`:
///   - its name is a file name (not empty, ".", ".."; no control character; at most 255 bytes,
///     the longest name Linux file systems take);
///   - its folder exists, or is `folder_made_later` (a folder the program creates before writing);
///   - it is not in or under one of the folders in `inputs` (the model's), resolved as the file
///     system does, and it is not one of the files in `inputs` (an episodes file);
///   - no file is there, or a regular file that `is_earlier_output` finds `mark` in.
inline void check_output_file(const std::string& flag, const std::filesystem::path& target,
                              const std::vector<std::filesystem::path>& inputs, IsEarlierOutput is_earlier_output,
                              const std::string& mark, const std::filesystem::path& folder_made_later = {}) {
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
    for (const fs::path& input : inputs) {
        if (fs::is_directory(input, error)) {
            if (is_in_or_under(folder, input)) {
                refuse("is in the model's folder \"" + input.string() + "\", which is only read; write elsewhere");
            }
        } else if (fs::equivalent(target, input, error)) {
            refuse("is an input of this run (\"" + input.string() + "\")");
        }
    }
    if (folder_made_later.empty() || folder != folder_made_later) {
        if (!fs::is_directory(folder, error)) {
            refuse("is in a folder that does not exist (\"" + folder.string() + "\")");
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
    if (!is_earlier_output(target, mark)) {
        refuse("exists and is not an earlier output of " + flag + " (it lacks the mark \"" + kWrittenByKey +
               "\": \"" + mark + "\"): a file this program did not write is never replaced; remove it or give "
               "another path");
    }
}

}  // namespace cli
