// A counting allocator for the memory benchmarks (bench_memory, bench_analysis): glibc's
// allocator underneath, the heap bytes in use (g_in_use) and their peak (g_peak) on top, at
// malloc_usable_size granularity. Every malloc / calloc / realloc / posix_memalign /
// aligned_alloc / memalign of the process goes through it (operator new and Eigen's aligned
// allocations included). It defines those functions, so include it in one TU of a program only.
#pragma once

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

// ---- Counting allocator: glibc's allocator underneath, bytes in use and their peak on top ----
// (Not under a sanitizer, which brings its own malloc: then only maxrss_delta_bytes is measured.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DIFFATTN_BENCH_MALLOC_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DIFFATTN_BENCH_MALLOC_HOOK 0
#endif
#endif
#ifndef DIFFATTN_BENCH_MALLOC_HOOK
#define DIFFATTN_BENCH_MALLOC_HOOK 1
#endif

#if DIFFATTN_BENCH_MALLOC_HOOK
extern "C" {
void* __libc_malloc(std::size_t size);
void __libc_free(void* ptr);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* ptr, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

#endif

namespace {

std::atomic<long long> g_in_use{0};
std::atomic<long long> g_peak{0};

void note_allocated(void* p) {
    if (p == nullptr) return;
    const long long now = g_in_use.fetch_add(static_cast<long long>(malloc_usable_size(p))) +
                          static_cast<long long>(malloc_usable_size(p));
    long long peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
}

void note_freed(void* p) {
    if (p != nullptr) g_in_use.fetch_sub(static_cast<long long>(malloc_usable_size(p)));
}

}  // namespace

#if DIFFATTN_BENCH_MALLOC_HOOK
extern "C" {
void* malloc(std::size_t size) noexcept {
    void* p = __libc_malloc(size);
    note_allocated(p);
    return p;
}
void free(void* ptr) noexcept {
    note_freed(ptr);
    __libc_free(ptr);
}
void* calloc(std::size_t count, std::size_t size) noexcept {
    void* p = __libc_calloc(count, size);
    note_allocated(p);
    return p;
}
void* realloc(void* ptr, std::size_t size) noexcept {
    const long long before = ptr != nullptr ? static_cast<long long>(malloc_usable_size(ptr)) : 0;
    void* p = __libc_realloc(ptr, size);
    if (p != nullptr || size == 0) {
        g_in_use.fetch_sub(before);
        note_allocated(p);
    }
    return p;
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
    void* p = __libc_memalign(alignment, size);
    if (p == nullptr) return ENOMEM;
    note_allocated(p);
    *out = p;
    return 0;
}
void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
    void* p = __libc_memalign(alignment, size);
    note_allocated(p);
    return p;
}
void* memalign(std::size_t alignment, std::size_t size) noexcept {
    void* p = __libc_memalign(alignment, size);
    note_allocated(p);
    return p;
}
}
#endif

