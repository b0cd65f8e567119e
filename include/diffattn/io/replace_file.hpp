// An output file that replaces its target only once it is complete (docs/safetensors.md, "Writing").
//
// The bytes go to a temporary file that this object creates, exclusively (it never opens a file
// someone else made), in the target's folder; commit() renames it over the target, so a reader of
// the target sees the old file or the new one, never a part. Until then, and whenever anything
// fails, the target is left as it was and the temporary file is removed: nothing is removed or
// truncated that was not created here. Only a regular file, or no file, is replaced: a directory,
// FIFO, socket, device or symbolic link at the target is a FileError before anything is created.
// No fsync: the rename makes the replacement atomic for other processes, not durable across a
// power loss.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/file_kind.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <utility>

namespace diffattn::detail {

/// The target's replacement while it is written: write() the bytes, then commit(). Destroyed
/// without commit() (an exception on the way), it removes its temporary file and nothing else.
class ReplacingFile {
public:
    /// Checks `target` (absent, or a regular file this process may write) and creates the
    /// temporary file beside it. `who` starts every message ("write_safetensors").
    ReplacingFile(std::filesystem::path target, const char* who) : target_(std::move(target)), who_(who) {
        namespace fs = std::filesystem;
        const fs::path name = target_.filename();
        if (name.empty() || name == "." || name == "..") fail("does not name a file");
        std::error_code error;
        const fs::file_status status = fs::symlink_status(target_, error);
        // Not found (also ENOTDIR, a path through a file) is fine: creating the temporary file
        // then fails with the reason.
        const bool exists = status.type() != fs::file_type::not_found;
        if (exists && error) fail("cannot be written: ", error.message());
        if (status.type() == fs::file_type::symlink) {
            // Writing through the link would replace a file at another path than the one given;
            // replacing the link would break it silently. docs/safetensors.md says more.
            fail("is a symbolic link (to \"", fs::read_symlink(target_, error).string(),
                 "\"): it is neither followed nor replaced; give the path of the file itself");
        }
        if (exists) {
            if (const char* why = not_a_regular_file(status.type())) fail(why, "; only a regular file is replaced");
            // May this process write it? Opening for update neither truncates nor creates.
            errno = 0;
            std::FILE* probe = std::fopen(target_.string().c_str(), "r+b");
            if (probe == nullptr) fail("cannot be written: ", reason(errno));
            std::fclose(probe);
            permissions_ = status.permissions();
        }
        create_temporary();
    }

    ReplacingFile(const ReplacingFile&) = delete;
    ReplacingFile& operator=(const ReplacingFile&) = delete;

    ~ReplacingFile() {
        if (file_ != nullptr) std::fclose(file_);
        if (!temporary_.empty()) {
            std::error_code ignored;
            std::filesystem::remove(temporary_, ignored);  // ours: created exclusively above
        }
    }

    /// Appends data[0, size) to the replacement; FileError with the reason when it cannot.
    void write(const void* data, std::size_t size) {
        errno = 0;
        if (std::fwrite(data, 1, size, file_) != size) write_failed(errno);
    }

    /// Flushes and closes the replacement, gives it the target's permission bits, and renames it
    /// over the target.
    void commit() {
        errno = 0;
        if (std::fflush(file_) != 0) write_failed(errno);
        errno = 0;
        if (std::fclose(std::exchange(file_, nullptr)) != 0) write_failed(errno);
        std::error_code error;
        if (permissions_) {
            std::filesystem::permissions(temporary_, *permissions_, std::filesystem::perm_options::replace, error);
            if (error) {
                fail("was not written: cannot set the permissions of \"", temporary_.string(), "\": ",
                     error.message(), left_as_it_was());
            }
        }
        std::filesystem::rename(temporary_, target_, error);
        if (error) {
            fail("was not written: cannot rename \"", temporary_.string(), "\" to it: ", error.message(),
                 left_as_it_was());
        }
        temporary_.clear();  // it is the target now
    }

private:
    /// Throws FileError("<who>: \"<target>\" <parts...>").
    template <typename... Parts>
    [[noreturn]] void fail(Parts&&... parts) const {
        throw FileError(concat(who_, ": \"", target_.string(), "\" ", std::forward<Parts>(parts)...));
    }

    [[noreturn]] void write_failed(int error) const {
        fail("was not written: error while writing \"", temporary_.string(), "\": ", reason(error),
             left_as_it_was());
    }

    /// The end of a message after a failure: what became of the target.
    const char* left_as_it_was() const noexcept {
        return permissions_ ? " (the file is left as it was)" : " (no file was created)";
    }

    /// strerror of an errno value.
    static std::string reason(int error) {
        return error != 0 ? std::generic_category().message(error) : std::string("unknown error");
    }

    /// Creates ".<target name>.<16 random hex digits>.tmp" beside the target, exclusively
    /// (fopen "x": O_CREAT | O_EXCL), trying other names while one exists.
    void create_temporary() {
        std::string stem = target_.filename().string();
        if (stem.size() > 64) stem.resize(64);  // the name stays well under NAME_MAX
        std::random_device random;
        for (int attempt = 0;; ++attempt) {
            const std::uint64_t tag = (std::uint64_t{random()} << 32) ^ random();
            char hex[17];
            std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(tag));
            temporary_ = target_.parent_path() / ("." + stem + "." + hex + ".tmp");
            errno = 0;
            file_ = std::fopen(temporary_.string().c_str(), "wbx");
            if (file_ != nullptr) return;
            const int error = errno;
            if (error == EEXIST && attempt < 16) continue;
            const std::filesystem::path folder = temporary_.parent_path();
            temporary_.clear();  // not ours
            fail("cannot be written: cannot create a temporary file in \"", folder.empty() ? "." : folder.string(),
                 "\": ", reason(error));
        }
    }

    std::filesystem::path target_;
    const char* who_;
    std::filesystem::path temporary_;  // ours while not empty
    std::FILE* file_ = nullptr;        // the open temporary file
    std::optional<std::filesystem::perms> permissions_;  // the target's, when it exists
};

}  // namespace diffattn::detail
