// The checkpoint-family conventions as data on the one attention module (docs/checkpoints.md,
// layers/attention_conventions.hpp), each against a transcription of docs/checkpoints.md written
// here in double: rotate_half rotary, llama3 frequencies, PolyNorm, the halves pairing's row
// reordering and the weightless per-pair norm. (The composition is checked against the
// checkpoints' float64 goldens by tests/checkpoints.)
#include "naive_reference.hpp"

#include "diffattn/layers/attention_config.hpp"
#include "diffattn/layers/multi_head_attention.hpp"
#include "diffattn/layers/poly_norm.hpp"
#include "diffattn/layers/rotary.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace diffattn;

namespace {

/// A diff module of width `d_model` with `n_heads` heads (our own conventions until changed).
AttentionConfig diff_module(Index d_model, Index n_heads) {
    AttentionConfig c;
    c.kind = AttentionKind::diff;
    c.d_model = d_model;
    c.n_heads = n_heads;
    return c;
}

}  // namespace

TEMPLATE_TEST_CASE("rotate_half rotary pairs element i with i + d/2", "[layers][rotary][conventions]", float, double) {
    using T = TestType;
    const Index n = 9, d = 8, maps = 3;
    RotarySpec spec{d, 500.0, RotaryStyle::rotate_half, {}};
    const RotaryTable<T> table(spec, 32);
    const RowMatrix<T> x = naive::seeded<T>(n, maps * d, 3);
    RowMatrix<T> y = x;
    table.apply(y, 4);
    double worst = 0;
    for (Index t = 0; t < n; ++t) {
        for (Index m = 0; m < maps; ++m) {
            for (Index i = 0; i < d / 2; ++i) {
                // docs/checkpoints.md: y_i = x_i cos - x_{i+d/2} sin, y_{i+d/2} = x_{i+d/2} cos + x_i sin.
                const double angle = static_cast<double>(t + 4) * std::pow(500.0, -2.0 * i / d);
                const double a = x(t, m * d + i), b = x(t, m * d + i + d / 2);
                worst = std::max(worst, std::abs(y(t, m * d + i) - (a * std::cos(angle) - b * std::sin(angle))));
                worst = std::max(worst, std::abs(y(t, m * d + i + d / 2) - (b * std::cos(angle) + a * std::sin(angle))));
            }
        }
    }
    CHECK(worst < 16 * std::numeric_limits<T>::epsilon());
}

TEST_CASE("llama3 rope scaling adjusts the frequencies as _compute_llama3_parameters", "[layers][rotary][conventions]") {
    // tests/data/checkpoints/README.md, diffllama_llama3: d 8, theta 10000, factor 4, low 1, high 4,
    // omax 8: of the frequencies 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283) the first lies
    // in [omax / high, omax / low] = [2, 8] and is smoothed, the other three are divided by 4.
    RotarySpec spec{8, 10000.0, RotaryStyle::rotate_half, {4.0, 1.0, 4.0, 8.0}};
    const double pi = 3.14159265358979323846;
    const double s = (8.0 / (2 * pi) - 1.0) / (4.0 - 1.0);
    CHECK(spec.frequency(0) == Approx((1 - s) * 1.0 / 4 + s * 1.0).epsilon(1e-14));
    CHECK(spec.frequency(1) == Approx(0.1 / 4).epsilon(1e-14));
    CHECK(spec.frequency(2) == Approx(0.01 / 4).epsilon(1e-14));
    CHECK(spec.frequency(3) == Approx(0.001 / 4).epsilon(1e-14));
    // Without scaling: theta^(-2i/d), the table our own format always had.
    spec.llama3 = {};
    CHECK(spec.frequency(1) == std::pow(10000.0, -0.25));
    // A table of another spec does not serve (the scratch and KV cache checks compare specs).
    CHECK_FALSE(RotarySpec{8, 10000.0, RotaryStyle::rotate_half, {}} == RotarySpec{8, 10000.0, RotaryStyle::interleaved, {}});
}

TEMPLATE_TEST_CASE("PolyNorm: w0 n(z^3) + w1 n(z^2) + w2 n(z) + b, eps 1e-6", "[layers][conventions]", float, double) {
    using T = TestType;
    PolyNorm<T> poly;
    poly.weight << T(0.3), T(-0.6), T(0.9);
    poly.bias << T(0.05);
    const Index n = 5, f = 48;
    const RowMatrix<T> z = naive::seeded<T>(n, f, 11, 2.0);
    RowMatrix<T> y = z;
    poly.apply(y);
    double worst = 0;
    for (Index t = 0; t < n; ++t) {
        const auto norm_of = [&](int power) {  // 1 / sqrt(mean(u^2) + 1e-6), u = z^power
            double sum = 0;
            for (Index i = 0; i < f; ++i) sum += std::pow(static_cast<double>(z(t, i)), 2 * power);
            return 1.0 / std::sqrt(sum / f + 1e-6);
        };
        const double n3 = norm_of(3), n2 = norm_of(2), n1 = norm_of(1);
        for (Index i = 0; i < f; ++i) {
            const double v = z(t, i);
            const double expected = 0.3 * v * v * v * n3 - 0.6 * v * v * n2 + 0.9 * v * n1 + 0.05;
            worst = std::max(worst, std::abs(y(t, i) - expected));
        }
    }
    CHECK(worst < 64 * std::numeric_limits<T>::epsilon());
}

TEST_CASE("halves pairing: q/k/v row blocks are stored in the stripe layout", "[layers][conventions]") {
    // 4 pairs (8 query heads), 4 kv heads (2 of ours), d 2.
    AttentionConfig c = diff_module(6, 4);
    c.n_kv_heads = 2;
    c.given_head_dim = 2;
    c.conventions.head_pairing = HeadPairing::halves;
    CHECK(stored_head(HeadPairing::halves, 0, 8) == 0);
    CHECK(stored_head(HeadPairing::halves, 3, 8) == 6);
    CHECK(stored_head(HeadPairing::halves, 4, 8) == 1);  // head j + P is map 2 of pair j
    CHECK(stored_head(HeadPairing::halves, 7, 8) == 7);
    CHECK(stored_head(HeadPairing::stripe, 5, 8) == 5);

    MultiHeadAttention<double> module(c);
    ParameterList<double> list;
    module.collect_parameters("", list);
    // The file's row r of q_proj (head r / d) goes to stored row stored_head(r / d) d + r % d.
    const Parameter<double>& q = list.items().front();
    REQUIRE(q.name == "q_proj.weight");
    REQUIRE(q.shape == std::vector<Index>{16, 6});
    REQUIRE(q.slices.size() == 8);
    for (Index head = 0; head < 8; ++head) {
        const ParameterSlice<double>& slice = q.slices[static_cast<std::size_t>(head)];
        CHECK(slice.data == module.weights().q_proj.dense().data() + stored_head(HeadPairing::halves, head, 8) * 2 * 6);
    }
    // v: kv head g's value rows are [v(g) ; v(g + Hkv/2)] for our value head g.
    const Parameter<double>& v = list.items()[2];
    REQUIRE(v.name == "v_proj.weight");
    REQUIRE(v.slices.size() == 4);
    CHECK(v.slices[1].data == module.weights().v_proj.dense().data() + 2 * 2 * 6);  // file kv head 1 -> stored block 2
    CHECK(v.slices[2].data == module.weights().v_proj.dense().data() + 1 * 2 * 6);  // file kv head 2 -> stored block 1
}

TEST_CASE("a weightless per-pair norm lists no subln.weight; the offset shifts lambda_init", "[layers][conventions]") {
    AttentionConfig c = diff_module(16, 2);
    c.conventions.family = CheckpointFamily::motif;
    c.conventions.lambda_depth_offset = -1;
    CHECK(c.lambda_init() == Approx(0.8 - 0.6 * std::exp(0.3)).epsilon(1e-15));  // -0.0099071
    CHECK(std::string(c.out_proj_name()) == "o_proj");
    c.conventions.pair_norm = PairNorm::plain;
    c.conventions.pair_norm_eps = 1e-6;
    MultiHeadAttention<double> module(c);
    CHECK(module.weights().subln.eps == 1e-6);
    ParameterList<double> list;
    module.collect_parameters("", list);
    for (const Parameter<double>& p : list) CHECK(p.name != "subln.weight");
    CHECK(list.parameter_count() == c.parameter_count());
    c.conventions.pair_norm_eps = 0;
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("per-pair norm eps"));
}
