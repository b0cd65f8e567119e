// What a path names, for the readers and writers that take regular files only.
//
// A directory, FIFO, socket or device is refused before it is opened, for input and output
// alike: opening a FIFO blocks until its other end is opened, reading a device may never end,
// and replacing one with a written file (see replace_file.hpp) would remove it.
#pragma once

#include <filesystem>
#include <system_error>

namespace diffattn::detail {

/// Why a file of type `type` is not a regular file, as the rest of a sentence that starts with
/// its path: "\"/dev/full\" is not a regular file but a character device". Null for a regular
/// file. `type` is from std::filesystem::status (links followed) or symlink_status (a link itself).
inline const char* not_a_regular_file(std::filesystem::file_type type) noexcept {
    namespace fs = std::filesystem;
    switch (type) {
        case fs::file_type::regular: return nullptr;
        case fs::file_type::directory: return "is a directory, not a file";
        case fs::file_type::fifo: return "is not a regular file but a FIFO (named pipe)";
        case fs::file_type::socket: return "is not a regular file but a socket";
        case fs::file_type::character: return "is not a regular file but a character device";
        case fs::file_type::block: return "is not a regular file but a block device";
        case fs::file_type::symlink: return "is not a regular file but a symbolic link";
        default: return "is not a regular file";
    }
}

/// Checks, before it is opened, that `path` names an existing regular file (links followed);
/// otherwise calls fail(parts...), which must throw, with "no such file" (and the reason when it
/// is not ENOENT: a path through a file gives ENOTDIR), "cannot access the file: <reason>" or
/// not_a_regular_file's text. The one check of the readers that open a file by path.
template <typename Fail>
void require_regular_file(const std::filesystem::path& path, Fail&& fail) {
    namespace fs = std::filesystem;
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) {
        if (error && error != std::errc::no_such_file_or_directory) fail("no such file (", error.message(), ")");
        fail("no such file");
    }
    if (error) fail("cannot access the file: ", error.message());
    if (const char* why = not_a_regular_file(status.type())) fail(why);
}

}  // namespace diffattn::detail
