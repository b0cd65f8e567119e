// The counting global operator new of the *_nomalloc tests (no_malloc_guard.hpp): replacement
// functions are defined once per program, so here, in a file of test_nomalloc's own.
#include "no_malloc_guard.hpp"

#include <cstdlib>
#include <new>

// The global operator new, counted while without_malloc runs (the array and sized-delete forms
// forward to these in libstdc++; the aligned forms are left alone: the library's own aligned
// storage goes through Eigen, which EIGEN_RUNTIME_NO_MALLOC watches). g++ 12 inlines these deletes
// into std::vector's destructor and then sees free() of memory from operator new: that is this
// pair's own contract (new is malloc here), so its -Wmismatched-new-delete is silenced for them.
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
