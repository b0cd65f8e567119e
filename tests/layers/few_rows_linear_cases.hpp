// The cases of linear() on fewer than detail::kFewRowsLinear rows (detail::few_rows_linear), shared
// by the portable layer tests (test_basic_layers.cpp) and the native build (few_rows_linear_native.cpp,
// whose AVX-512 registers take the wide groups of 5-8 rows).
#pragma once

#include "naive_reference.hpp"

#include "diffattn/layers/linear.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

/// Fewer than kFewRowsLinear rows take detail::few_rows_linear (W read once); 16 and more Eigen's
/// GEMM. Every row count to 17; inner widths around the SIMD packet (tails of every length), on both
/// sides of the 3 KB bound of one row's row-by-row path (300 and 700: 1.2 / 2.8 KB in float, 2.4 /
/// 5.6 KB in double) and past the wide groups' 2 KB chunks of x; 1-70 features (past a wide group's
/// block of 48 W rows); a W block boundary (4000 doubles: 32 KB rows); x and out as column blocks
/// of wider matrices, at depth 1019 with rows a multiple of 4 KB apart (the wide groups copy such x
/// chunks first). Each output is one dot product: within gamma_K = K eps / (1 - K eps) of sum
/// |x_k w_k| (Higham, eq. 3.5), and the same bits as the call of its row alone (a batched decode
/// step equals each sequence's own).
template <typename T>
void check_few_rows_linear() {
    using diffattn::Index;
    using diffattn::RowMatrix;
    constexpr double eps = std::numeric_limits<T>::epsilon();
    std::uint64_t seed = 11;
    const Index depths[] = {1, 3, 7, 8, 16, 17, 33, 100, 129, 300, 700, 1019, 1100, 4000};
    const Index page = 4096 / static_cast<Index>(sizeof(T));  // entries in 4 KB
    for (Index rows = 1; rows <= 17; ++rows) {
        for (Index depth : depths) {
            const Index features = 1 + static_cast<Index>(++seed * 7919 % 70);
            INFO(rows << " rows, depth " << depth << ", " << features << " features");
            const Index x_width = depth == 1019 ? (depth + 2 + page - 1) / page * page : depth + 5;
            const RowMatrix<T> wide_x = naive::seeded<T>(rows, x_width, seed);
            const RowMatrix<T> w = naive::seeded<T>(features, depth, seed + 1);
            RowMatrix<T> wide_out = RowMatrix<T>::Constant(rows, features + 3, T(9));
            const auto x = wide_x.middleCols(2, depth);
            diffattn::linear<T>(x, w, wide_out.middleCols(1, features), diffattn::ExecutionContext{1, 0.0});
            const naive::Mat xd = x.template cast<double>(), wd = w.template cast<double>();
            const naive::Mat expected = naive::linear(xd, wd);
            const naive::Mat bound = naive::linear(xd.cwiseAbs(), wd.cwiseAbs()) * (depth * eps / (1 - depth * eps));
            const naive::Mat error = (wide_out.middleCols(1, features).template cast<double>() - expected).cwiseAbs();
            CHECK((error.array() <= bound.array() + 1e-300).all());
            CHECK((wide_out.col(0).array() == T(9)).all());  // nothing outside out is written
            CHECK((wide_out.rightCols(2).array() == T(9)).all());
            RowMatrix<T> alone(1, features);
            for (Index r = 0; rows < diffattn::detail::kFewRowsLinear && r < rows; ++r) {
                diffattn::linear<T>(x.middleRows(r, 1), w, alone, diffattn::ExecutionContext{1, 0.0});
                CHECK((alone.array() == wide_out.block(r, 1, 1, features).array()).all());
            }
        }
    }
}
