// RMSNorm, SwiGLU, interleaved rotary and lambda against the double transcription of docs/math.md §2.5,
// 3.1 and 4 in naive_reference.hpp.
#include "few_rows_linear_cases.hpp"
#include "naive_reference.hpp"

#include "diffattn/layers/lambda.hpp"
#include "diffattn/layers/linear.hpp"
#include "diffattn/layers/rms_norm.hpp"
#include "diffattn/layers/rotary.hpp"
#include "diffattn/layers/swiglu.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace diffattn;

namespace {

/// Max |a - b| over max(1, max |b|): a relative error for O(1) data.
template <typename A>
double relative_error(const A& actual, const naive::Mat& expected) {
    const double scale = std::max(1.0, expected.cwiseAbs().maxCoeff());
    return (actual.template cast<double>() - expected).cwiseAbs().maxCoeff() / scale;
}

/// Tolerance for a few chained float / double operations on O(1) data of width ~100.
template <typename T>
double tolerance() {
    return 64 * std::numeric_limits<T>::epsilon();
}

using naive::seeded;

}  // namespace

TEMPLATE_TEST_CASE("RmsNorm matches docs/math.md §4, also in place and on a column block", "[layers][rms_norm]", float,
                   double) {
    using T = TestType;
    const Index n = 7, f = 24;
    RmsNorm<T> norm(f, 1e-5);
    norm.weight = seeded<T>(f, 1, 2).col(0);
    const RowMatrix<T> x = seeded<T>(n, f, 1, 3.0);
    const naive::Mat expected = naive::rms_norm(x.template cast<double>(), norm.weight.transpose().template cast<double>(), 1e-5);

    RowMatrix<T> y(n, f);
    norm(x, y);
    CHECK(relative_error(y, expected) < tolerance<T>());

    RowMatrix<T> in_place = x;
    norm(in_place, in_place);
    CHECK((in_place - y).cwiseAbs().maxCoeff() == T(0));

    // A head inside a wider matrix: the neighbouring columns stay untouched.
    RowMatrix<T> wide = RowMatrix<T>::Constant(n, 3 * f, T(7));
    wide.middleCols(f, f) = x;
    norm(wide.middleCols(f, f), wide.middleCols(f, f));
    CHECK((wide.middleCols(f, f) - y).cwiseAbs().maxCoeff() == T(0));
    CHECK((wide.leftCols(f).array() == T(7)).all());
    CHECK((wide.rightCols(f).array() == T(7)).all());

    // eps matters for small rows.
    RmsNorm<T> big_eps(f, 1.0);
    big_eps.weight = norm.weight;
    RowMatrix<T> tiny = x * T(1e-3), y_big(n, f);
    big_eps(tiny, y_big);
    const naive::Mat expected_big =
        naive::rms_norm(tiny.template cast<double>(), norm.weight.transpose().template cast<double>(), 1.0);
    CHECK(relative_error(y_big, expected_big) < tolerance<T>());

    RowMatrix<T> wrong(n, f + 1);
    CHECK_THROWS_AS(norm(x, wrong), ShapeError);
}

TEMPLATE_TEST_CASE("SwiGlu matches docs/math.md §4", "[layers][swiglu]", float, double) {
    using T = TestType;
    const Index n = 9, d = 16, f = 43;
    SwiGlu<T> mlp(d, f);
    mlp.gate_proj = seeded<T>(f, d, 1, 0.5);
    mlp.up_proj = seeded<T>(f, d, 2, 0.5);
    mlp.down_proj = seeded<T>(d, f, 3, 0.3);
    const RowMatrix<T> x = seeded<T>(n, d, 4, 2.0);
    SwiGluScratch<T> scratch(12, f);
    RowMatrix<T> y(n, d);
    mlp(x, y, scratch);
    const naive::Mat expected =
        naive::swiglu(x.template cast<double>(), mlp.gate_proj.dense().template cast<double>(),
                      mlp.up_proj.dense().template cast<double>(), mlp.down_proj.dense().template cast<double>());
    CHECK(relative_error(y, expected) < tolerance<T>());
    CHECK(SwiGlu<T>::parameter_count(d, f) == 3 * d * f);

    SwiGluScratch<T> small(n - 1, f);
    CHECK_THROWS_AS(mlp(x, y, small), ShapeError);
}

TEST_CASE("linear is x W^T and checks shapes", "[layers][linear]") {
    const RowMatrix<double> x = seeded<double>(3, 5, 1), w = seeded<double>(4, 5, 2);
    RowMatrix<double> y(3, 4);
    linear<double>(x, w, y);
    CHECK((y - naive::linear(x, w)).cwiseAbs().maxCoeff() < 1e-14);
    RowMatrix<double> bad(3, 5);
    CHECK_THROWS_AS(linear<double>(x, w, bad), ShapeError);
    CHECK_THROWS_AS(linear<double>(x, x, y), ShapeError);
}

TEMPLATE_TEST_CASE("linear on several threads: fixed column blocks, the same bits for every thread count",
                   "[layers][linear][threads]", float, double) {
    using T = TestType;
    // Shapes cut into several blocks of features (7 tokens, and one: a decode step) or of tokens,
    // with a partial last block; 0 min flops per thread so even these small products use every thread.
    const Index shapes[][2] = {{7, 40}, {7, 1100}, {1, 1100}, {1030, 40}};
    for (const auto& shape : shapes) {
        const Index tokens = shape[0], out_features = shape[1];
        INFO(tokens << " tokens, " << out_features << " output features");
        const RowMatrix<T> x = seeded<T>(tokens, 33, 3), w = seeded<T>(out_features, 33, 4);
        RowMatrix<T> one(tokens, out_features), more(tokens, out_features);
        linear<T>(x, w, one, ExecutionContext{1, 0.0});
        CHECK(relative_error(one, naive::linear(x.template cast<double>(), w.template cast<double>())) < tolerance<T>());
        for (int threads : {2, 3}) {
            more.setConstant(T(7));
            linear<T>(x, w, more, ExecutionContext{threads, 0.0});
            CHECK((more.array() == one.array()).all());
        }
    }
    // Those shapes do cut: 1100 features and 1030 tokens make two blocks each.
    CHECK(detail::linear_block(1100, detail::kLinearBlockTarget, detail::kLinearFeatureMultiple) == 560);
    CHECK(detail::linear_block(1030, detail::kLinearBlockTarget, 1) == 515);
    CHECK(detail::linear_block(40, detail::kLinearBlockTarget, detail::kLinearFeatureMultiple) == 48);
    // A few-rows product's features go in as many blocks per thread (its outputs do not depend on
    // the blocks), at least two each on a team: 2816 features (a SwiGLU's) in 6 blocks on 2
    // threads, where fixed blocks made 5; one thread takes a small weight whole.
    const auto few_rows_blocks = [](Index features, int team) {
        const Index block = detail::few_rows_feature_block(features, team);
        CHECK(block % detail::kLinearFeatureMultiple == 0);
        return (features + block - 1) / block;
    };
    CHECK(few_rows_blocks(2816, 2) == 6);
    CHECK(few_rows_blocks(1100, 3) == 6);   // blocks of 192 features
    CHECK(few_rows_blocks(11008, 2) == 22);
    CHECK(few_rows_blocks(1100, 2) == 4);   // blocks of 288
    CHECK(few_rows_blocks(256, 2) == 4);    // the bench model's attention projections
    CHECK(few_rows_blocks(40, 2) == 3);     // 16, 16 and 8 features
    CHECK(few_rows_blocks(256, 1) == 1);
    CHECK(few_rows_blocks(1100, 1) == 2);
}

TEMPLATE_TEST_CASE("linear_each is linear of each product, the same bits on every thread count",
                   "[layers][linear][threads]", float, double) {
    using T = TestType;
    // One token (a decode step: few_rows_linear), 7 tokens and 1030 (Eigen's GEMM, two token
    // blocks); three weights of the same x, the second with a partial last block and the third empty.
    for (const Index tokens : {Index(1), Index(7), Index(1030)}) {
        INFO(tokens << " tokens");
        const RowMatrix<T> x = seeded<T>(tokens, 33, 5);
        const RowMatrix<T> w[3] = {seeded<T>(40, 33, 6), seeded<T>(1100, 33, 7), RowMatrix<T>(0, 33)};
        RowMatrix<T> alone[3], together[3];
        for (int i = 0; i < 3; ++i) {
            alone[i].resize(tokens, w[i].rows());
            linear<T>(x, w[i], alone[i], ExecutionContext{1, 0.0});
        }
        for (int threads : {1, 2, 3}) {
            for (int i = 0; i < 3; ++i) together[i].setConstant(tokens, w[i].rows(), T(7));
            linear_each<T>(x, {{w[0], together[0]}, {w[1], together[1]}, {w[2], together[2]}},
                           ExecutionContext{threads, 0.0});
            for (int i = 0; i < 3; ++i) CHECK((together[i].array() == alone[i].array()).all());
        }
    }
    // Each product's shapes are checked, whichever it is.
    const RowMatrix<T> x = seeded<T>(2, 5, 1), w = seeded<T>(4, 5, 2), narrow = seeded<T>(4, 3, 3);
    RowMatrix<T> y(2, 4), z(2, 4), bad(2, 5);
    CHECK_THROWS_AS(linear_each<T>(x, {{w, y}, {w, bad}}), ShapeError);
    CHECK_THROWS_AS(linear_each<T>(x, {{w, y}, {narrow, z}}), ShapeError);
}

TEMPLATE_TEST_CASE("linear of a few rows (a decode step) on randomised shapes and strided blocks",
                   "[layers][linear]", float, double) {
    check_few_rows_linear<TestType>();  // few_rows_linear_cases.hpp
}

TEMPLATE_TEST_CASE("interleaved rotary matches docs/math.md §3.1 on every map of a wide matrix", "[layers][rotary]", float,
                   double) {
    using T = TestType;
    const Index n = 11, d = 8, maps = 3;
    for (double theta : {10000.0, 100.0}) {
        RotaryTable<T> table(d, 32, theta);
        const RowMatrix<T> x = seeded<T>(n, maps * d, 5);
        for (Index first : {Index(0), Index(5)}) {
            RowMatrix<T> y = x;
            table.apply(y, first);
            for (Index m = 0; m < maps; ++m) {
                const naive::Mat expected = naive::rotary(x.middleCols(m * d, d).template cast<double>(), theta, first);
                CHECK(relative_error(RowMatrix<T>(y.middleCols(m * d, d)), expected) < tolerance<T>());
            }
        }
    }
}

TEST_CASE("rotary: position 0 is the identity and scores depend only on the offset", "[layers][rotary]") {
    const Index d = 16;
    RotaryTable<double> table(d, 64, 10000.0);
    RowMatrix<double> q = seeded<double>(1, d, 7), k = seeded<double>(1, d, 8);
    RowMatrix<double> q0 = q;
    table.apply(q0, 0);
    CHECK((q0 - q).cwiseAbs().maxCoeff() == 0.0);
    auto score = [&](Index pq, Index pk) {
        RowMatrix<double> a = q, b = k;
        table.apply(a, pq);
        table.apply(b, pk);
        return a.row(0).dot(b.row(0));
    };
    CHECK(score(10, 3) == Approx(score(27, 20)).epsilon(1e-12));
    CHECK(std::abs(score(10, 3) - score(10, 4)) > 1e-6);

    RowMatrix<double> too_long(65, d);
    CHECK_THROWS_AS(table.apply(too_long, 0), ShapeError);
    RowMatrix<double> odd(2, d + 3);
    CHECK_THROWS_AS(table.apply(odd, 0), ShapeError);
    CHECK_THROWS_AS(RotaryTable<double>(7, 4, 10000.0), ConfigError);
}

TEST_CASE("rotary: a table of positions [first, end) rotates as the whole table there", "[layers][rotary]") {
    // A slice of a sequence across ranks (docs/distributed.md) holds only its own positions.
    const Index d = 16;
    for (RotaryStyle style : {RotaryStyle::interleaved, RotaryStyle::rotate_half}) {
        const RotarySpec spec{d, 10000.0, style, {}};
        const RotaryTable<double> whole(spec, 64), slice(spec, 50, 20);
        CHECK(slice.first_position() == 20);
        CHECK(slice.max_positions() == 50);
        CHECK(whole.first_position() == 0);
        const RowMatrix<double> x = seeded<double>(30, 2 * d, 9);
        RowMatrix<double> a = x, b = x;
        whole.apply(a, 20);
        slice.apply(b, 20);
        CHECK((a - b).cwiseAbs().maxCoeff() == 0.0);  // the same angles, computed the same way
        RowMatrix<double> early = x.topRows(1), late = x.topRows(2);
        CHECK_THROWS_WITH(slice.apply(early, 19), Catch::Contains("positions [19, 20) exceed the table's positions [20, 50)"));
        CHECK_THROWS_AS(slice.apply(late, 49), ShapeError);
    }
    CHECK_THROWS_AS(RotaryTable<double>(RotarySpec{d, 10000.0, RotaryStyle::interleaved, {}}, 10, 11), ShapeError);
}

TEST_CASE("lambda_init(depth) and the lambda re-parameterisation (docs/math.md §2.5)", "[layers][lambda]") {
    CHECK(lambda_init(0) == Approx(0.2).epsilon(1e-15));
    CHECK(lambda_init(1) == Approx(0.8 - 0.6 * std::exp(-0.3)).epsilon(1e-15));
    CHECK(lambda_init(30) == Approx(0.8 - 0.6 * std::exp(-9.0)).epsilon(1e-15));

    DiffLambda<float> lambda(4);
    lambda.q1 << 0.1f, -0.2f, 0.3f, 0.05f;
    lambda.k1 << 0.2f, 0.1f, -0.1f, 0.4f;
    lambda.q2 << -0.3f, 0.2f, 0.1f, 0.0f;
    lambda.k2 << 0.1f, 0.1f, 0.1f, 0.1f;
    naive::Tensors p;
    p["lambda_q1"] = {lambda.q1.transpose().cast<double>()};
    p["lambda_k1"] = {lambda.k1.transpose().cast<double>()};
    p["lambda_q2"] = {lambda.q2.transpose().cast<double>()};
    p["lambda_k2"] = {lambda.k2.transpose().cast<double>()};
    CHECK(lambda.value(lambda_init(3)) == Approx(naive::lambda_full(p, 3)).epsilon(1e-14));
    // All-zero vectors: exp(0) - exp(0) + lambda_init.
    CHECK(DiffLambda<double>(8).value(lambda_init(2)) == Approx(lambda_init(2)).epsilon(1e-15));
    CHECK(DiffLambda<double>::parameter_count(64) == 256);
}
