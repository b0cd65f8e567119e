// The cases of linear() with weights stored as bf16, q8_0 and q4_0 (layers/stored_weight_dots.hpp,
// layers/linear.hpp's panels), shared by the portable layer tests (test_weight_formats.cpp) and
// the native build (stored_weights_native.cpp, whose AVX-512 decode only it compiles).
#pragma once

#include "naive_reference.hpp"

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/layers/linear.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

namespace stored_weight_test {

using diffattn::Index;
using diffattn::LinearWeight;
using diffattn::RowMatrix;
using diffattn::WeightFormat;

inline constexpr WeightFormat kStoredFormats[] = {WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0};

/// Widths a format takes: around blocks and packets; bf16 also widths that end in a partial block.
inline std::vector<Index> depths_of(WeightFormat format) {
    if (format == WeightFormat::bf16) return {7, 37, 161, 1100};
    return {32, 96, 1056};
}

/// Every decoded weight is exact in T (q d: at most 8 + 11 bits; bf16: 8), so linear() sums exact
/// products: each output within gamma_K = K eps / (1 - K eps) of sum |x_k w_k| of the product of
/// the decoded weights (Higham, eq. 3.5). Row counts 1-16 take the few-rows dots (a row of x alone
/// gives the same bits as in its group), 17-40 and 530 the panels (530 rows: two token blocks);
/// 1-3 threads give the same bits; nothing outside out is written.
template <typename T>
void check_stored_products() {
    constexpr double eps = std::numeric_limits<T>::epsilon();
    std::uint64_t seed = 5;
    for (WeightFormat format : kStoredFormats) {
        for (Index depth : depths_of(format)) {
            for (Index rows : {1, 2, 3, 5, 8, 9, 15, 17, 40, 530}) {
                if (rows == 530 && depth > 200) continue;
                const Index features = 1 + static_cast<Index>(++seed * 7919 % 70);
                INFO(to_string(format) << ", " << rows << " rows, depth " << depth << ", " << features << " features");
                const RowMatrix<T> wide_x = naive::seeded<T>(rows, depth + 3, seed);
                const auto x = wide_x.middleCols(1, depth);
                LinearWeight<T> w(features, depth, format);
                w = naive::seeded<T>(features, depth, seed + 1);
                const RowMatrix<T> decoded = w.decoded();
                RowMatrix<T> wide_out = RowMatrix<T>::Constant(rows, features + 3, T(9));
                diffattn::linear<T>(x, w, wide_out.middleCols(1, features), diffattn::ExecutionContext{1, 0.0});
                const naive::Mat xd = x.template cast<double>(), wd = decoded.template cast<double>();
                const naive::Mat expected = naive::linear(xd, wd);
                const naive::Mat bound = naive::linear(xd.cwiseAbs(), wd.cwiseAbs()) * (depth * eps / (1 - depth * eps));
                const naive::Mat error = (wide_out.middleCols(1, features).template cast<double>() - expected).cwiseAbs();
                CHECK((error.array() <= bound.array() + 1e-300).all());
                CHECK((wide_out.col(0).array() == T(9)).all());
                CHECK((wide_out.rightCols(2).array() == T(9)).all());
                for (int threads = 2; threads <= 3 && (rows == 3 || rows == 17 || rows == 530); ++threads) {
                    RowMatrix<T> again(rows, features);
                    diffattn::linear<T>(x, w, again, diffattn::ExecutionContext{threads, 0.0});
                    CHECK((again.array() == wide_out.middleCols(1, features).array()).all());
                }
                RowMatrix<T> alone(1, features);
                for (Index r = 0; rows < diffattn::detail::kFewRowsLinear && r < rows; r += 3) {
                    diffattn::linear<T>(x.middleRows(r, 1), w, alone, diffattn::ExecutionContext{1, 0.0});
                    CHECK((alone.array() == wide_out.block(r, 1, 1, features).array()).all());
                }
            }
        }
    }
}

/// The panel decode (layers/stored_weight_dots.hpp) gives the reference codec's weights bit for
/// bit, from any block-aligned column on.
template <typename T>
void check_stored_panels() {
    for (WeightFormat format : kStoredFormats) {
        for (Index depth : depths_of(format)) {
            LinearWeight<T> w(5, depth, format);
            w = naive::seeded<T>(5, depth, static_cast<std::uint64_t>(depth));
            const RowMatrix<T> decoded = w.decoded();
            for (Index first = 0; first < depth; first += 32) {
                const Index count = depth - first;
                RowMatrix<T> panel = RowMatrix<T>::Constant(3, count, T(7));
                diffattn::detail::decode_stored_panel(w.view(), 1, 3, first, count, panel.data(), count);
                INFO(to_string(format) << ", depth " << depth << ", from column " << first);
                CHECK((panel.array() == decoded.block(1, first, 3, count).array()).all());
            }
        }
    }
}

}  // namespace stored_weight_test
