// Shared by every *_nomalloc test: detects Eigen heap allocations in every build type.
//
// With EIGEN_RUNTIME_NO_MALLOC, Eigen reports a forbidden heap allocation through eigen_assert,
// which NDEBUG (Release, the preset CI uses) turns into nothing. This header routes eigen_assert
// to a counter instead, so a forbidden allocation is a counted test failure in Release and Debug
// alike. Include it before anything that includes Eigen.
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
inline std::atomic<const char*> first_failure{""};  // the first failed condition, for messages
inline void record(const char* condition) {
    if (failures++ == 0) first_failure = condition;
}
}  // namespace diffattn_nomalloc

#define eigen_assert(x)                                      \
    do {                                                     \
        if (!static_cast<bool>(x)) ::diffattn_nomalloc::record(#x); \
    } while (false)

#include <Eigen/Core>

namespace diffattn_nomalloc {

/// Runs `f` with Eigen's heap allocations forbidden; returns how many forbidden allocations
/// (and other eigen_assert failures) it triggered.
template <typename F>
int without_malloc(F&& f) {
    const int before = failures.load();
    Eigen::internal::set_is_malloc_allowed(false);
    f();
    Eigen::internal::set_is_malloc_allowed(true);
    return failures.load() - before;
}

}  // namespace diffattn_nomalloc
