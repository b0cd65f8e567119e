// Shared by every *_nomalloc test: detects heap allocations in every build type.
//
// With EIGEN_RUNTIME_NO_MALLOC, Eigen reports a forbidden heap allocation through eigen_assert,
// which NDEBUG (Release, the preset CI uses) turns into nothing. This header routes eigen_assert
// to a counter instead, so a forbidden allocation is a counted test failure in Release and Debug
// alike. Include it before anything that includes Eigen.
//
// It also counts the global operator new, to see what Eigen's flag cannot: std::string,
// std::vector and stream buffers (an error message formatted by a check that then passes, say).
// The replacement functions are defined once per program, in no_malloc_operator_new.cpp, which
// test_nomalloc (every *_nomalloc.cpp, tests/CMakeLists.txt) is built with.
#pragma once

#if defined(EIGEN_CORE_H) || defined(EIGEN_CORE_MODULE_H)
#error "include no_malloc_guard.hpp before any Eigen header"
#endif
#ifndef EIGEN_RUNTIME_NO_MALLOC
#define EIGEN_RUNTIME_NO_MALLOC
#endif

#include <atomic>

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
