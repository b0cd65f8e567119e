// Asking Linux to back a large buffer that a decode step streams (a KV cache, a weight matrix) with
// 2 MB transparent huge pages.
//
// A decode step reads every cached key and value once, so its floor is their bytes over the memory
// bandwidth. Over 4 KB pages one core's hardware prefetcher stops at every page boundary and a page
// walk is dear in a virtual machine (nested paging); over 2 MB pages the KV caches' steps ran
// 1.1-1.3x faster on one or two threads (docs/benchmarks.md, "The KV cache on huge pages").
// Debian's transparent-huge-page mode is "madvise", so a buffer gets huge pages only if it asks.
//
// This is advice: where the kernel declines (THP "never", no huge page free, another OS) the buffer
// keeps its pages and every result is the same; nothing here throws or changes contents. Only the
// 2 MB-aligned interior of a buffer is advised (huge_page_interior), so no page that holds anything
// else is touched, and a buffer that holds no aligned 2 MB gets no advice.
#pragma once

#include "diffattn/core/types.hpp"

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace diffattn {

/// The size of a transparent huge page on x86-64 and (4 KB base pages) AArch64 Linux.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// The whole 2 MB pages inside [begin, begin + bytes): [first, end), first == end where there are
/// none.
struct HugePageInterior {
    std::uintptr_t first = 0;
    std::uintptr_t end = 0;
    std::size_t bytes() const { return end - first; }
};

inline HugePageInterior huge_page_interior(std::uintptr_t begin, std::size_t bytes) {
    const std::uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    const std::uintptr_t end = (begin + bytes) / kHugePageBytes * kHugePageBytes;
    return end > first ? HugePageInterior{first, end} : HugePageInterior{};
}

/// Asks for huge pages for the interior of [data, data + bytes): for a buffer just allocated,
/// before it is written, since the advice shapes the pages that writing will bring in.
inline void advise_huge_pages(const void* data, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const HugePageInterior interior = huge_page_interior(reinterpret_cast<std::uintptr_t>(data), bytes);
    if (data != nullptr && interior.bytes() > 0) {
        (void)::madvise(reinterpret_cast<void*>(interior.first), interior.bytes(), MADV_HUGEPAGE);
    }
#else
    (void)data, (void)bytes;
#endif
}

/// An uninitialised rows x cols Eigen matrix whose pages are advised (advise_huge_pages).
template <typename Matrix>
Matrix huge_page_matrix(Index rows, Index cols) {
    Matrix m(rows, cols);
    advise_huge_pages(m.data(), static_cast<std::size_t>(m.size()) * sizeof(typename Matrix::Scalar));
    return m;
}

}  // namespace diffattn
