// Sanity of the oracle itself (include/diffattn/kernels/reference.hpp): small cases computed by
// hand from the formulas of docs/math.md with std::exp, and closed forms (uniform attention when Q = 0).
// These guard the reference, against which every fast kernel is checked.
#include "test_support.hpp"

#include "diffattn/kernels/reference.hpp"

#include <cmath>
#include <limits>

using namespace diffattn;
using diffattn::test::max_abs_diff;

namespace {

/// A few ulps of an O(1) quantity in T.
template <typename T>
long double tight() {
    return 16 * static_cast<long double>(std::numeric_limits<T>::epsilon());
}

template <typename T>
RowMatrix<T> matrix(Index rows, Index cols, std::initializer_list<double> values) {
    RowMatrix<T> m(rows, cols);
    auto it = values.begin();
    for (Index i = 0; i < rows; ++i) {
        for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<T>(*it++);
    }
    return m;
}

AttentionOptions with_mask(MaskKind mask) {
    AttentionOptions o;
    o.mask = mask;
    return o;
}

}  // namespace

TEMPLATE_TEST_CASE("reference: 2x2 softmax attention matches hand-computed exp values", "[reference][kernels]", float,
                   double) {
    using T = TestType;
    // Q = [1; 2], K = [1; -1] (d = 1, scale 1 / sqrt(1) = 1), V = identity: O = A.
    const RowMatrix<T> q = matrix<T>(2, 1, {1, 2});
    const RowMatrix<T> k = matrix<T>(2, 1, {1, -1});
    const RowMatrix<T> v = RowMatrix<T>::Identity(2, 2);

    SECTION("mask none") {
        const auto maps = reference::softmax_attention_maps(q, k, v, with_mask(MaskKind::none));
        // Row 0 logits [1, -1], row 1 logits [2, -2].
        const double z0 = std::exp(1.0) + std::exp(-1.0);
        const double z1 = std::exp(2.0) + std::exp(-2.0);
        const RowMatrix<double> expected =
            matrix<double>(2, 2, {std::exp(1.0) / z0, std::exp(-1.0) / z0, std::exp(2.0) / z1, std::exp(-2.0) / z1});
        CHECK(max_abs_diff(maps.a1, expected) <= tight<T>());
        CHECK(max_abs_diff(maps.combined, expected) <= tight<T>());
        CHECK(max_abs_diff(maps.out, expected) <= tight<T>());
        CHECK(maps.a2.size() == 0);
        CHECK(maps.integral.size() == 0);
    }
    SECTION("causal mask: query 0 sees key 0 only") {
        const RowMatrix<T> out = reference::softmax_attention(q, k, v, with_mask(MaskKind::causal));
        const double z1 = std::exp(2.0) + std::exp(-2.0);
        const RowMatrix<double> expected = matrix<double>(2, 2, {1.0, 0.0, std::exp(2.0) / z1, std::exp(-2.0) / z1});
        CHECK(max_abs_diff(out, expected) <= tight<T>());
        CHECK(out(0, 1) == T(0));  // exactly zero: exp(-inf)
    }
    SECTION("custom scale multiplies the logits") {
        AttentionOptions o = with_mask(MaskKind::none);
        o.scale = 0.5;
        const RowMatrix<T> out = reference::softmax_attention(q, k, v, o);
        const double z0 = std::exp(0.5) + std::exp(-0.5);
        const double z1 = std::exp(1.0) + std::exp(-1.0);
        const RowMatrix<double> expected =
            matrix<double>(2, 2, {std::exp(0.5) / z0, std::exp(-0.5) / z0, std::exp(1.0) / z1, std::exp(-1.0) / z1});
        CHECK(max_abs_diff(out, expected) <= tight<T>());
    }
    SECTION("default scale is 1/sqrt(d)") {
        // d = 4: q = k = [1 1 1 1] gives q.k = 4, logit 4 / 2 = 2; the other key is 0.
        const RowMatrix<T> q4 = matrix<T>(1, 4, {1, 1, 1, 1});
        const RowMatrix<T> k4 = matrix<T>(2, 4, {1, 1, 1, 1, 0, 0, 0, 0});
        const RowMatrix<T> out = reference::softmax_attention(q4, k4, v, with_mask(MaskKind::none));
        const double z = std::exp(2.0) + 1.0;
        CHECK(max_abs_diff(out, matrix<double>(1, 2, {std::exp(2.0) / z, 1.0 / z})) <= tight<T>());
    }
}

TEMPLATE_TEST_CASE("reference: Q = 0 gives the mean of the allowed value rows", "[reference][kernels]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index n = 3, s = 7, d = 4, dv = 5;
    const RowMatrix<T> q = RowMatrix<T>::Zero(n, d);
    const RowMatrix<T> k = diffattn::test::random_matrix<T>(rng, s, d);
    const RowMatrix<T> v = diffattn::test::random_matrix<T>(rng, s, dv);

    const auto mean_of_rows = [&](Index begin, Index end) {
        RowMatrix<double> mean = RowMatrix<double>::Zero(1, dv);
        for (Index j = begin; j < end; ++j) mean += v.row(j).template cast<double>();
        return RowMatrix<double>(mean / static_cast<double>(end - begin));
    };

    SECTION("causal with a KV cache: query n sees keys [0, n + S - N]") {
        const RowMatrix<T> out = reference::softmax_attention(q, k, v, with_mask(MaskKind::causal));
        for (Index row = 0; row < n; ++row) {
            CHECK(max_abs_diff(out.row(row), mean_of_rows(0, row + s - n + 1)) <= tight<T>());
        }
    }
    SECTION("mask none with key padding: only the first valid_len keys") {
        AttentionOptions o = with_mask(MaskKind::none);
        o.valid_len = 2;
        const RowMatrix<T> out = reference::softmax_attention(q, k, v, o);
        for (Index row = 0; row < n; ++row) CHECK(max_abs_diff(out.row(row), mean_of_rows(0, 2)) <= tight<T>());
    }
    SECTION("causal and key padding intersect") {
        AttentionOptions o = with_mask(MaskKind::causal);
        o.valid_len = 5;  // query 0 sees [0, 4], query 1 [0, 5) capped at 5, query 2 too
        const RowMatrix<T> out = reference::softmax_attention(q, k, v, o);
        CHECK(max_abs_diff(out.row(0), mean_of_rows(0, 5)) <= tight<T>());
        CHECK(max_abs_diff(out.row(2), mean_of_rows(0, 5)) <= tight<T>());
        o.valid_len = 3;
        const RowMatrix<T> out3 = reference::softmax_attention(q, k, v, o);
        for (Index row = 0; row < n; ++row) CHECK(max_abs_diff(out3.row(row), mean_of_rows(0, 3)) <= tight<T>());
    }
    SECTION("valid_len = 0: every row is exactly zero, never NaN") {
        for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
            AttentionOptions o = with_mask(mask);
            o.valid_len = 0;
            const auto maps = reference::softmax_attention_maps(q, k, v, o);
            CHECK(maps.a1.isZero(0));
            CHECK(maps.out.isZero(0));
        }
    }
}

TEMPLATE_TEST_CASE("reference: mask_logits puts a true -infinity exactly where the mask forbids",
                   "[reference][kernels]", float, double) {
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity();
    const RowMatrix<T> scores = RowMatrix<T>::Constant(2, 4, T(0.25));  // N = 2, S = 4: offset 2
    AttentionOptions o = with_mask(MaskKind::causal);
    o.valid_len = 3;
    const RowMatrix<T> masked = reference::mask_logits(scores, o);
    // Row 0 sees keys 0..2, row 1 sees 0..3 but key 3 is padding.
    for (Index j = 0; j < 4; ++j) {
        CHECK(masked(0, j) == (j <= 2 ? T(0.25) : -inf));
        CHECK(masked(1, j) == (j <= 2 ? T(0.25) : -inf));
    }
    o.mask = MaskKind::none;
    o.valid_len.reset();
    CHECK(reference::mask_logits(scores, o) == scores);
}

TEMPLATE_TEST_CASE("reference: masked_softmax subtracts the row max, empty rows are zero, NaN stays in its row",
                   "[reference][kernels]", float, double) {
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity();
    RowMatrix<T> logits(4, 3);
    logits << T(1000), T(999), -inf,   // exp(1000) overflows without the max subtraction
        -inf, -inf, -inf,              // no allowed key
        T(-1000), T(-1001), T(-1000),  // exp(-1000) underflows without it
        T(0), std::numeric_limits<T>::quiet_NaN(), T(0);
    const RowMatrix<T> p = reference::masked_softmax(logits);
    const double z = 1.0 + std::exp(-1.0);
    CHECK(std::fabs(static_cast<double>(p(0, 0)) - 1.0 / z) <= tight<T>());
    CHECK(std::fabs(static_cast<double>(p(0, 1)) - std::exp(-1.0) / z) <= tight<T>());
    CHECK(p(0, 2) == T(0));
    CHECK(p.row(1).isZero(0));
    const double z2 = 2.0 + std::exp(-1.0);
    CHECK(std::fabs(static_cast<double>(p(2, 0)) - 1.0 / z2) <= tight<T>());
    CHECK(std::fabs(static_cast<double>(p(2, 1)) - std::exp(-1.0) / z2) <= tight<T>());
    CHECK(p.row(3).array().isNaN().all());
    CHECK(p.topRows(3).allFinite());
}

TEMPLATE_TEST_CASE("reference: DIFF is A1 - lambda A2 of two hand-computed maps", "[reference][kernels]", float,
                   double) {
    using T = TestType;
    const T lambda = T(0.375);
    const RowMatrix<T> q1 = matrix<T>(2, 1, {1, 2});
    const RowMatrix<T> k1 = matrix<T>(2, 1, {1, -1});
    const RowMatrix<T> q2 = matrix<T>(2, 1, {-1, 0.5});
    const RowMatrix<T> k2 = matrix<T>(2, 1, {0.5, 2});
    const RowMatrix<T> v = matrix<T>(2, 2, {1, 2, -3, 4});
    const auto maps = reference::diff_attention_maps(q1, k1, q2, k2, v, lambda, with_mask(MaskKind::none));

    const auto softmax2 = [](double a, double b) {
        return RowMatrix<double>(matrix<double>(
            1, 2, {std::exp(a) / (std::exp(a) + std::exp(b)), std::exp(b) / (std::exp(a) + std::exp(b))}));
    };
    RowMatrix<double> a1(2, 2), a2(2, 2);
    a1 << softmax2(1, -1), softmax2(2, -2);
    a2 << softmax2(-0.5, -2), softmax2(0.25, 1);
    const RowMatrix<double> combined = a1 - 0.375 * a2;
    const RowMatrix<double> out = combined * v.template cast<double>();
    CHECK(max_abs_diff(maps.a1, a1) <= tight<T>());
    CHECK(max_abs_diff(maps.a2, a2) <= tight<T>());
    CHECK(max_abs_diff(maps.combined, combined) <= tight<T>());
    CHECK(max_abs_diff(maps.out, out) <= 4 * tight<T>());
    CHECK(maps.integral.size() == 0);
    // Row sums of A1 - lambda A2 are 1 - lambda (docs/math.md §2.2).
    for (Index r = 0; r < 2; ++r)
        CHECK(std::fabs(static_cast<double>(maps.combined.row(r).sum()) - 0.625) <= tight<T>());
}

TEMPLATE_TEST_CASE("reference: DINT integral maps on a hand-computed 3x3 case", "[reference][kernels]", float, double) {
    using T = TestType;
    // Q1 = 0: A1 row n is uniform over the keys query n sees. Causal, N = S = 3:
    //   A1 = [1 0 0; 1/2 1/2 0; 1/3 1/3 1/3]
    //   G  = running mean = [1 0 0; 3/4 1/4 0; 11/18 5/18 2/18]
    DIFFATTN_TEST_RNG(rng);
    const Index n = 3, d = 2, dv = 3;
    const T lambda = T(0.5);
    const RowMatrix<T> q1 = RowMatrix<T>::Zero(n, d);
    const RowMatrix<T> k1 = diffattn::test::random_matrix<T>(rng, n, d);
    const RowMatrix<T> q2 = diffattn::test::random_matrix<T>(rng, n, d);
    const RowMatrix<T> k2 = diffattn::test::random_matrix<T>(rng, n, d);
    const RowMatrix<T> v = diffattn::test::random_matrix<T>(rng, n, dv);
    RowMatrix<double> a1(3, 3), g(3, 3);
    a1 << 1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3;
    g << 1, 0, 0, 0.75, 0.25, 0, 11.0 / 18, 5.0 / 18, 2.0 / 18;

    const auto check_combined = [&](const reference::AttentionMaps<T>& maps, const RowMatrix<double>& integral) {
        CHECK(max_abs_diff(maps.a1, a1) <= tight<T>());
        CHECK(max_abs_diff(maps.integral, integral) <= tight<T>());
        const RowMatrix<double> combined = a1 - 0.5 * maps.a2.template cast<double>() + 0.5 * integral;
        CHECK(max_abs_diff(maps.combined, combined) <= tight<T>());
        CHECK(max_abs_diff(maps.out, combined * v.template cast<double>()) <= 4 * tight<T>());
        for (Index r = 0; r < n; ++r) {
            CHECK(std::fabs(static_cast<double>(maps.combined.row(r).sum()) - 1.0) <= tight<T>());
        }
    };

    SECTION("causal_mean: integral = G") {
        const auto maps = reference::dint_attention_maps(q1, k1, q2, k2, v, lambda, DintIntegral::causal_mean,
                                                         with_mask(MaskKind::causal));
        check_combined(maps, g);
    }
    SECTION("causal_softmax: integral = softmax of G over the keys each query sees") {
        const auto maps = reference::dint_attention_maps(q1, k1, q2, k2, v, lambda, DintIntegral::causal_softmax,
                                                         with_mask(MaskKind::causal));
        RowMatrix<double> integral = RowMatrix<double>::Zero(3, 3);
        integral(0, 0) = 1.0;  // query 0 sees key 0 only
        const double z1 = std::exp(0.75) + std::exp(0.25);
        integral(1, 0) = std::exp(0.75) / z1;
        integral(1, 1) = std::exp(0.25) / z1;
        const double z2 = std::exp(11.0 / 18) + std::exp(5.0 / 18) + std::exp(2.0 / 18);
        integral(2, 0) = std::exp(11.0 / 18) / z2;
        integral(2, 1) = std::exp(5.0 / 18) / z2;
        integral(2, 2) = std::exp(2.0 / 18) / z2;
        check_combined(maps, integral);
    }
    SECTION("global_mean: integral = 1 g with g the mean of all A1 rows (mask none)") {
        const auto maps = reference::dint_attention_maps(q1, k1, q2, k2, v, lambda, DintIntegral::global_mean,
                                                         with_mask(MaskKind::none));
        // Mask none: A1 is uniform 1/3 everywhere, and so is g.
        const RowMatrix<double> third = RowMatrix<double>::Constant(3, 3, 1.0 / 3);
        CHECK(max_abs_diff(maps.a1, third) <= tight<T>());
        CHECK(max_abs_diff(maps.integral, third) <= tight<T>());
        CHECK(max_abs_diff(maps.combined, third - 0.5 * maps.a2.template cast<double>() + 0.5 * third) <= tight<T>());
    }
}

TEMPLATE_TEST_CASE("reference: DINT with a history equals the tail of the full-sequence run", "[reference][kernels]",
                   float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    diffattn::test::KernelCase c;
    c.seq_len_q = 5;
    c.seq_len_kv = 12;
    c.head_dim = 4;
    c.value_dim = 6;
    c.mask = MaskKind::causal;
    const auto in = diffattn::test::random_diff_inputs<T>(rng, c);
    const AttentionOptions o = c.options();
    const auto history = diffattn::test::reference_history(in, o);
    CHECK(history.rows == 7);
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        INFO(diffattn::test::integral_name(integral));
        const RowMatrix<T> full =
            reference::dint_attention(in.q1_all, in.k1, in.q2_all, in.k2, in.v, in.lambda, integral, o);
        const RowMatrix<T> tail =
            reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o, &history);
        CHECK(max_abs_diff(tail, full.bottomRows(c.seq_len_q)) <= 64 * tight<T>());
    }
}

TEMPLATE_TEST_CASE("reference: dint_history of no earlier rows is zero sums", "[reference][kernels]", float, double) {
    // Found by fuzz_kernels: colwise() over 0 rows was undefined behaviour inside Eigen (UBSan).
    using T = TestType;
    const DintHistory<T> history = reference::dint_history<T>(RowMatrix<T>(0, 9), RowMatrix<T>::Ones(9, 5));
    CHECK(history.rows == 0);
    CHECK(history.a1_column_sum.size() == 9);
    CHECK(history.a1_column_sum.isZero(0));
    CHECK(history.o1_row_sum.size() == 5);
    CHECK(history.o1_row_sum.isZero(0));
}

TEMPLATE_TEST_CASE("reference: row sums of the combined maps", "[reference][kernels]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for (int trial = 0; trial < 6; ++trial) {
        diffattn::test::KernelCase c;
        c.seq_len_q = diffattn::test::uniform_index(rng, 1, 40);
        c.seq_len_kv = c.seq_len_q + diffattn::test::uniform_index(rng, 0, 30);
        c.head_dim = diffattn::test::uniform_index(rng, 1, 16);
        c.value_dim = diffattn::test::uniform_index(rng, 1, 16);
        c.mask = trial % 2 == 0 ? MaskKind::causal : MaskKind::none;
        c.valid_len = diffattn::test::random_valid_len(rng, c.seq_len_q, c.seq_len_kv);
        INFO(c.describe());
        const auto in = diffattn::test::random_diff_inputs<T>(rng, c);
        const AttentionOptions o = c.options();
        const Index valid_len = reference::valid_len_of(o, c.seq_len_kv);
        const long double tol = 4 * (c.seq_len_kv + 4) * static_cast<long double>(std::numeric_limits<T>::epsilon());
        const auto has_key = [&](Index row) {
            return reference::row_has_allowed_key(o.mask, row, c.seq_len_q, c.seq_len_kv, valid_len);
        };
        const auto check_sums = [&](const RowMatrix<T>& combined, double expected) {
            for (Index r = 0; r < combined.rows(); ++r) {
                const long double sum = combined.row(r).template cast<long double>().sum();
                CHECK(std::fabs(sum - (has_key(r) ? expected : 0.0)) <= tol);
            }
        };
        const auto diff = reference::diff_attention_maps(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o);
        check_sums(diff.combined, 1.0 - static_cast<double>(in.lambda));
        check_sums(diff.a1, 1.0);
        check_sums(diff.a2, 1.0);
        const auto history = diffattn::test::reference_history(in, o);
        for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
            INFO(diffattn::test::integral_name(integral));
            const auto dint =
                reference::dint_attention_maps(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o, &history);
            check_sums(dint.combined, 1.0);
        }
        if (c.mask == MaskKind::none) {
            const auto dint = reference::dint_attention_maps(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda,
                                                             DintIntegral::global_mean, o);
            check_sums(dint.combined, 1.0);
        }
    }
}

TEMPLATE_TEST_CASE("reference: a head that is a middleCols block gives the result of its copy", "[reference][kernels]",
                   float, double) {
    // Heads are column blocks of wider row-major matrices (outer stride > cols), as the fast kernels
    // take them; the reference binds such a block as ConstMatrixRef<T>, with T deduced from it.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index seq_len_q = 6, seq_len_kv = 9, head_dim = 5, value_dim = 7, heads = 3, h = 1;
    const RowMatrix<T> q1_wide = diffattn::test::random_matrix<T>(rng, seq_len_kv, heads * head_dim);
    const RowMatrix<T> k1_wide = diffattn::test::random_matrix<T>(rng, seq_len_kv, heads * head_dim);
    const RowMatrix<T> q2_wide = diffattn::test::random_matrix<T>(rng, seq_len_kv, heads * head_dim);
    const RowMatrix<T> k2_wide = diffattn::test::random_matrix<T>(rng, seq_len_kv, heads * head_dim);
    const RowMatrix<T> v_wide = diffattn::test::random_matrix<T>(rng, seq_len_kv, heads * value_dim);
    const auto q1 = q1_wide.bottomRows(seq_len_q).middleCols(h * head_dim, head_dim);  // [N x d] blocks
    const auto q2 = q2_wide.bottomRows(seq_len_q).middleCols(h * head_dim, head_dim);
    const auto k1 = k1_wide.middleCols(h * head_dim, head_dim);  // [S x d]
    const auto k2 = k2_wide.middleCols(h * head_dim, head_dim);
    const auto v = v_wide.middleCols(h * value_dim, value_dim);  // [S x dv]
    const RowMatrix<T> q1_copy = q1, q2_copy = q2, k1_copy = k1, k2_copy = k2, v_copy = v;
    const T lambda = T(0.375);
    const AttentionOptions o = with_mask(MaskKind::causal);
    const auto check_maps = [](const reference::AttentionMaps<T>& block, const reference::AttentionMaps<T>& copy) {
        CHECK(max_abs_diff(block.a1, copy.a1) <= tight<T>());
        CHECK(max_abs_diff(block.a2, copy.a2) <= tight<T>());
        CHECK(max_abs_diff(block.integral, copy.integral) <= tight<T>());
        CHECK(max_abs_diff(block.combined, copy.combined) <= tight<T>());
        CHECK(max_abs_diff(block.out, copy.out) <= tight<T>());
    };

    SECTION("softmax") {
        check_maps(reference::softmax_attention_maps(q1, k1, v, o),
                   reference::softmax_attention_maps(q1_copy, k1_copy, v_copy, o));
        CHECK(max_abs_diff(reference::softmax_attention<T>(q1, k1, v, o),
                           reference::softmax_attention(q1_copy, k1_copy, v_copy, o)) <= tight<T>());
    }
    SECTION("DIFF") {
        check_maps(reference::diff_attention_maps(q1, k1, q2, k2, v, lambda, o),
                   reference::diff_attention_maps(q1_copy, k1_copy, q2_copy, k2_copy, v_copy, lambda, o));
    }
    SECTION("DINT after a history built from a block of A1") {
        const Index cached = seq_len_kv - seq_len_q;
        const RowMatrix<T> a1_all =
            reference::attention_map(q1_wide.middleCols(h * head_dim, head_dim), k1, o);  // [S x S]
        const RowMatrix<T> a1_earlier = a1_all.topRows(cached);
        const DintHistory<T> history = reference::dint_history(a1_all.topRows(cached), v);
        const DintHistory<T> history_copy = reference::dint_history(a1_earlier, v_copy);
        CHECK(max_abs_diff(history.a1_column_sum, history_copy.a1_column_sum) <= tight<T>());
        CHECK(max_abs_diff(history.o1_row_sum, history_copy.o1_row_sum) <= tight<T>());
        for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
            INFO(diffattn::test::integral_name(integral));
            check_maps(reference::dint_attention_maps(q1, k1, q2, k2, v, lambda, integral, o, &history),
                       reference::dint_attention_maps(q1_copy, k1_copy, q2_copy, k2_copy, v_copy, lambda, integral,
                                                      o, &history_copy));
        }
    }
}
