// A regular file mapped read-only into memory (POSIX mmap), for the checkpoint loader
// (docs/checkpoints.md, "Files"): a multi-gigabyte shard is converted tensor by tensor straight
// from the mapping, and release() hands each tensor's pages back once it is converted, so that
// loading holds the model plus about one tensor, never a copy of the files.
//
// The mapping is private and read-only: nothing is ever written to the file. As with every mmap
// reader (the safetensors library included), a file truncated by another process while it is
// mapped makes the next access to the lost pages fault (SIGBUS); the loader maps, validates and
// converts in one call, and the files of a checkpoint are not expected to change meanwhile.
// Without <sys/mman.h> (not POSIX) the file is read into memory instead: the same interface.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/file_kind.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#if __has_include(<sys/mman.h>) && __has_include(<unistd.h>)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define DIFFATTN_HAS_MMAP 1
#else
#include <fstream>
#include <vector>
#define DIFFATTN_HAS_MMAP 0
#endif

namespace diffattn::detail {

class MappedFile {
public:
    MappedFile() = default;

    /// Maps the regular file at `path`. `what` starts every message (e.g. "safetensors file
    /// \"<path>\""). FileError when the file is missing, not a regular file, or cannot be mapped.
    MappedFile(const std::filesystem::path& path, const std::string& what) {
        require_regular_file(path, [&](const auto&... parts) { fail(what, ": ", parts...); });
#if DIFFATTN_HAS_MMAP
        errno = 0;
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail(what, ": cannot open the file for reading: ", std::generic_category().message(errno));
        struct ::stat info {};
        if (::fstat(fd, &info) != 0) {
            const int reason = errno;
            ::close(fd);
            fail(what, ": cannot get the file size: ", std::generic_category().message(reason));
        }
        size_ = static_cast<std::size_t>(info.st_size);
        if (size_ != 0) {  // mmap of 0 bytes fails; an empty file is an empty mapping
            void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            const int reason = errno;
            ::close(fd);  // the mapping keeps the file open
            if (data == MAP_FAILED) fail(what, ": cannot map the file: ", std::generic_category().message(reason));
            data_ = static_cast<const unsigned char*>(data);
        } else {
            ::close(fd);
        }
#else
        std::ifstream in(path, std::ios::binary);
        if (!in) fail(what, ": cannot open the file for reading");
        copy_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (in.bad()) fail(what, ": read error");
        data_ = copy_.data();
        size_ = copy_.size();
#endif
    }

    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& other) noexcept { swap(other); }
    MappedFile& operator=(MappedFile&& other) noexcept {
        MappedFile(std::move(other)).swap(*this);
        return *this;
    }
    ~MappedFile() {
#if DIFFATTN_HAS_MMAP
        if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
#endif
    }

    /// The file's bytes [size()] (null for an empty file).
    const unsigned char* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }

    /// Drops the resident pages of bytes [begin, end) (whole pages, rounded outwards): they are read
    /// from the file again if touched later. Only resident memory changes, never the contents.
    void release(std::uint64_t begin, std::uint64_t end) const noexcept {
#if DIFFATTN_HAS_MMAP
        if (data_ == nullptr || begin >= end || end > size_) return;
        const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
        const std::uint64_t first = begin / page * page;
        const std::uint64_t last = (end + page - 1) / page * page;
        const std::uint64_t length = (last < size_ ? last : static_cast<std::uint64_t>(size_)) - first;
        ::madvise(const_cast<unsigned char*>(data_) + first, static_cast<std::size_t>(length), MADV_DONTNEED);
#else
        (void)begin;
        (void)end;
#endif
    }

private:
    template <typename... Parts>
    [[noreturn]] static void fail(Parts&&... parts) {
        throw FileError(concat(std::forward<Parts>(parts)...));
    }

    void swap(MappedFile& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
#if !DIFFATTN_HAS_MMAP
        std::swap(copy_, other.copy_);
#endif
    }

    const unsigned char* data_ = nullptr;
    std::size_t size_ = 0;
#if !DIFFATTN_HAS_MMAP
    std::vector<unsigned char> copy_;
#endif
};

}  // namespace diffattn::detail
