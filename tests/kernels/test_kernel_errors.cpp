// Every argument error of the kernels throws the documented exception type with a message that
// names the function and the shapes involved; the reference checks the same rules
// (kernels/attention_checks.hpp owns them).
#include "test_support.hpp"

#include "diffattn/core/error.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

#include <limits>

using namespace diffattn;
using Catch::Contains;

namespace {

template <typename T>
RowMatrix<T> ones(Index rows, Index cols) {
    return RowMatrix<T>::Ones(rows, cols);
}

AttentionOptions mask_none() {
    AttentionOptions o;
    o.mask = MaskKind::none;
    return o;
}

AttentionOptions with_valid_len(Index valid_len) {
    AttentionOptions o;
    o.valid_len = valid_len;
    return o;
}

AttentionOptions with_scale(double scale) {
    AttentionOptions o;
    o.scale = scale;
    return o;
}

}  // namespace

TEMPLATE_TEST_CASE("softmax_attention: shape errors name the function and the shapes", "[kernels][errors]", float,
                   double) {
    using T = TestType;
    RowMatrix<T> out(9, 8);
    SECTION("head dims of Q and K differ") {
        const RowMatrix<T> q = ones<T>(9, 64), k = ones<T>(17, 32), v = ones<T>(17, 8);
        REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, out), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out),
                            Contains("softmax_attention") && Contains("K is 17x32") && Contains("Q is 9x64"));
        REQUIRE_THROWS_AS(reference::softmax_attention(q, k, v), ShapeError);
        REQUIRE_THROWS_WITH(reference::softmax_attention(q, k, v),
                            Contains("reference::softmax_attention") && Contains("17x32") && Contains("9x64"));
    }
    SECTION("K and V row counts differ") {
        const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(17, 4), v = ones<T>(16, 8);
        REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, out), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out),
                            Contains("softmax_attention") && Contains("V is 16x8") && Contains("K is 17x4"));
        REQUIRE_THROWS_WITH(reference::softmax_attention(q, k, v),
                            Contains("reference::softmax_attention") && Contains("16x8") && Contains("17x4"));
    }
    SECTION("fewer keys than queries (S < N)") {
        const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(5, 4), v = ones<T>(5, 8);
        REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, out), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out),
                            Contains("softmax_attention") && Contains("5x4") && Contains("9x4"));
        REQUIRE_THROWS_AS(reference::softmax_attention(q, k, v), ShapeError);
        REQUIRE_THROWS_WITH(reference::softmax_attention(q, k, v), Contains("5x4") && Contains("9x4"));
    }
    SECTION("output shape") {
        const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(17, 4), v = ones<T>(17, 64);
        RowMatrix<T> wrong(9, 5);
        REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, wrong), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, wrong),
                            Contains("softmax_attention") && Contains("out is 9x5") && Contains("9x64"));
    }
    SECTION("output aliasing an input") {
        RowMatrix<T> qv = ones<T>(9, 8);
        const RowMatrix<T> k = ones<T>(9, 8);
        REQUIRE_THROWS_AS(diffattn::softmax_attention(qv, k, k, qv), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(qv, k, k, qv),
                            Contains("softmax_attention") && Contains("overlaps"));
    }
}

TEMPLATE_TEST_CASE("kernels: option errors (valid_len, scale, lambda)", "[kernels][errors]", float, double) {
    using T = TestType;
    const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(17, 4), v = ones<T>(17, 8);
    RowMatrix<T> out(9, 8);
    SECTION("valid_len out of [0, S]") {
        for (Index bad : {Index{-1}, Index{18}}) {
            const AttentionOptions o = with_valid_len(bad);
            INFO("valid_len " << bad);
            REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, out, o), OptionError);
            REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out, o),
                                Contains("softmax_attention") && Contains("valid_len") && Contains("17x4"));
            REQUIRE_THROWS_WITH(diffattn::diff_attention(q, k, q, k, v, T(0.5), out, o),
                                Contains("diff_attention") && Contains("valid_len"));
            REQUIRE_THROWS_WITH(diffattn::dint_attention(q, k, q, k, v, T(0.5), DintIntegral::causal_softmax, out, o),
                                Contains("dint_attention") && Contains("valid_len"));
            REQUIRE_THROWS_AS(reference::softmax_attention(q, k, v, o), OptionError);
            REQUIRE_THROWS_WITH(reference::diff_attention(q, k, q, k, v, T(0.5), o),
                                Contains("reference::diff_attention") && Contains("valid_len"));
        }
    }
    SECTION("scale not finite or not positive") {
        for (double bad :
             {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
            const AttentionOptions o = with_scale(bad);
            INFO("scale " << bad);
            REQUIRE_THROWS_AS(diffattn::softmax_attention(q, k, v, out, o), OptionError);
            REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out, o),
                                Contains("softmax_attention") && Contains("scale"));
            REQUIRE_THROWS_AS(diffattn::diff_attention(q, k, q, k, v, T(0.5), out, o), OptionError);
            REQUIRE_THROWS_AS(diffattn::dint_attention(q, k, q, k, v, T(0.5), DintIntegral::causal_mean, out, o),
                              OptionError);
            REQUIRE_THROWS_AS(reference::softmax_attention(q, k, v, o), OptionError);
            REQUIRE_THROWS_WITH(reference::dint_attention(q, k, q, k, v, T(0.5), DintIntegral::causal_mean, o),
                                Contains("reference::dint_attention") && Contains("scale"));
        }
    }
    SECTION("scale finite in double but Inf or 0 in float (found by fuzz_kernels)") {
        for (double extreme : {1e300, 1e-300}) {
            const AttentionOptions o = with_scale(extreme);
            INFO("scale " << extreme);
            if constexpr (std::is_same_v<T, float>) {
                REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out, o),
                                    Contains("softmax_attention") && Contains("scale") && Contains("float"));
                REQUIRE_THROWS_WITH(diffattn::diff_attention(q, k, q, k, v, T(0.5), out, o),
                                    Contains("diff_attention") && Contains("scale"));
                REQUIRE_THROWS_AS(reference::softmax_attention(q, k, v, o), OptionError);
            } else {
                REQUIRE_NOTHROW(diffattn::softmax_attention(q, k, v, out, o));
                REQUIRE_NOTHROW(reference::softmax_attention(q, k, v, o));
            }
        }
    }
    SECTION("a mask kind or an integral outside their enums") {
        // Read from a file or cast from an int: refused by the fast kernels and the reference alike,
        // never computed as some other mode.
        AttentionOptions bad_mask;
        bad_mask.mask = static_cast<MaskKind>(7);
        REQUIRE_THROWS_WITH(diffattn::softmax_attention(q, k, v, out, bad_mask),
                            Contains("softmax_attention") && Contains("unknown mask kind"));
        REQUIRE_THROWS_WITH(reference::softmax_attention(q, k, v, bad_mask),
                            Contains("reference::softmax_attention") && Contains("unknown mask kind"));
        const auto bad_integral = static_cast<DintIntegral>(7);
        REQUIRE_THROWS_AS(diffattn::dint_attention(q, k, q, k, v, T(0.5), bad_integral, out), OptionError);
        REQUIRE_THROWS_WITH(diffattn::dint_attention(q, k, q, k, v, T(0.5), bad_integral, out),
                            Contains("dint_attention") && Contains("unknown DintIntegral"));
        REQUIRE_THROWS_AS(reference::dint_attention(q, k, q, k, v, T(0.5), bad_integral), OptionError);
        REQUIRE_THROWS_WITH(reference::dint_attention(q, k, q, k, v, T(0.5), bad_integral),
                            Contains("reference::dint_attention") && Contains("unknown DintIntegral"));
    }
    SECTION("lambda not finite") {
        const RowMatrix<T> q9 = ones<T>(9, 4), k9 = ones<T>(9, 4), v9 = ones<T>(9, 8);
        for (T bad : {std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()}) {
            REQUIRE_THROWS_AS(diffattn::diff_attention(q9, k9, q9, k9, v9, bad, out), OptionError);
            REQUIRE_THROWS_WITH(diffattn::diff_attention(q9, k9, q9, k9, v9, bad, out),
                                Contains("diff_attention") && Contains("lambda"));
            REQUIRE_THROWS_WITH(diffattn::dint_attention(q9, k9, q9, k9, v9, bad, DintIntegral::causal_mean, out),
                                Contains("dint_attention") && Contains("lambda"));
            REQUIRE_THROWS_AS(reference::diff_attention(q9, k9, q9, k9, v9, bad), OptionError);
        }
    }
}

TEMPLATE_TEST_CASE("diff_attention and dint_attention: shape errors name the function and the shapes",
                   "[kernels][errors]", float, double) {
    using T = TestType;
    RowMatrix<T> out(9, 8);
    const T lambda = T(0.5);
    const auto both = [&](const RowMatrix<T>& q1, const RowMatrix<T>& k1, const RowMatrix<T>& q2,
                          const RowMatrix<T>& k2, const RowMatrix<T>& v, RowMatrix<T>& o, const std::string& shape_a,
                          const std::string& shape_b) {
        REQUIRE_THROWS_AS(diffattn::diff_attention(q1, k1, q2, k2, v, lambda, o), ShapeError);
        REQUIRE_THROWS_WITH(diffattn::diff_attention(q1, k1, q2, k2, v, lambda, o),
                            Contains("diff_attention") && Contains(shape_a) && Contains(shape_b));
        REQUIRE_THROWS_AS(diffattn::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::causal_softmax, o),
                          ShapeError);
        REQUIRE_THROWS_WITH(diffattn::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::causal_softmax, o),
                            Contains("dint_attention") && Contains(shape_a) && Contains(shape_b));
        if (o.rows() == q1.rows() && o.cols() == v.cols()) {  // the reference has no output argument
            REQUIRE_THROWS_AS(reference::diff_attention(q1, k1, q2, k2, v, lambda), ShapeError);
            REQUIRE_THROWS_WITH(reference::diff_attention(q1, k1, q2, k2, v, lambda),
                                Contains("reference::diff_attention") && Contains(shape_a) && Contains(shape_b));
            REQUIRE_THROWS_WITH(reference::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::causal_softmax),
                                Contains("reference::dint_attention") && Contains(shape_a) && Contains(shape_b));
        }
    };
    SECTION("K1 head dim differs from Q1's") {
        both(ones<T>(9, 64), ones<T>(17, 32), ones<T>(9, 64), ones<T>(17, 32), ones<T>(17, 8), out, "K1 is 17x32",
             "Q1 is 9x64");
    }
    SECTION("Q2 shape differs from Q1's") {
        both(ones<T>(9, 32), ones<T>(17, 32), ones<T>(9, 16), ones<T>(17, 32), ones<T>(17, 8), out, "Q2 is 9x16",
             "Q1 is 9x32");
    }
    SECTION("K2 shape differs from K1's") {
        both(ones<T>(9, 32), ones<T>(17, 32), ones<T>(9, 32), ones<T>(16, 32), ones<T>(17, 8), out, "K2 is 16x32",
             "K1 is 17x32");
    }
    SECTION("V rows differ from K1's") {
        both(ones<T>(9, 4), ones<T>(17, 4), ones<T>(9, 4), ones<T>(17, 4), ones<T>(15, 8), out, "V is 15x8",
             "K1 is 17x4");
    }
    SECTION("S < N") {
        both(ones<T>(9, 4), ones<T>(5, 4), ones<T>(9, 4), ones<T>(5, 4), ones<T>(5, 8), out, "5x4", "9x4");
    }
    SECTION("output shape") {
        RowMatrix<T> wrong(8, 8);
        both(ones<T>(9, 4), ones<T>(9, 4), ones<T>(9, 4), ones<T>(9, 4), ones<T>(9, 8), wrong, "out is 8x8", "9x8");
    }
}

TEMPLATE_TEST_CASE("dint_attention: integral and history errors", "[kernels][errors]", float, double) {
    using T = TestType;
    const T lambda = T(0.5);
    SECTION("global_mean with a causal mask is an OptionError") {
        const RowMatrix<T> q = ones<T>(9, 4), v = ones<T>(9, 8);
        RowMatrix<T> out(9, 8);
        const AttentionOptions causal;  // the default mask
        REQUIRE_THROWS_AS(diffattn::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, out, causal),
                          OptionError);
        REQUIRE_THROWS_WITH(diffattn::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, out, causal),
                            Contains("dint_attention") && Contains("global_mean") && Contains("causal"));
        REQUIRE_THROWS_AS(reference::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, causal),
                          OptionError);
        REQUIRE_THROWS_WITH(reference::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, causal),
                            Contains("reference::dint_attention") && Contains("global_mean"));
        CHECK_NOTHROW(diffattn::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, out, mask_none()));
    }
    SECTION("global_mean cannot continue a history") {
        const RowMatrix<T> q = ones<T>(9, 4), v = ones<T>(9, 8);
        RowMatrix<T> out(9, 8);
        DintHistory<T> history;
        history.rows = 3;
        history.a1_column_sum = Vector<T>::Ones(9);
        history.o1_row_sum = Vector<T>::Ones(8);
        REQUIRE_THROWS_AS(
            diffattn::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, out, mask_none(), &history),
            OptionError);
        REQUIRE_THROWS_WITH(
            diffattn::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, out, mask_none(), &history),
            Contains("dint_attention") && Contains("global_mean") && Contains("3"));
        REQUIRE_THROWS_AS(
            reference::dint_attention(q, q, q, q, v, lambda, DintIntegral::global_mean, mask_none(), &history),
            OptionError);
        CHECK(history.rows == 3);  // untouched by a rejected call
    }
    SECTION("causal integrals with a KV cache need a history of S - N rows") {
        const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(20, 4), v = ones<T>(20, 8);
        RowMatrix<T> out(9, 8);
        for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
            INFO(diffattn::test::integral_name(integral));
            REQUIRE_THROWS_AS(diffattn::dint_attention(q, k, q, k, v, lambda, integral, out), OptionError);
            REQUIRE_THROWS_WITH(
                diffattn::dint_attention(q, k, q, k, v, lambda, integral, out),
                Contains("dint_attention") && Contains("20") && Contains("9") && Contains("DintHistory"));
            REQUIRE_THROWS_AS(reference::dint_attention(q, k, q, k, v, lambda, integral), OptionError);
            REQUIRE_THROWS_WITH(reference::dint_attention(q, k, q, k, v, lambda, integral),
                                Contains("reference::dint_attention") && Contains("20x4") && Contains("9x4"));

            DintHistory<T> history;
            history.rows = 10;  // S - N = 11
            history.a1_column_sum = Vector<T>::Zero(20);
            history.o1_row_sum = Vector<T>::Zero(8);
            REQUIRE_THROWS_AS(diffattn::dint_attention(q, k, q, k, v, lambda, integral, out, {}, &history),
                              OptionError);
            REQUIRE_THROWS_WITH(diffattn::dint_attention(q, k, q, k, v, lambda, integral, out, {}, &history),
                                Contains("dint_attention") && Contains("history has 10 rows") && Contains("11"));
            REQUIRE_THROWS_AS(reference::dint_attention(q, k, q, k, v, lambda, integral, {}, &history), OptionError);
            REQUIRE_THROWS_WITH(
                reference::dint_attention(q, k, q, k, v, lambda, integral, {}, &history),
                Contains("reference::dint_attention") && Contains("history has 10 rows") && Contains("11"));
            CHECK(history.rows == 10);
        }
    }
    SECTION("a history whose sums do not fit the call is a ShapeError") {
        const RowMatrix<T> q = ones<T>(9, 4), k = ones<T>(20, 4), v = ones<T>(20, 8);
        RowMatrix<T> out(9, 8);
        DintHistory<T> history;
        history.rows = 11;
        history.a1_column_sum = Vector<T>::Zero(5);  // fewer than the 11 cached keys
        history.o1_row_sum = Vector<T>::Zero(7);     // V has 8 columns
        REQUIRE_THROWS_AS(
            diffattn::dint_attention(q, k, q, k, v, lambda, DintIntegral::causal_softmax, out, {}, &history),
            ShapeError);
        REQUIRE_THROWS_WITH(
            diffattn::dint_attention(q, k, q, k, v, lambda, DintIntegral::causal_softmax, out, {}, &history),
            Contains("dint_attention") && Contains("a1_column_sum") && Contains("5"));
        REQUIRE_THROWS_AS(diffattn::dint_attention(q, k, q, k, v, lambda, DintIntegral::causal_mean, out, {}, &history),
                          ShapeError);
        REQUIRE_THROWS_WITH(
            diffattn::dint_attention(q, k, q, k, v, lambda, DintIntegral::causal_mean, out, {}, &history),
            Contains("dint_attention") && Contains("o1_row_sum") && Contains("7") && Contains("8"));
        REQUIRE_THROWS_AS(reference::dint_attention(q, k, q, k, v, lambda, DintIntegral::causal_softmax, {}, &history),
                          ShapeError);
    }
}
