// The BF16 products of the tiled core (AttentionOptions::compute, docs/math.md §7.1): the rounding
// and the vdpbf16ps packings against plain sums, the AMX tiles against their emulation; every kind
// and DINT mode on every path this host offers (bf16_widened everywhere, bf16_dot where the CPU has
// AVX512-BF16, bf16_amx there too, on AMX tiles or emulated ones, bf16 the automatic choice)
// within the bound of docs/math.md §7.1 of the exact result, and the paths within the bound of one
// another; a BF16 KV cache read without a conversion; calls of few rows left in float.
#include "test_support.hpp"

#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"
#include "diffattn/kernels/bf16_tiles.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/head_blocks.hpp"

#include "bf16_bound.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// The BF16 modes this host runs: every explicit path (bf16_paths_here) and the automatic choice.
std::vector<Compute> bf16_modes() {
    std::vector<Compute> modes = bf16_paths_here();
    modes.push_back(Compute::bf16);
    return modes;
}

/// One call of `kind` on float inputs (softmax: Q1, K1, V); `history` for DINT's causal modes.
RowMatrix<float> run_kind(Bf16Kind kind, DintIntegral integral, const DiffInputs<float>& in, const AttentionOptions& o,
                          const DintHistory<float>* history, AttentionWorkspace<float>* workspace) {
    RowMatrix<float> out = RowMatrix<float>::Constant(in.q1.rows(), in.v.cols(), 12345.0f);
    switch (kind) {
        case Bf16Kind::softmax: diffattn::softmax_attention(in.q1, in.k1, in.v, out, o, workspace); break;
        case Bf16Kind::diff:
            diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, out, o, workspace);
            break;
        case Bf16Kind::dint: {
            DintHistory<float> copy = history != nullptr ? *history : DintHistory<float>{};
            diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, out, o,
                                     history != nullptr ? &copy : nullptr, workspace);
            break;
        }
    }
    return out;
}

/// The plain reference of `kind` in T.
template <typename T>
RowMatrix<T> reference_of(Bf16Kind kind, DintIntegral integral, const DiffInputs<T>& in, const AttentionOptions& o,
                          const DintHistory<T>* history) {
    switch (kind) {
        case Bf16Kind::softmax: return reference::softmax_attention<T>(in.q1, in.k1, in.v, o);
        case Bf16Kind::diff: return reference::diff_attention<T>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o);
        case Bf16Kind::dint:
            return reference::dint_attention<T>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o, history);
    }
    return {};
}

const char* kind_name(Bf16Kind kind) {
    return kind == Bf16Kind::softmax ? "softmax" : kind == Bf16Kind::diff ? "diff" : "dint";
}

/// Checks |got - want| <= bound + extra entry by entry; reports the worst share of the allowance.
void check_within(const std::string& what, const RowMatrix<float>& got, const RowMatrix<double>& want,
                  const RowMatrix<double>& bound, double extra) {
    Index outside = 0;
    double worst = 0;
    for (Index n = 0; n < got.rows(); ++n) {
        for (Index c = 0; c < got.cols(); ++c) {
            const double error = std::abs(static_cast<double>(got(n, c)) - want(n, c)), allowed = bound(n, c) + extra;
            if (!(error <= allowed)) ++outside;
            worst = std::max(worst, error / allowed);
        }
    }
    INFO(what << ": worst error " << worst << " of its allowance");
    CHECK(outside == 0);
}

/// Row r of A times column j of B, both rounded to BF16, summed in double, and the sum of the
/// products' magnitudes: what the BF16 product kernels' entry C(r, j) is held to.
std::pair<double, double> rounded_product_sum(const RowMatrix<float>& a, const RowMatrix<float>& b, Index r, Index j) {
    double sum = 0, magnitude = 0;
    for (Index i = 0; i < a.cols(); ++i) {
        const double term = static_cast<double>(detail::round_to_bf16(a(r, i))) * detail::round_to_bf16(b(i, j));
        sum += term;
        magnitude += std::abs(term);
    }
    return {sum, magnitude};
}

/// `in` with Q, K and V rounded to BF16 (the history's queries too).
DiffInputs<double> rounded_to_bf16(const DiffInputs<float>& in) {
    DiffInputs<float> r = in;
    for (RowMatrix<float>* m : {&r.q1_all, &r.q2_all, &r.q1, &r.q2, &r.k1, &r.k2, &r.v}) {
        detail::round_to_bf16_in_place(m->data(), m->size());
    }
    return r.cast<double>();
}

/// Every kind and DINT mode of case `c` on every BF16 mode of this host: each within docs/math.md
/// §7.1 of the exact result (the reference in double on the same float inputs) and, more tightly,
/// of the exact result on the inputs rounded to BF16; vdpbf16ps within the paths' bound of the
/// widened products. DINT's causal modes with S > N get the exact history (an input, not rounded).
void check_bf16_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<float>* workspace) {
    const DiffInputs<float> in = random_diff_inputs<float>(rng, c);
    const DiffInputs<double> wide = in.cast<double>(), rounded = rounded_to_bf16(in);
    const Index cached = c.seq_len_kv - c.seq_len_q;
    struct Run {
        Bf16Kind kind;
        DintIntegral integral;
    };
    std::vector<Run> runs{{Bf16Kind::softmax, DintIntegral::causal_softmax}, {Bf16Kind::diff, DintIntegral::causal_softmax}};
    for (DintIntegral integral : kDintIntegrals) {
        if (integral != DintIntegral::global_mean || (c.mask == MaskKind::none && cached == 0)) {
            runs.push_back({Bf16Kind::dint, integral});
        }
    }
    for (const Run& run : runs) {
        const bool history = run.kind == Bf16Kind::dint && run.integral != DintIntegral::global_mean && cached > 0;
        const DintHistory<double> wide_history = history ? reference_history<double>(wide, c.options()) : DintHistory<double>{};
        const DintHistory<float> float_history = cast_history<float>(wide_history);
        const DintHistory<double> exact_history = cast_history<double>(float_history);  // what the kernel is given
        const std::string what = std::string(kind_name(run.kind)) +
                                 (run.kind == Bf16Kind::dint ? std::string(" ") + integral_name(run.integral) : "") +
                                 " " + c.describe();
        const RowMatrix<double> oracle =
            reference_of<double>(run.kind, run.integral, wide, c.options(), history ? &exact_history : nullptr);
        const double plain = static_cast<double>(max_abs_diff(
            reference_of<float>(run.kind, run.integral, in, c.options(), history ? &float_history : nullptr), oracle));
        const RowMatrix<double> bound = bf16_bound(Bf16Comparison::exact, run.kind, wide, run.integral, c.options(),
                                                   history ? &exact_history : nullptr);
        const RowMatrix<double> rounded_oracle =
            reference_of<double>(run.kind, run.integral, rounded, c.options(), history ? &exact_history : nullptr);
        const double rounded_plain = static_cast<double>(max_abs_diff(
            reference_of<float>(run.kind, run.integral, rounded.cast<float>(), c.options(),
                                history ? &float_history : nullptr),
            rounded_oracle));
        const RowMatrix<double> rounded_bound = bf16_bound(Bf16Comparison::rounded_inputs, run.kind, rounded,
                                                           run.integral, c.options(), history ? &exact_history : nullptr);
        std::vector<RowMatrix<float>> outs;
        const std::vector<Compute> modes = bf16_modes();
        for (Compute compute : modes) {
            AttentionOptions o = c.options();
            o.compute = compute;
            outs.push_back(run_kind(run.kind, run.integral, in, o, history ? &float_history : nullptr, workspace));
            check_within(what + " " + to_string(compute), outs.back(), oracle, bound, 2 * plain + 1e-6);
            check_within(what + " " + to_string(compute) + " on the rounded inputs", outs.back(), rounded_oracle,
                         rounded_bound, 2 * rounded_plain + 1e-6);
        }
        // vdpbf16ps and the AMX tiles against the widened products (modes[0]).
        for (std::size_t i = 1; i < modes.size(); ++i) {
            if (modes[i] == Compute::bf16) continue;
            const RowMatrix<double> paths = bf16_bound(Bf16Comparison::paths, run.kind, wide, run.integral,
                                                       c.options(), history ? &exact_history : nullptr);
            check_within(what + " " + to_string(modes[i]) + " vs bf16_widened", outs[i], outs[0].cast<double>(),
                         paths, 4 * plain + 2e-6);
        }
    }
}

}  // namespace

TEST_CASE("round_to_bf16 rounds floats to the nearest BF16 value as Eigen::bfloat16 does, ties to even",
          "[kernels][bf16]") {
    DIFFATTN_TEST_RNG(rng);
    std::vector<float> values{0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 0x1.00fffep0f, 3.3961e38f, 3.4e38f,
                              std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    std::uniform_int_distribution<std::uint32_t> bits;
    for (int i = 0; i < 4099; ++i) {
        const std::uint32_t u = bits(rng);
        float x;
        std::memcpy(&x, &u, sizeof x);
        values.push_back(x);
    }
    std::vector<float> rounded = values;
    detail::round_to_bf16_in_place(rounded.data(), static_cast<Index>(rounded.size()));
    Index wrong = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const float expected = static_cast<float>(Eigen::bfloat16(values[i]));
        const bool same = std::isnan(expected) ? std::isnan(rounded[i]) : std::memcmp(&expected, &rounded[i], 4) == 0;
        const bool scalar_same = std::isnan(expected) ? std::isnan(detail::round_to_bf16(values[i]))
                                                      : detail::round_to_bf16(values[i]) == expected;
        wrong += !same || !scalar_same;
    }
    CHECK(wrong == 0);
    // The packets' rounding of probabilities (the fold's): non-negative floats below 2^112 and NaN.
    using Packet = Eigen::internal::packet_traits<float>::type;
    constexpr Index lanes = Eigen::internal::packet_traits<float>::size;
    std::vector<float> probabilities{0.0f, 1.0f, 1.00390625f, 1.01171875f, 0x1.00fffep0f, 0x1.fffffep111f,
                                     std::numeric_limits<float>::denorm_min(), 0x1.0081p-130f,
                                     std::numeric_limits<float>::min(), std::numeric_limits<float>::quiet_NaN()};
    for (float x : values) {
        if (std::isnan(x) || (!std::signbit(x) && x < 0x1p112f)) probabilities.push_back(x);
    }
    while (probabilities.size() % static_cast<std::size_t>(lanes) != 0) probabilities.push_back(0.5f);
    wrong = 0;
    float first_wrong = 0;
    for (std::size_t i = 0; i < probabilities.size(); i += static_cast<std::size_t>(lanes)) {
        float out[lanes];
        Eigen::internal::pstoreu(out, detail::round_probabilities_to_bf16(
                                          Eigen::internal::ploadu<Packet>(probabilities.data() + i)));
        for (Index l = 0; l < lanes; ++l) {
            const float expected = detail::round_to_bf16(probabilities[i + static_cast<std::size_t>(l)]);
            const bool differs = std::isnan(expected) ? !std::isnan(out[l]) : std::memcmp(&expected, &out[l], 4) != 0;
            if (differs && wrong++ == 0) first_wrong = probabilities[i + static_cast<std::size_t>(l)];
        }
    }
    CAPTURE(first_wrong);
    CHECK(wrong == 0);
    CHECK(detail::round_to_bf16(1.00390625f) == 1.0f);             // a tie rounds to the even neighbour
    CHECK(detail::round_to_bf16(1.01171875f) == 1.015625f);        // ... up, here
    CHECK(std::isinf(detail::round_to_bf16(3.4e38f)));             // past BF16's largest finite value
}

TEST_CASE("bf16_dot: the BF16 rows, pair panels and vdpbf16ps products match sums in double", "[kernels][bf16]") {
    if (!bf16_dot_available()) {
        WARN("this CPU has no AVX512-BF16: the bf16_dot path is not taken here");
        return;
    }
#if defined(DIFFATTN_X86_TARGETS)
    namespace dot = detail::bf16_dot;
    DIFFATTN_TEST_RNG(rng);
    const auto low = [](dot::Word w) { return detail::bf16_value(static_cast<std::uint16_t>(w & 0xffffu)); };
    const auto high = [](dot::Word w) { return detail::bf16_value(static_cast<std::uint16_t>(w >> 16)); };
    const auto bf16 = [](float x) { return detail::round_to_bf16(x); };
    for (int trial = 0; trial < 40; ++trial) {
        const Index m = uniform_index(rng, 1, 70), n = uniform_index(rng, 1, 140), k = uniform_index(rng, 1, 90);
        INFO("m " << m << " n " << n << " k " << k);
        const RowMatrix<float> a = random_matrix<float>(rng, m, k, -3, 3), b = random_matrix<float>(rng, k, n, -3, 3);
        // A as BF16 rows, with room past each row's words (its stride).
        const Index lda = dot::words_of(k) + trial % 3;
        std::vector<dot::Word> rows(static_cast<std::size_t>(m * lda), 0xdeadbeefu);
        dot::pack_rows(a.data(), m, k, k, rows.data(), lda);
        Index wrong = 0;
        for (Index r = 0; r < m; ++r) {
            for (Index i = 0; i < k; ++i) {
                const dot::Word w = rows[static_cast<std::size_t>(r * lda + i / 2)];
                wrong += (i % 2 ? high(w) : low(w)) != bf16(a(r, i));
            }
            if (k % 2 == 1) wrong += (rows[static_cast<std::size_t>(r * lda + k / 2)] >> 16) != 0;
        }
        CHECK(wrong == 0);
        // B as pair panels from float rows and from BF16 rows (values).
        const Index ldb = dot::panel_columns(n), pairs = dot::words_of(k);
        std::vector<dot::Word> panels(static_cast<std::size_t>(pairs * ldb), 0xdeadbeefu), again = panels;
        dot::pack_values(b.data(), k, n, n, panels.data(), ldb);
        const RowMatrix<Eigen::bfloat16> b_bf16 = b.cast<Eigen::bfloat16>();
        dot::pack_values(reinterpret_cast<const std::uint16_t*>(b_bf16.data()), k, n, n, again.data(), ldb);
        CHECK(again == panels);
        for (Index w = 0; w < pairs; ++w) {
            for (Index j = 0; j < ldb; ++j) {
                const dot::Word x = panels[static_cast<std::size_t>(w * ldb + j)];
                const float first = j < n ? bf16(b(2 * w, j)) : 0.0f;
                const float second = j < n && 2 * w + 1 < k ? bf16(b(2 * w + 1, j)) : 0.0f;
                wrong += low(x) != first || high(x) != second;
            }
        }
        CHECK(wrong == 0);
        // C = alpha A B, or C += A B, against double sums of the rounded operands.
        const bool accumulate = trial % 2 == 1;
        RowMatrix<float> c = RowMatrix<float>::Constant(m, n + 3, 7.0f);  // 3 columns past n: never written
        dot::multiply(rows.data(), lda, m, panels.data(), ldb, n, pairs, c.data(), c.outerStride(), 0.37f, accumulate);
        for (Index r = 0; r < m; ++r) {
            for (Index j = 0; j < n; ++j) {
                const auto [sum, magnitude] = rounded_product_sum(a, b, r, j);
                const double want = accumulate ? 7.0 + sum : 0.37 * sum;
                wrong += !(std::abs(c(r, j) - want) <= fp32_gamma(k + 2) * (magnitude + 7.0));
            }
            for (Index j = n; j < n + 3; ++j) wrong += c(r, j) != 7.0f;
        }
        CHECK(wrong == 0);
        // Keys [n x k] as K^T's pair panels: from float rows, BF16 rows and a KV cache's blocks of 16.
        const RowMatrix<float> keys = random_matrix<float>(rng, n, k);
        const Index ldk = dot::panel_columns(n);
        std::vector<dot::Word> key_panels(static_cast<std::size_t>(pairs * ldk), 1u), from_bf16 = key_panels,
            from_blocks = key_panels;
        dot::pack_keys(keys.data(), n, k, k, key_panels.data(), ldk);
        for (Index w = 0; w < pairs; ++w) {
            for (Index j = 0; j < ldk; ++j) {
                const dot::Word x = key_panels[static_cast<std::size_t>(w * ldk + j)];
                const float first = j < n ? bf16(keys(j, 2 * w)) : 0.0f;
                const float second = j < n && 2 * w + 1 < k ? bf16(keys(j, 2 * w + 1)) : 0.0f;
                wrong += low(x) != first || high(x) != second;
            }
        }
        CHECK(wrong == 0);
        const RowMatrix<Eigen::bfloat16> keys_bf16 = keys.cast<Eigen::bfloat16>();
        dot::pack_keys(reinterpret_cast<const std::uint16_t*>(keys_bf16.data()), n, k, k, from_bf16.data(), ldk);
        CHECK(from_bf16 == key_panels);
        Vector<Eigen::bfloat16> store =
            Vector<Eigen::bfloat16>::Constant(detail::whole_key_blocks(n) * k, Eigen::bfloat16(-77.0f));
        HeadBlocks<Eigen::bfloat16>::blocked_keys(store.data(), 1, k, n).write_rows(0, keys_bf16);
        dot::pack_blocked_keys(reinterpret_cast<const std::uint16_t*>(store.data()), n, k, from_blocks.data(), ldk);
        CHECK(from_blocks == key_panels);
    }
#endif
}

TEST_CASE("bf16_amx: the tile products on the pair packings match sums in double, and the AMX tiles match "
          "their emulation",
          "[kernels][bf16]") {
    if (!bf16_dot_available()) {
        WARN("this CPU has no AVX512-BF16: the packings of the bf16_amx path are not made here");
        return;
    }
#if defined(DIFFATTN_X86_TARGETS)
    namespace dot = detail::bf16_dot;
    namespace tiles = detail::bf16_tiles;
    DIFFATTN_TEST_RNG(rng);
    const bool hardware = detail::cpu_has_amx_bf16();
    if (!hardware) WARN("this CPU has no AMX tiles: only their emulation runs here");
    constexpr dot::Word kNaNs = 0x7fc07fc0u;  // two BF16 NaNs: any word read past the operands shows
    for (int trial = 0; trial < 40; ++trial) {
        // Edges of 16 and 32 rows, columns and words on both sides, and shapes past one block.
        const Index m = trial < 8 ? 16 * (trial % 4 + 1) + trial / 4 - 1 : uniform_index(rng, 1, 80);
        const Index n = trial < 8 ? 32 * (trial % 3 + 1) - trial % 2 : uniform_index(rng, 1, 150);
        const Index k = trial < 8 ? 32 * (trial % 2 + 1) + trial % 3 - 1 : uniform_index(rng, 1, 140);
        INFO("m " << m << " n " << n << " k " << k);
        const RowMatrix<float> a = random_matrix<float>(rng, m, k, -3, 3), b = random_matrix<float>(rng, k, n, -3, 3);
        const Index lda = dot::words_of(k) + trial % 3, pairs = dot::words_of(k), ldb = dot::panel_columns(n);
        std::vector<dot::Word> rows(static_cast<std::size_t>(m * lda), kNaNs);
        dot::pack_rows(a.data(), m, k, k, rows.data(), lda);
        std::vector<dot::Word> panels(static_cast<std::size_t>(pairs * ldb));  // exactly: ASan sees a read past
        dot::pack_values(b.data(), k, n, n, panels.data(), ldb);
        const bool accumulate = trial % 2 == 1;
        const float alpha = trial % 4 == 0 ? 1.0f : 0.37f;
        // C's stride leaves 3 columns past n that no product may write.
        RowMatrix<float> emulated = RowMatrix<float>::Constant(m, n + 3, 7.0f), ran = emulated;
        tiles::EmulatedTiles unit;
        tiles::multiply_on(unit, rows.data(), lda, m, panels.data(), ldb, n, pairs, emulated.data(),
                           emulated.outerStride(), alpha, accumulate);
        tiles::multiply(rows.data(), lda, m, panels.data(), ldb, n, pairs, ran.data(), ran.outerStride(), alpha,
                        accumulate);
        Index wrong = 0, apart = 0;
        for (Index r = 0; r < m; ++r) {
            for (Index j = 0; j < n; ++j) {
                const auto [sum, magnitude] = rounded_product_sum(a, b, r, j);
                const double want = accumulate ? 7.0 + sum : alpha * sum;
                const double allowed = fp32_gamma(k + 2) * (magnitude + 7.0);
                wrong += !(std::abs(emulated(r, j) - want) <= allowed);
                // The registers against the emulation: two sums of the same products.
                apart += !(std::abs(static_cast<double>(ran(r, j)) - emulated(r, j)) <= 2 * allowed);
            }
            for (Index j = n; j < n + 3; ++j) wrong += emulated(r, j) != 7.0f || ran(r, j) != 7.0f;
        }
        CHECK(wrong == 0);
        CHECK(apart == 0);
        if (!hardware) CHECK((ran.array() == emulated.array()).all());  // the emulation ran for both
    }
#endif
}

TEST_CASE("BF16 products: softmax, DIFF and every DINT mode within docs/math.md §7.1 of the exact result, "
          "the paths within their bound of each other, on tile-edge and random shapes, 1-3 threads",
          "[kernels][bf16]") {
    DIFFATTN_TEST_RNG(rng);
    // DINT's references cost S^2 (the history's maps): cases of at most 20000 cells.
    const std::vector<KernelCase> cases = kernel_cases(rng, kQueryTile, kKeyTile, 4, 20000, true);
    AttentionWorkspace<float> workspace;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        if (cases[i].seq_len_q < kMinPackedRows) continue;  // calls of few rows: the test below
        INFO(cases[i].describe());
        check_bf16_case(rng, cases[i], i % 2 == 0 ? nullptr : &workspace);
    }
}

TEST_CASE("BF16 products over several query groups: docs/math.md §7.1, and identical on 1, 2 and 3 threads "
          "but for DINT causal_softmax",
          "[kernels][bf16][threads]") {
    DIFFATTN_TEST_RNG(rng);
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        KernelCase c = multi_group_case(kGroupRows + kQueryTile + 3, kGroupRows + kQueryTile + 3 + kKeyTile + 5, mask);
        c.head_dim = 24;  // d and dv not multiples of 16: the panels' tails
        c.value_dim = 40;
        INFO(c.describe());
        check_bf16_case(rng, c, nullptr);
        const DiffInputs<float> in = random_diff_inputs<float>(rng, c);
        const DintHistory<float> history = reference_history<float>(in, c.options());
        for (Compute compute : bf16_modes()) {
            for (Bf16Kind kind : {Bf16Kind::softmax, Bf16Kind::diff, Bf16Kind::dint}) {
                AttentionOptions o = c.options();
                o.compute = compute;
                const RowMatrix<float> one = run_kind(kind, DintIntegral::causal_mean, in, o, &history, nullptr);
                for (int threads : {2, 3}) {
                    o.threads = threads;
                    const RowMatrix<float> more = run_kind(kind, DintIntegral::causal_mean, in, o, &history, nullptr);
                    CHECK((more.array() == one.array()).all());
                }
            }
        }
    }
}

TEST_CASE("BF16 products: a chunked prefill continues DINT's causal integrals from the history of its first "
          "chunk within docs/math.md §7.1",
          "[kernels][bf16]") {
    DIFFATTN_TEST_RNG(rng);
    const Index first = kQueryTile + 11, second = kQueryTile + 30, total = first + second;
    const KernelCase whole = multi_group_case(total, total, MaskKind::causal);
    const DiffInputs<float> in = random_diff_inputs<float>(rng, whole);
    const DiffInputs<double> wide = in.cast<double>();
    for (DintIntegral integral : kCausalDintIntegrals) {
        for (Compute compute : bf16_modes()) {
            INFO(integral_name(integral) << " " << to_string(compute));
            AttentionOptions o;
            o.compute = compute;
            o.threads = 2;
            DintHistory<float> history;
            RowMatrix<float> out1(first, in.v.cols()), out2(second, in.v.cols());
            diffattn::dint_attention(in.q1.topRows(first), in.k1.topRows(first), in.q2.topRows(first),
                                     in.k2.topRows(first), in.v.topRows(first), in.lambda, integral, out1, o, &history);
            diffattn::dint_attention(in.q1.bottomRows(second), in.k1, in.q2.bottomRows(second), in.k2, in.v, in.lambda,
                                     integral, out2, o, &history);
            CHECK(history.rows == total);
            // The whole sequence as one call: every row computed with BF16 products, as here.
            const RowMatrix<double> oracle = reference_of<double>(Bf16Kind::dint, integral, wide, {}, nullptr);
            const double plain = static_cast<double>(
                max_abs_diff(reference_of<float>(Bf16Kind::dint, integral, in, {}, nullptr), oracle));
            const RowMatrix<double> bound = bf16_bound(Bf16Comparison::exact, Bf16Kind::dint, wide, integral, {}, nullptr);
            check_within("first chunk", out1, oracle.topRows(first), bound.topRows(first), 2 * plain + 1e-6);
            check_within("second chunk", out2, oracle.bottomRows(second), bound.bottomRows(second), 2 * plain + 1e-6);
        }
    }
}

TEST_CASE("BF16 products read a BF16 KV cache's keys and values without a conversion: the same result as "
          "those values given in float, row by row or in blocks of 16",
          "[kernels][bf16][half_kv]") {
    DIFFATTN_TEST_RNG(rng);
    using S = Eigen::bfloat16;
    for (const KernelCase& c : {multi_group_case(kQueryTile + 9, kQueryTile + 9 + kKeyTile + 3, MaskKind::causal),
                                multi_group_case(kMinPackedRows + 1, kKeyTile + 1, MaskKind::causal)}) {
        KernelCase odd = c;
        odd.head_dim = 17;  // an odd head dim pairs its last entry with a zero
        for (const KernelCase& shape : {c, odd}) {
            INFO(shape.describe());
            DiffInputs<float> in = random_diff_inputs<float>(rng, shape);
            const RowMatrix<S> k1 = in.k1.cast<S>(), k2 = in.k2.cast<S>(), v = in.v.cast<S>();
            in.k1 = k1.cast<float>();  // the cache's values, exactly
            in.k2 = k2.cast<float>();
            in.v = v.cast<float>();
            Vector<S> store1 = Vector<S>::Zero(detail::whole_key_blocks(k1.rows()) * k1.cols()), store2 = store1;
            const auto blocks1 = HeadBlocks<S>::blocked_keys(store1.data(), 1, k1.cols(), k1.rows());
            const auto blocks2 = HeadBlocks<S>::blocked_keys(store2.data(), 1, k2.cols(), k2.rows());
            blocks1.write_rows(0, k1);
            blocks2.write_rows(0, k2);
            const DintHistory<float> history = reference_history<float>(in, shape.options());
            for (Compute compute : bf16_modes()) {
                AttentionOptions o = shape.options();
                o.compute = compute;
                for (bool blocked : {false, true}) {
                    const detail::KeyRows<S> key1 = blocked ? blocks1.as_const().keys(0, k1.rows()) : detail::KeyRows<S>(k1);
                    const detail::KeyRows<S> key2 = blocked ? blocks2.as_const().keys(0, k2.rows()) : detail::KeyRows<S>(k2);
                    RowMatrix<float> out(shape.seq_len_q, shape.value_dim);
                    detail::softmax_attention<float, S>(in.q1, key1, v, out, o, nullptr);
                    CHECK(out == run_kind(Bf16Kind::softmax, DintIntegral::causal_mean, in, o, nullptr, nullptr));
                    detail::diff_attention<float, S>(in.q1, key1, in.q2, key2, v, in.lambda, out, o, nullptr);
                    CHECK(out == run_kind(Bf16Kind::diff, DintIntegral::causal_mean, in, o, nullptr, nullptr));
                    for (DintIntegral integral : kCausalDintIntegrals) {
                        DintHistory<float> copy = history;
                        detail::dint_attention<float, S>(in.q1, key1, in.q2, key2, v, in.lambda, integral, out, o,
                                                         &copy, nullptr);
                        CHECK(out == run_kind(Bf16Kind::dint, integral, in, o, &history, nullptr));
                    }
                }
            }
        }
    }
}

TEST_CASE("BF16 compute leaves calls of fewer than kMinPackedRows rows (decode steps) in float, and a double "
          "kernel refuses it",
          "[kernels][bf16][decode]") {
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<float>(rng, 6, [&](const KernelCase& c, AttentionWorkspace<float>* workspace) {
        const DiffInputs<float> in = random_diff_inputs<float>(rng, c);
        const DintHistory<float> history = reference_history<float>(in, c.options());
        for (Bf16Kind kind : {Bf16Kind::softmax, Bf16Kind::diff, Bf16Kind::dint}) {
            const RowMatrix<float> scalar = run_kind(kind, DintIntegral::causal_softmax, in, c.options(), &history, workspace);
            for (Compute compute : bf16_modes()) {
                AttentionOptions o = c.options();
                o.compute = compute;
                CHECK(run_kind(kind, DintIntegral::causal_softmax, in, o, &history, workspace) == scalar);
            }
        }
    });
    const RowMatrix<double> q = random_matrix<double>(rng, 9, 4), v = random_matrix<double>(rng, 9, 8);
    RowMatrix<double> out(9, 8);
    AttentionOptions o;
    o.compute = Compute::bf16;
    CHECK_THROWS_AS(diffattn::softmax_attention(q, q, v, out, o), OptionError);
}

TEST_CASE("BF16 products in GDA: each signal head equals DIFF with the same compute, bit for bit",
          "[kernels][bf16][gda]") {
    // A GDA group runs its noise map once and each signal head as a map beside it, as DIFF runs its
    // two maps (kernels/gda_attention.hpp), so DIFF's bound (checked above) holds for every head.
    DIFFATTN_TEST_RNG(rng);
    const Index gr = 3;
    for (const KernelCase& c : {multi_group_case(kGroupRows + 21, kGroupRows + 21 + kKeyTile + 3, MaskKind::causal),
                                multi_group_case(kQueryTile + 5, kQueryTile + 5, MaskKind::none)}) {
        INFO(c.describe());
        const DiffInputs<float> in = random_diff_inputs<float>(rng, c);
        const RowMatrix<float> q1 = random_matrix<float>(rng, c.seq_len_q, gr * c.head_dim);
        for (Compute compute : bf16_modes()) {
            INFO(to_string(compute));
            AttentionOptions o = c.options();
            o.compute = compute;
            o.threads = 2;
            RowMatrix<float> out(c.seq_len_q, gr * c.value_dim), head(c.seq_len_q, c.value_dim);
            diffattn::gda_attention(q1, in.k1, in.q2, in.k2, in.v, in.lambda, out, o);
            for (Index i = 0; i < gr; ++i) {
                const RowMatrix<float> signal = q1.middleCols(i * c.head_dim, c.head_dim);
                diffattn::diff_attention(signal, in.k1, in.q2, in.k2, in.v, in.lambda, head, o);
                CHECK(out.middleCols(i * c.value_dim, c.value_dim) == head);
            }
            o.compute = Compute::scalar;  // and the compute took effect
            RowMatrix<float> scalar(c.seq_len_q, gr * c.value_dim);
            diffattn::gda_attention(q1, in.k1, in.q2, in.k2, in.v, in.lambda, scalar, o);
            CHECK(scalar != out);
        }
    }
}
