// Shared by every *_nomalloc test: detects heap allocations in every build type.
//
// With EIGEN_RUNTIME_NO_MALLOC, Eigen reports a forbidden heap allocation through eigen_assert,
// which NDEBUG (Release, the preset CI uses) turns into nothing. This header routes eigen_assert
// to a counter instead, so a forbidden allocation is a counted test failure in Release and Debug
// alike. Include it before anything that includes Eigen.
//
// It also replaces the global operator new, to count what Eigen's flag cannot see: std::string,
// std::vector and stream buffers (an error message formatted by a check that then passes, say).
// Replacement functions must be defined once per program, so include this header in one TU only;
// each *_nomalloc test is an executable of its own TU (tests/CMakeLists.txt).
#pragma once

#if defined(EIGEN_CORE_H) || defined(EIGEN_CORE_MODULE_H)
#error "include no_malloc_guard.hpp before any Eigen header"
#endif
#ifndef EIGEN_RUNTIME_NO_MALLOC
#define EIGEN_RUNTIME_NO_MALLOC
#endif

#include <atomic>
#include <cstdlib>
#include <new>

namespace diffattn_nomalloc {
inline std::atomic<int> failures{0};               // eigen_assert failures seen (any thread)
inline std::atomic<const char*> first_failure{nullptr};  // the first failed condition in without_malloc
/// The first failed condition since without_malloc began, for test messages.
inline const char* first_failure_text() {
    const char* condition = first_failure.load();
    return condition != nullptr ? condition : "none";
}
inline void record(const char* condition) {
    ++failures;
    const char* none = nullptr;
    first_failure.compare_exchange_strong(none, condition);  // keeps the first since without_malloc began
}
inline std::atomic<bool> counting_new{false};  // inside without_malloc: operator new counts as a failure
}  // namespace diffattn_nomalloc

// The global operator new, counted while without_malloc runs (the array and sized-delete
// forms forward to these in libstdc++; the aligned forms are left alone: the library's own aligned
// storage goes through Eigen, which the flag above watches). g++ 12 inlines these deletes into
// std::vector's destructor and then sees free() of memory from operator new: that is this pair's
// own contract (new is malloc here), so its -Wmismatched-new-delete is silenced for them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
    if (diffattn_nomalloc::counting_new.load(std::memory_order_relaxed)) diffattn_nomalloc::record("operator new");
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
// The nothrow forms too: a sanitizer runtime replaces them itself, and its memory must not reach
// the free() below (AddressSanitizer: alloc-dealloc-mismatch).
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
    try {
        return ::operator new(size);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return ::operator new(size, std::nothrow); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define eigen_assert(x)                                      \
    do {                                                     \
        if (!static_cast<bool>(x)) ::diffattn_nomalloc::record(#x); \
    } while (false)

#include <Eigen/Core>

namespace diffattn_nomalloc {

/// Runs `f` with Eigen's heap allocations forbidden and operator new counted; returns how many
/// allocations (and other eigen_assert failures) it triggered.
template <typename F>
int without_malloc(F&& f) {
    const int before = failures.load();
    first_failure = nullptr;
    Eigen::internal::set_is_malloc_allowed(false);
    counting_new = true;
    f();
    counting_new = false;
    Eigen::internal::set_is_malloc_allowed(true);
    return failures.load() - before;
}

}  // namespace diffattn_nomalloc
