// Refusing, before allocating it, a buffer the machine cannot hold.
//
// Sizes that come from a caller (a state's or a cache's max_len, a generation count) are checked
// where they enter: the bytes they ask for are computed in long double, which cannot overflow,
// and compared with memory_limit_bytes(). A request over the limit is a diffattn error naming the
// bytes, instead of std::bad_alloc or std::length_error from deep inside, or the OOM killer.
//
// The limit is the machine's physical memory (sysconf(_SC_PHYS_PAGES) x page size where POSIX
// has it; PTRDIFF_MAX, the largest object, elsewhere), not the memory free at the moment: it is
// the same on every run, so whether a size is accepted is reproducible on a machine, and a request
// above it can never be met (the buffers are written in full, so overcommitted pages would be
// touched and the process killed). Below it, the allocation may still fail with std::bad_alloc
// when other programs hold the memory.
#pragma once

#include "diffattn/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#if defined(__has_include)
#if __has_include(<unistd.h>)
#include <unistd.h>
#endif
#endif

namespace diffattn {

/// The largest number of bytes the library allocates for one request: the machine's physical
/// memory, at most PTRDIFF_MAX (see the file comment).
inline long double memory_limit_bytes() noexcept {
    const auto largest_object = static_cast<long double>(std::numeric_limits<std::ptrdiff_t>::max());
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
        const long double physical = static_cast<long double>(pages) * static_cast<long double>(page_size);
        return physical < largest_object ? physical : largest_object;
    }
#endif
    return largest_object;
}

namespace detail {

/// A byte count for a message: exact below 2^64, else in scientific notation.
inline std::string byte_count_text(long double bytes) {
    std::ostringstream out;
    if (bytes < 18446744073709551615.0L) {
        out << static_cast<std::uint64_t>(bytes);
    } else {
        out << bytes;
    }
    return out.str();
}

}  // namespace detail

/// Throws ErrorType("<what...> would take <bytes> bytes, more than the <limit> bytes of physical
/// memory of this machine") when `bytes` exceeds memory_limit_bytes(). Call it before allocating.
template <typename ErrorType = ShapeError, typename... What>
void require_memory(long double bytes, What&&... what) {
    const long double limit = memory_limit_bytes();
    if (!(bytes <= limit)) {
        throw ErrorType(detail::concat(std::forward<What>(what)..., " would take ", detail::byte_count_text(bytes),
                                       " bytes, more than the ", detail::byte_count_text(limit),
                                       " bytes of physical memory of this machine"));
    }
}

}  // namespace diffattn
