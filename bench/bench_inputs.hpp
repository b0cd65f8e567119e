// Random inputs of the Google Benchmark programs of bench/ (header-only, bench-local): float
// matrices of normal entries, from a seed.
#pragma once

#include <diffattn/core/types.hpp>

#include <random>

namespace bench {

using diffattn::Index;
using Matrix = diffattn::RowMatrix<float>;

inline Matrix random_matrix(Index rows, Index cols, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

}  // namespace bench
