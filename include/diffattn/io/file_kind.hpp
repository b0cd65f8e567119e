// What a path names, for the readers and writers that take regular files only.
//
// A directory, FIFO, socket or device is refused before it is opened, for input and output
// alike: opening a FIFO blocks until its other end is opened, reading a device may never end,
// and replacing one with a written file (see replace_file.hpp) would remove it.
#pragma once

#include <filesystem>

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

}  // namespace diffattn::detail
