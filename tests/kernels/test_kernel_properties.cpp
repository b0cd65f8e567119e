// Properties of the fast kernels that hold whatever the inputs: DIFF with lambda = 0 is softmax
// attention; the SPEC 2.3 identities of DINT's mean modes; fully masked rows are exact zeros;
// huge logits stay finite; a NaN only reaches the outputs that depend on it; and DINT's causal
// modes fed in chunks with a history equal one call over the whole sequence (SPEC 6).
#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

#include <algorithm>
#include <limits>

using namespace diffattn;
using namespace diffattn::test;

namespace {

template <typename T>
long double eps() {
    return static_cast<long double>(std::numeric_limits<T>::epsilon());
}

/// Every output of every kernel for one input set: softmax (on Q1, K1), diff, and dint in each
/// mode that applies to the options (global_mean only with mask none and no cache).
template <typename T>
struct AllOutputs {
    RowMatrix<T> softmax, diff;
    std::vector<std::pair<DintIntegral, RowMatrix<T>>> dint;
};

template <typename T>
AllOutputs<T> run_all(const DiffInputs<T>& in, const AttentionOptions& o) {
    const Index n = in.q1.rows(), dv = in.v.cols();
    AllOutputs<T> r;
    r.softmax.resize(n, dv);
    r.diff.resize(n, dv);
    diffattn::softmax_attention(in.q1, in.k1, in.v, r.softmax, o);
    diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, r.diff, o);
    for (DintIntegral integral : kDintIntegrals) {
        const bool cached = in.k1.rows() > n;
        if (integral == DintIntegral::global_mean && (o.mask != MaskKind::none || cached)) continue;
        RowMatrix<T> out(n, dv);
        DintHistory<T> history;
        if (cached && integral != DintIntegral::global_mean) {
            // The history of the S - N earlier tokens, as decoding builds it: one fast call over them.
            const Index earlier = in.k1.rows() - n;
            AttentionOptions earlier_options = o;
            if (o.valid_len) earlier_options.valid_len = std::min(*o.valid_len, earlier);
            RowMatrix<T> earlier_out(earlier, dv);
            diffattn::dint_attention(in.q1_all.topRows(earlier), in.k1.topRows(earlier), in.q2_all.topRows(earlier),
                                     in.k2.topRows(earlier), in.v.topRows(earlier), in.lambda, integral, earlier_out,
                                     earlier_options, &history);
        }
        diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, out, o,
                                 cached ? &history : nullptr);
        r.dint.emplace_back(integral, std::move(out));
    }
    return r;
}

/// Rows [begin, end) of `m` are all finite.
template <typename T>
bool rows_finite(const RowMatrix<T>& m, Index begin, Index end) {
    return begin >= end || m.middleRows(begin, end - begin).allFinite();
}

}  // namespace

TEMPLATE_TEST_CASE("diff_attention with lambda = 0 is softmax attention of map 1 (V of width 2d)",
                   "[kernels][properties]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        KernelCase c;
        c.seq_len_q = kQueryTile + 7;
        c.seq_len_kv = c.seq_len_q + kKeyTile + 3;
        c.head_dim = 16;
        c.value_dim = 2 * c.head_dim;
        c.mask = mask;
        INFO(c.describe());
        auto in = random_diff_inputs<T>(rng, c);
        in.lambda = T(0);
        const AttentionOptions o = c.options();
        RowMatrix<T> diff(c.seq_len_q, c.value_dim), softmax(c.seq_len_q, c.value_dim);
        diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, T(0), diff, o);
        diffattn::softmax_attention(in.q1, in.k1, in.v, softmax, o);
        // Mathematically equal; allow a few roundings of an O(1) output.
        CHECK(max_abs_diff(diff, softmax) <= 4 * eps<T>() * (1 + max_abs(softmax)));
    }
}

TEMPLATE_TEST_CASE("dint_attention mean modes satisfy the SPEC 2.3 identities on the fast kernels",
                   "[kernels][properties]", float, double) {
    using T = TestType;
    using L = long double;
    DIFFATTN_TEST_RNG(rng);
    // causal_mean: O = O1 - lambda O2 + lambda * (running mean of the rows of O1, cached rows included)
    // global_mean: O = O1 - lambda O2 + lambda * (mean of all rows of O1)
    // with O1 = softmax_attention(Q1, K1, V) and O2 = softmax_attention(Q2, K2, V), fast kernels.
    struct Shape {
        Index n, s;
        MaskKind mask;
    };
    const Shape shapes[] = {{1, 1, MaskKind::causal},
                            {kQueryTile + 1, kQueryTile + 1, MaskKind::causal},
                            {2 * kQueryTile + 3, 2 * kQueryTile + 3, MaskKind::none},
                            {kQueryTile - 1, kQueryTile + kKeyTile + 2, MaskKind::causal},
                            {5, 3 * kQueryTile, MaskKind::causal}};
    for (const Shape& shape : shapes) {
        KernelCase c;
        c.seq_len_q = shape.n;
        c.seq_len_kv = shape.s;
        c.head_dim = 8;
        c.value_dim = 12;
        c.mask = shape.mask;
        INFO(c.describe());
        const auto in = random_diff_inputs<T>(rng, c);
        const AttentionOptions o = c.options();
        const Index n = c.seq_len_q, cached = c.seq_len_kv - c.seq_len_q, dv = c.value_dim;

        // O1 of every token (cached ones included: the whole sequence as one call, row m sees
        // keys <= m under the causal mask) and O2 of this call's queries.
        RowMatrix<T> o1_all(c.seq_len_kv, dv), o2(n, dv);
        diffattn::softmax_attention(in.q1_all, in.k1, in.v, o1_all, o);
        diffattn::softmax_attention(in.q2, in.k2, in.v, o2, o);
        const RowMatrix<L> diff =
            o1_all.bottomRows(n).template cast<L>() - static_cast<L>(in.lambda) * o2.template cast<L>();

        // The kernel sums up to S rows of O1 in T (<= S eps relative) and adds three terms.
        const auto tolerance = [&](Index rows_summed) {
            return (rows_summed + 8) * eps<T>() * (1 + max_abs(o1_all) + max_abs(o2));
        };
        {  // causal_mean
            DintHistory<T> history;
            history.rows = cached;
            history.o1_row_sum = o1_all.topRows(cached).colwise().sum().transpose();
            RowMatrix<T> out(n, dv);
            diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, DintIntegral::causal_mean, out, o,
                                     &history);
            RowMatrix<L> expected(n, dv);
            RowMatrix<L> running = o1_all.topRows(cached).template cast<L>().colwise().sum();
            for (Index r = 0; r < n; ++r) {
                running += o1_all.row(cached + r).template cast<L>();
                expected.row(r) = diff.row(r) + static_cast<L>(in.lambda) * running / static_cast<L>(cached + r + 1);
            }
            CHECK(max_abs_diff(out, expected) <= tolerance(c.seq_len_kv));
        }
        if (cached == 0 && c.mask == MaskKind::none) {
            {  // global_mean
                RowMatrix<T> out(n, dv);
                diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, DintIntegral::global_mean, out,
                                         o);
                const RowMatrix<L> mean = o1_all.template cast<L>().colwise().mean();
                RowMatrix<L> expected(n, dv);
                for (Index r = 0; r < n; ++r) {
                    expected.row(r) = diff.row(r) + static_cast<L>(in.lambda) * mean;
                }
                CHECK(max_abs_diff(out, expected) <= tolerance(n));
            }
        }
    }
}

TEMPLATE_TEST_CASE("fully masked query rows give exact zeros in every kernel", "[kernels][properties]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    // A row is allowed no key iff valid_len = 0 (key 0 is always causally visible).
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        for (Index n : {Index{1}, kQueryTile + 1}) {
            KernelCase c;
            c.seq_len_q = n;
            c.seq_len_kv = n;
            c.head_dim = 4;
            c.value_dim = 6;
            c.mask = mask;
            c.valid_len = 0;
            INFO(c.describe());
            const auto in = random_diff_inputs<T>(rng, c);
            const AllOutputs<T> out = run_all(in, c.options());
            CHECK(out.softmax.isZero(0));
            CHECK(out.diff.isZero(0));
            for (const auto& [integral, dint] : out.dint) {
                INFO(integral_name(integral));
                CHECK(dint.isZero(0));
            }
        }
    }
}

TEMPLATE_TEST_CASE("fully masked query rows give exact zeros in DINT's causal modes with a KV cache history",
                   "[kernels][properties]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    // SPEC 1: a query row allowed no key yields an all-zero output row. Here the earlier rows of
    // the history saw keys (they were not padded), while this call's rows see none (valid_len = 0).
    KernelCase c;
    c.seq_len_q = 3;
    c.seq_len_kv = 10;
    c.head_dim = 4;
    c.value_dim = 6;
    c.mask = MaskKind::causal;
    const auto in = random_diff_inputs<T>(rng, c);
    const DintHistory<T> history = reference_history(in, c.options());  // earlier rows: no padding
    AttentionOptions padded = c.options();
    padded.valid_len = 0;
    for (DintIntegral integral : kCausalDintIntegrals) {
        INFO(integral_name(integral));
        DintHistory<T> fast_history = history;
        RowMatrix<T> out(c.seq_len_q, c.value_dim);
        diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, out, padded, &fast_history);
        CHECK(out.isZero(0));
        CHECK(reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, padded, &history)
                  .isZero(0));
    }
}

TEMPLATE_TEST_CASE("empty calls (N = S = 0) do nothing and do not crash", "[kernels][properties]", float, double) {
    using T = TestType;
    const RowMatrix<T> q(0, 4), k(0, 4), v(0, 3);
    RowMatrix<T> out(0, 3);
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        AttentionOptions o;
        o.mask = mask;
        CHECK_NOTHROW(diffattn::softmax_attention(q, k, v, out, o));
        CHECK_NOTHROW(diffattn::diff_attention(q, k, q, k, v, T(0.5), out, o));
        for (DintIntegral integral : kDintIntegrals) {
            if (integral == DintIntegral::global_mean && mask != MaskKind::none) continue;
            INFO(integral_name(integral));
            CHECK_NOTHROW(diffattn::dint_attention(q, k, q, k, v, T(0.5), integral, out, o));
        }
        CHECK(reference::softmax_attention(q, k, v, o).size() == 0);
    }
}

TEMPLATE_TEST_CASE("logits of +-1e4 stay finite in every kernel (softmax subtracts the row max)",
                   "[kernels][properties]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        KernelCase c;
        c.seq_len_q = kQueryTile + 5;
        c.seq_len_kv = kQueryTile + 5;
        c.head_dim = 16;
        c.value_dim = 8;
        c.mask = mask;
        c.scale = 5000.0;  // |q . k| reaches a few units: logits of order +-1e4
        INFO(c.describe());
        const auto in = random_diff_inputs<T>(rng, c);
        const AttentionOptions o = c.options();
        const RowMatrix<T> logits = T(5000) * (in.q1 * in.k1.transpose());
        CHECK(max_abs(logits) > 1e4L);

        const AllOutputs<T> out = run_all(in, o);
        CHECK(out.softmax.allFinite());
        CHECK(out.diff.allFinite());
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(dint.allFinite());
        }
        // Softmax attention is a convex combination of the value rows each query sees.
        for (Index r = 0; r < c.seq_len_q; ++r) {
            const Index seen = mask == MaskKind::causal ? r + 1 : c.seq_len_kv;
            for (Index j = 0; j < c.value_dim; ++j) {
                const long double lo = in.v.col(j).head(seen).minCoeff(), hi = in.v.col(j).head(seen).maxCoeff();
                const long double slack = 4 * eps<T>();
                CHECK(static_cast<long double>(out.softmax(r, j)) >= lo - slack);
                CHECK(static_cast<long double>(out.softmax(r, j)) <= hi + slack);
            }
        }
    }
}

TEMPLATE_TEST_CASE("hidden keys add exactly nothing: huge finite future values leave earlier rows unchanged",
                   "[kernels][properties]", float, double) {
    // Masked probabilities must be exact zeros (not exp(-inf) ~ 1e-38, which times a value of 1e37
    // would leak into the row), so rows that cannot see the changed value rows stay bit-identical.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    KernelCase c;
    c.seq_len_q = kGroupRows + kQueryTile + 5;  // several query groups and blocks
    c.seq_len_kv = c.seq_len_q;
    c.head_dim = 8;
    c.value_dim = 24;
    c.mask = MaskKind::causal;
    const Index first_changed = kGroupRows + 3;  // mid block, mid key tile
    const DiffInputs<T> clean = random_diff_inputs<T>(rng, c);
    DiffInputs<T> huge = clean;
    huge.v.bottomRows(c.seq_len_kv - first_changed).setConstant(std::numeric_limits<T>::max() / 8);
    const AttentionOptions o = c.options();
    const AllOutputs<T> before = run_all(clean, o), after = run_all(huge, o);
    const auto earlier_rows_equal = [&](const RowMatrix<T>& a, const RowMatrix<T>& b) {
        return (a.topRows(first_changed).array() == b.topRows(first_changed).array()).all();
    };
    CHECK(earlier_rows_equal(before.softmax, after.softmax));
    CHECK(earlier_rows_equal(before.diff, after.diff));
    for (std::size_t i = 0; i < before.dint.size(); ++i) {
        INFO(integral_name(before.dint[i].first));
        CHECK(earlier_rows_equal(before.dint[i].second, after.dint[i].second));
    }
}

TEMPLATE_TEST_CASE("head dim 0 with an explicit scale: every logit is 0, so each row averages the values it sees",
                   "[kernels][properties]", float, double) {
    // An empty QK^T product must add nothing (Eigen's gebp kernel would divide by the depth 0:
    // SIGFPE, found by fuzz_kernels). With every logit 0, A1 = A2 = the uniform causal map, so
    // softmax gives the running mean of V and DIFF (1 - lambda) times it (SPEC 1, 2.1).
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    KernelCase c;
    c.seq_len_q = kGroupRows + kQueryTile + 5;  // several query groups and blocks, two key tiles
    c.seq_len_kv = c.seq_len_q;
    c.head_dim = 0;
    c.value_dim = 6;
    c.mask = MaskKind::causal;
    c.scale = 0.5;
    const DiffInputs<T> in = random_diff_inputs<T>(rng, c);
    const AllOutputs<T> out = run_all(in, c.options());
    const Index n = c.seq_len_q, dv = c.value_dim;
    RowMatrix<long double> running_mean(n, dv);
    Vector<long double> sum = Vector<long double>::Zero(dv);
    for (Index i = 0; i < n; ++i) {
        sum += in.v.row(i).transpose().template cast<long double>();
        running_mean.row(i) = (sum / static_cast<long double>(i + 1)).transpose();
    }
    const long double tolerance = 64 * eps<T>();  // |V| <= 1: a mean of up to 300 rows
    const long double lambda = static_cast<long double>(in.lambda);
    CHECK((out.softmax.template cast<long double>() - running_mean).cwiseAbs().maxCoeff() <= tolerance);
    CHECK((out.diff.template cast<long double>() - (1 - lambda) * running_mean).cwiseAbs().maxCoeff() <= tolerance);
    for (const auto& [integral, dint_out] : out.dint) {
        INFO(integral_name(integral));
        const RowMatrix<T> expected =
            reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, c.options());
        CHECK((dint_out - expected).cwiseAbs().maxCoeff() <= static_cast<T>(tolerance));
    }
}

TEMPLATE_TEST_CASE("a NaN input reaches only the outputs that depend on it, and never crashes", "[kernels][properties]",
                   float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    KernelCase c;
    c.seq_len_q = 2 * kQueryTile + 5;
    c.seq_len_kv = c.seq_len_q;
    c.head_dim = 8;
    c.value_dim = 8;
    c.mask = MaskKind::causal;
    const Index bad = kQueryTile + 10;  // inside a query block and a key tile that straddle the diagonal
    const DiffInputs<T> clean = random_diff_inputs<T>(rng, c);
    const AttentionOptions o = c.options();

    // Causal mask, S = N: query n sees key j iff j <= n.
    SECTION("NaN in V row j: queries n < j stay finite in every kernel") {
        DiffInputs<T> in = clean;
        in.v(bad, 3) = nan;
        const AllOutputs<T> out = run_all(in, o);
        CHECK(rows_finite(out.softmax, 0, bad));
        CHECK(rows_finite(out.diff, 0, bad));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, bad));
        }
    }
    SECTION("NaN in K1 row j: queries n < j stay finite in every kernel") {
        DiffInputs<T> in = clean;
        in.k1(bad, 0) = nan;
        const AllOutputs<T> out = run_all(in, o);
        CHECK(rows_finite(out.softmax, 0, bad));
        CHECK(rows_finite(out.diff, 0, bad));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, bad));
        }
    }
    SECTION("NaN in K2 row j: queries n < j stay finite in diff and dint") {
        DiffInputs<T> in = clean;
        in.k2(bad, 0) = nan;
        const AllOutputs<T> out = run_all(in, o);
        CHECK(out.softmax.allFinite());
        CHECK(rows_finite(out.diff, 0, bad));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, bad));
        }
    }
    SECTION("NaN in Q1 row n: softmax and diff keep every other row finite; DINT's causal integral keeps rows < n") {
        DiffInputs<T> in = clean;
        in.q1(bad, 1) = nan;
        const AllOutputs<T> out = run_all(in, o);
        CHECK(rows_finite(out.softmax, 0, bad));
        CHECK(rows_finite(out.softmax, bad + 1, c.seq_len_q));
        CHECK(rows_finite(out.diff, 0, bad));
        CHECK(rows_finite(out.diff, bad + 1, c.seq_len_q));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, bad));  // later rows average A1 row n in G
        }
    }
    SECTION("NaN in Q2 row n: only row n is affected in diff and dint") {
        DiffInputs<T> in = clean;
        in.q2(bad, 1) = nan;
        const AllOutputs<T> out = run_all(in, o);
        CHECK(out.softmax.allFinite());
        CHECK(rows_finite(out.diff, 0, bad));
        CHECK(rows_finite(out.diff, bad + 1, c.seq_len_q));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, bad));
            CHECK(rows_finite(dint, bad + 1, c.seq_len_q));
        }
    }
    SECTION("NaN in padded keys and values (j >= valid_len): every output stays finite, mask none") {
        DiffInputs<T> in = clean;
        AttentionOptions padded = o;
        padded.mask = MaskKind::none;
        padded.valid_len = bad;
        in.v(bad, 0) = nan;
        in.v(c.seq_len_kv - 1, 2) = nan;
        in.k1(bad + 1, 0) = nan;
        in.k2(bad, 3) = nan;
        const AllOutputs<T> out = run_all(in, padded);
        CHECK(out.softmax.allFinite());
        CHECK(out.diff.allFinite());
        CHECK(out.dint.size() == 3);
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(dint.allFinite());
        }
    }
    SECTION("KV cache (S > N): NaN in a value row that only later queries see") {
        KernelCase cached = c;
        cached.seq_len_q = kQueryTile + 3;
        cached.seq_len_kv = cached.seq_len_q + kKeyTile / 2;
        DiffInputs<T> in = random_diff_inputs<T>(rng, cached);
        const Index offset = cached.seq_len_kv - cached.seq_len_q;
        const Index j = offset + 20;  // seen by queries n >= 20
        in.v(j, 1) = nan;
        const AllOutputs<T> out = run_all(in, cached.options());
        CHECK(rows_finite(out.softmax, 0, 20));
        CHECK(rows_finite(out.diff, 0, 20));
        for (const auto& [integral, dint] : out.dint) {
            INFO(integral_name(integral));
            CHECK(rows_finite(dint, 0, 20));
        }
    }
}

TEMPLATE_TEST_CASE("incremental decoding: chunks with a KV cache and a DINT history equal one call (SPEC 6)",
                   "[kernels][properties]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    const Index total = 2 * kQueryTile + 22, d = 8, dv = 16;
    KernelCase c;
    c.seq_len_q = total;
    c.seq_len_kv = total;
    c.head_dim = d;
    c.value_dim = dv;
    const DiffInputs<T> in = random_diff_inputs<T>(rng, c);
    const DiffInputs<W> wide = in.template cast<W>();
    const AttentionOptions o;  // causal

    // Chunkings of the sequence: one call, two chunks, a chunk ending just past a tile, then tokens
    // one by one, and the whole sequence token by token.
    const std::vector<std::vector<Index>> chunkings{{total},
                                                    {kQueryTile + 6, total - kQueryTile - 6},
                                                    {kQueryTile + 1, 1, 1, 5, total - kQueryTile - 8},
                                                    std::vector<Index>(static_cast<std::size_t>(total), 1)};

    // References over the whole sequence (the chunks must reproduce their rows).
    const RowMatrix<T> plain_softmax = reference::softmax_attention(in.q1_all, in.k1, in.v, o);
    const RowMatrix<W> wide_softmax = reference::softmax_attention(wide.q1_all, wide.k1, wide.v, o);
    const RowMatrix<T> plain_diff = reference::diff_attention(in.q1_all, in.k1, in.q2_all, in.k2, in.v, in.lambda, o);
    const RowMatrix<W> wide_diff =
        reference::diff_attention(wide.q1_all, wide.k1, wide.q2_all, wide.k2, wide.v, wide.lambda, o);

    for (const auto& chunks : chunkings) {
        INFO("chunks: " << chunks.size() << ", first " << chunks.front());
        RowMatrix<T> softmax(total, dv), diff(total, dv);
        std::vector<RowMatrix<T>> dint(2, RowMatrix<T>(total, dv));
        std::vector<DintHistory<T>> histories(2);
        AttentionWorkspace<T> workspace;
        Index begin = 0;
        for (Index size : chunks) {
            const Index end = begin + size;  // this chunk: queries [begin, end), keys [0, end)
            const auto q1 = in.q1_all.middleRows(begin, size), q2 = in.q2_all.middleRows(begin, size);
            const auto k1 = in.k1.topRows(end), k2 = in.k2.topRows(end), v = in.v.topRows(end);
            diffattn::softmax_attention(q1, k1, v, softmax.middleRows(begin, size), o, &workspace);
            diffattn::diff_attention(q1, k1, q2, k2, v, in.lambda, diff.middleRows(begin, size), o, &workspace);
            for (std::size_t i = 0; i < 2; ++i) {
                diffattn::dint_attention(q1, k1, q2, k2, v, in.lambda, kCausalDintIntegrals[i],
                                         dint[i].middleRows(begin, size), o, &histories[i], &workspace);
                CHECK(histories[i].rows == end);
            }
            begin = end;
        }
        check_spec7<T>("softmax in chunks", softmax, plain_softmax, wide_softmax);
        check_spec7<T>("diff in chunks", diff, plain_diff, wide_diff);
        for (std::size_t i = 0; i < 2; ++i) {
            const DintIntegral integral = kCausalDintIntegrals[i];
            const RowMatrix<T> plain =
                reference::dint_attention(in.q1_all, in.k1, in.q2_all, in.k2, in.v, in.lambda, integral, o);
            const RowMatrix<W> oracle =
                reference::dint_attention(wide.q1_all, wide.k1, wide.q2_all, wide.k2, wide.v, wide.lambda, integral, o);
            check_spec7<T>(std::string("dint ") + integral_name(integral) + " in chunks", dint[i], plain, oracle);
        }
    }
}
