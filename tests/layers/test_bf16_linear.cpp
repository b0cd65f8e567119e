// Projections with BF16 products (layers/panel_products.hpp, docs/math.md §10.1): every path this CPU
// runs, every weight format, against sums in double of the operands rounded to BF16.
#include "naive_reference.hpp"

#include "diffattn/core/linear_weight.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"
#include "diffattn/kernels/product_path.hpp"
#include "diffattn/layers/linear.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace diffattn;

namespace {

naive::Mat rounded_to_bf16(const RowMatrix<float>& m) {
    return m.unaryExpr([](float v) { return detail::round_to_bf16(v); }).cast<double>();
}

ExecutionContext bf16_context(int threads, Compute compute) {
    ExecutionContext context{threads, 0.0};
    context.compute = compute;
    return context;
}

}  // namespace

// Products of BF16 values are exact in fp32, so each output is within gamma_K sum |x~ w~| of the
// double product of the rounded operands x~ and w~ (Higham, eq. 3.5), plus K 2^-126 for
// vdpbf16ps's flushed denormals; and within (2u + u^2) sum |x w| more of the float operands'
// product (u = 2^-8), as §10.1 states. Rows 16-300 (a chunk of 256 rounded rows and a rest),
// depths up to 1056 (two panels of the inner dimension), 300 features (two panels of rows); 1 and 3
// threads give the same bits; nothing outside out is written.
TEST_CASE("linear with BF16 products: fp32 sums of the BF16-rounded operands", "[layers][bf16]") {
    constexpr double eps = std::numeric_limits<float>::epsilon() / 2;  // unit roundoff 2^-24
    constexpr double u = 1.0 / 256;
    std::uint64_t seed = 11;
    struct Shape {
        Index rows, depth, features;
    };
    const Shape shapes[] = {{16, 96, 33}, {40, 1056, 21}, {300, 64, 300}, {17, 160, 70}};
    for (Compute compute : bf16_paths_here()) {
        for (WeightFormat format : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0}) {
            for (const Shape& shape : shapes) {
                const Index rows = shape.rows, depth = shape.depth, features = shape.features;
                INFO(to_string(compute) << ", " << to_string(format) << ", " << rows << " rows, depth " << depth
                                        << ", " << features << " features");
                const RowMatrix<float> wide_x = naive::seeded<float>(rows, depth + 3, ++seed);
                const RowMatrix<float> x = wide_x.middleCols(1, depth);
                LinearWeight<float> w(features, depth, format);
                w = naive::seeded<float>(features, depth, ++seed);
                const RowMatrix<float> decoded = w.decoded();
                RowMatrix<float> wide_out = RowMatrix<float>::Constant(rows, features + 2, 9.0f);
                linear<float>(wide_x.middleCols(1, depth), w, wide_out.middleCols(1, features),
                              bf16_context(1, compute));
                const naive::Mat out = wide_out.middleCols(1, features).cast<double>();
                const naive::Mat xr = rounded_to_bf16(x), wr = rounded_to_bf16(decoded);
                const double gamma = depth * eps / (1 - depth * eps);
                const bool flushes = compute == Compute::bf16_dot || compute == Compute::bf16_amx;
                const double flushed = flushes ? depth * std::ldexp(1.0, -126) : 0.0;
                const naive::Mat exact = naive::linear(xr, wr);
                const naive::Mat bound = naive::linear(xr.cwiseAbs(), wr.cwiseAbs()) * gamma;
                CHECK(((out - exact).cwiseAbs().array() <= bound.array() + flushed).all());
                // Against the float operands' product: their rounding adds at most (2u + u^2) sum |x w|.
                const naive::Mat xd = x.cast<double>(), wd = decoded.cast<double>();
                const naive::Mat rounding = naive::linear(xd.cwiseAbs(), wd.cwiseAbs()) * (2 * u + u * u);
                CHECK(((out - naive::linear(xd, wd)).cwiseAbs().array() <= rounding.array() + bound.array() + flushed)
                          .all());
                CHECK((out.array() != naive::linear(xd, wd).array()).any());  // the operands were rounded
                CHECK((wide_out.col(0).array() == 9.0f).all());
                CHECK((wide_out.col(features + 1).array() == 9.0f).all());
                RowMatrix<float> again(rows, features);
                linear<float>(x, w, again, bf16_context(3, compute));
                CHECK((again.array() == wide_out.middleCols(1, features).array()).all());
            }
        }
    }
}

TEST_CASE("linear with BF16 products: Compute::bf16 takes this CPU's path; few rows stay in float",
          "[layers][bf16]") {
    const RowMatrix<float> x = naive::seeded<float>(40, 96, 3);
    const RowMatrix<float> w = naive::seeded<float>(24, 96, 4);
    RowMatrix<float> automatic(40, 24), named(40, 24);
    linear<float>(x, w, automatic, bf16_context(2, Compute::bf16));
    linear<float>(x, w, named, bf16_context(2, compute_of(product_path(Compute::bf16))));
    CHECK((automatic.array() == named.array()).all());
    // A decode step (fewer than kFewRowsLinear rows) reads W once in float whatever the compute.
    const auto few = x.topRows(detail::kFewRowsLinear - 1);
    RowMatrix<float> plain(few.rows(), 24), bf16(few.rows(), 24);
    linear<float>(few, w, plain, ExecutionContext{2, 0.0});
    linear<float>(few, w, bf16, bf16_context(2, Compute::bf16));
    CHECK((plain.array() == bf16.array()).all());
    // The context's panels without room for the operands: the call makes its own.
    WeightPanels f32_panels(2, sizeof(float));
    ExecutionContext context = bf16_context(2, Compute::bf16);
    context.panels = &f32_panels;
    RowMatrix<float> own(40, 24);
    linear<float>(x, w, own, context);
    CHECK((own.array() == automatic.array()).all());
}
