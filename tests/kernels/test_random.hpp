// Seeded random inputs of the kernel tests: the run's base seed, each test's own generator
// (DIFFATTN_TEST_RNG) and the random matrices drawn from it.
//
// Seeds. Every test draws from its own std::mt19937 seeded with the base seed combined with the
// test's name (so tests do not depend on each other or on their order). The base seed is
// DIFFATTN_TEST_SEED from the environment, or kDefaultSeed; it is printed once per run and added
// to every failure message (INFO), so any failure is reproduced with
//     DIFFATTN_TEST_SEED=<seed> ./test_kernels "<test name>"
#pragma once

#include <catch2/catch.hpp>

#include "diffattn/core/types.hpp"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

namespace diffattn::test {

inline constexpr std::uint32_t kDefaultSeed = 20240611u;

/// The run's base seed: DIFFATTN_TEST_SEED, or kDefaultSeed. Printed once.
inline std::uint32_t base_seed() {
    static const std::uint32_t seed = [] {
        std::uint32_t value = kDefaultSeed;
        if (const char* env = std::getenv("DIFFATTN_TEST_SEED"); env != nullptr && *env != '\0') {
            value = static_cast<std::uint32_t>(std::strtoul(env, nullptr, 0));
        }
        std::cerr << "diffattn kernel tests: base seed " << value << " (set DIFFATTN_TEST_SEED to reproduce or vary)\n";
        return value;
    }();
    return seed;
}

/// Seed of the running test: base seed mixed with the FNV-1a hash of the test's name.
inline std::uint32_t test_seed() {
    const std::string name = Catch::getResultCapture().getCurrentTestName();
    std::uint32_t hash = 2166136261u;
    for (const unsigned char c : name) hash = (hash ^ c) * 16777619u;
    return base_seed() ^ hash;
}

/// Declares `std::mt19937 rng` for the running test and logs its seed with every failure.
#define DIFFATTN_TEST_RNG(rng)                                                                                \
    const std::uint32_t rng##_seed = ::diffattn::test::test_seed();                                           \
    INFO("base seed " << ::diffattn::test::base_seed() << " (DIFFATTN_TEST_SEED), test seed " << rng##_seed); \
    std::mt19937 rng(rng##_seed)

/// Uniform integer in [lo, hi].
inline Index uniform_index(std::mt19937& rng, Index lo, Index hi) {
    return std::uniform_int_distribution<Index>(lo, hi)(rng);
}

/// rows x cols matrix with entries uniform in [lo, hi) (drawn in double, rounded once to T).
template <typename T>
RowMatrix<T> random_matrix(std::mt19937& rng, Index rows, Index cols, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> uniform(lo, hi);
    RowMatrix<T> m(rows, cols);
    for (Index i = 0; i < rows; ++i) {
        for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<T>(uniform(rng));
    }
    return m;
}

/// Element-wise conversion (copies a block or a Ref into a plain RowMatrix).
template <typename To, typename Matrix>
RowMatrix<To> cast_to(const Matrix& m) {
    return m.template cast<To>();
}

}  // namespace diffattn::test
