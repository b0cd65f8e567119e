// Fast gda_attention (docs/math.md §9) against the plain reference (kernels/reference_gda.hpp)
// under docs/math.md §7, on the shapes of the other kernels' sweeps with random group ratios: the
// prefill path (a map per signal head beside the group's noise map), decode calls of one row (the
// signal heads stacked as the rows of one map, keys split over 1 to 3 threads) and of a few rows,
// keys and values stored in half precision and in a KV cache's blocks of 16.
#include "blocked_keys.hpp"
#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/reference_gda.hpp"

#include <Eigen/Core>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// Random inputs of one GDA call: gr signal heads side by side, the noise head, and DIFF's K1, K2, V.
template <typename T>
struct GdaInputs {
    RowMatrix<T> q1;  // [N x gr d]
    RowMatrix<T> k1;  // [S x d]
    RowMatrix<T> q2;  // [N x d]
    RowMatrix<T> k2;  // [S x d]
    RowMatrix<T> v;   // [S x dv]
    T lambda = T(0);
};

template <typename T>
GdaInputs<T> random_gda_inputs(std::mt19937& rng, const KernelCase& c, Index gr) {
    const DiffInputs<T> diff = random_diff_inputs<T>(rng, c);  // keys ramped as the case asks
    GdaInputs<T> in{RowMatrix<T>(c.seq_len_q, gr * c.head_dim), diff.k1, diff.q2, diff.k2, diff.v, diff.lambda};
    in.q1.leftCols(c.head_dim) = diff.q1;
    in.q1.rightCols((gr - 1) * c.head_dim) = random_matrix<T>(rng, c.seq_len_q, (gr - 1) * c.head_dim);
    return in;
}

template <typename W, typename T>
GdaInputs<W> widen(const GdaInputs<T>& in) {
    return {in.q1.template cast<W>(), in.k1.template cast<W>(), in.q2.template cast<W>(), in.k2.template cast<W>(),
            in.v.template cast<W>(), static_cast<W>(in.lambda)};
}

/// Checks one call against the plain reference in T and the oracle one precision up. Each output
/// combines two maps, as DIFF's does.
template <typename T>
void check_gda_case(std::mt19937& rng, const KernelCase& c, Index gr, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    const GdaInputs<T> in = random_gda_inputs<T>(rng, c, gr);
    const GdaInputs<W> wide = widen<W>(in);
    const AttentionOptions o = c.options();
    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, gr * c.value_dim, T(12345));
    diffattn::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, out, o, workspace);
    const RowMatrix<T> plain = reference::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o);
    const RowMatrix<W> oracle = reference::gda_attention(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, o);
    check_spec7<T>("gda_attention gr=" + std::to_string(gr) + " " + c.describe(), out, plain, oracle,
                   case_error_bound<T>(c, 2));
}

/// Group ratios drawn for a case: 1 (DIFF's shape), small ones, and past the stacked decode path's limit.
Index random_group_ratio(std::mt19937& rng, Index i) {
    return i % 7 == 6 ? kMinPackedRows + 1 : uniform_index(rng, 1, 5);
}

/// K1, K2 and V stored as S (the keys in blocks of 16 when `blocked`): the reference runs on the
/// rounded values, so docs/math.md §7 applies unchanged (test_half_kv.cpp).
template <typename T, typename S>
void check_gda_stored_case(std::mt19937& rng, const KernelCase& c, Index gr, bool blocked,
                           AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    GdaInputs<T> in = random_gda_inputs<T>(rng, c, gr);
    const RowMatrix<S> k1_rows = in.k1.template cast<S>(), k2_rows = in.k2.template cast<S>();
    const RowMatrix<S> v = in.v.template cast<S>();
    in.k1 = k1_rows.template cast<T>();
    in.k2 = k2_rows.template cast<T>();
    in.v = v.template cast<T>();
    const BlockedKeys<S> k1_blocks(k1_rows), k2_blocks(k2_rows);
    const detail::KeyRows<S> k1 = blocked ? k1_blocks.keys : detail::KeyRows<S>(k1_rows);
    const detail::KeyRows<S> k2 = blocked ? k2_blocks.keys : detail::KeyRows<S>(k2_rows);
    const GdaInputs<W> wide = widen<W>(in);
    const AttentionOptions o = c.options();
    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, gr * c.value_dim, T(12345));
    detail::gda_attention<T, S>(in.q1, k1, in.q2, k2, v, in.lambda, out, o, workspace);
    check_spec7<T>(std::string("gda stored ") + (sizeof(S) == 2 ? "half " : "") + (blocked ? "blocked " : "") +
                       "gr=" + std::to_string(gr) + " " + c.describe(),
                   out, reference::gda_attention<T>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o),
                   reference::gda_attention<W>(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, o),
                   case_error_bound<T>(c, 2));
}

}  // namespace

TEMPLATE_TEST_CASE("gda_attention matches the reference (docs/math.md §7) on tile-edge and random shapes",
                   "[kernels][gda_attention]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    // The DIFF sweep's shapes at a third of its budget: a call runs gr + 1 maps.
    const std::vector<KernelCase> cases = kernel_cases(rng, kQueryTile, kKeyTile, 6, 14000);
    AttentionWorkspace<T> workspace;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        check_gda_case<T>(rng, cases[i], random_group_ratio(rng, static_cast<Index>(i)),
                          i % 2 == 0 ? nullptr : &workspace);
    }
}

TEMPLATE_TEST_CASE("gda_attention over several query groups: docs/math.md §7, and identical for 1, 2 and 3 threads",
                   "[kernels][gda_attention][threads]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        KernelCase c = multi_group_case(kGroupRows + kQueryTile + 3, kGroupRows + kQueryTile + 3 + kKeyTile, mask);
        const Index gr = 3;
        INFO(c.describe());
        check_gda_case<T>(rng, c, gr, nullptr);
        const GdaInputs<T> in = random_gda_inputs<T>(rng, c, gr);
        RowMatrix<T> one(c.seq_len_q, gr * c.value_dim), more(c.seq_len_q, gr * c.value_dim);
        diffattn::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, one, c.options());
        for (int threads : {2, 3}) {
            c.threads = threads;
            diffattn::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, more, c.options());
            CHECK((more.array() == one.array()).all());
        }
    }
}

TEMPLATE_TEST_CASE("gda_attention decode calls: N < kMinPackedRows, keys split over 1, 2 and 3 threads, "
                   "docs/math.md §7",
                   "[kernels][gda_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    Index i = 0;
    for_each_decode_case<T>(rng, 16, [&](KernelCase c, AttentionWorkspace<T>* workspace) {
        if (i % 2 == 0) c.seq_len_q = 1;  // half of them the one-row step that stacks its signal heads
        c.seq_len_kv = std::max(c.seq_len_kv, c.seq_len_q);
        check_gda_case<T>(rng, c, random_group_ratio(rng, i++), workspace);
    });
    for_each_key_ramp_case<T>(rng, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        check_gda_case<T>(rng, c, 4, workspace);
    });
}

TEMPLATE_TEST_CASE("gda_attention on keys and values stored in half precision and in blocks of 16",
                   "[kernels][gda_attention][half_kv]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    Index i = 0;
    for_each_decode_case<T>(rng, 6, [&](KernelCase c, AttentionWorkspace<T>* workspace) {
        c.seq_len_q = 1 + i % 3;
        c.seq_len_kv = std::max(c.seq_len_kv, c.seq_len_q);
        const Index gr = 1 + i++ % 4;
        check_gda_stored_case<T, Eigen::half>(rng, c, gr, false, workspace);
        check_gda_stored_case<T, Eigen::bfloat16>(rng, c, gr, true, workspace);
        check_gda_stored_case<T, T>(rng, c, gr, true, workspace);
    });
    KernelCase prefill = multi_group_case(kQueryTile + 9, kQueryTile + 9 + kKeyTile + 3, MaskKind::causal);
    check_gda_stored_case<T, Eigen::bfloat16>(rng, prefill, 2, true, nullptr);
}

TEMPLATE_TEST_CASE("gda_attention with one signal head per group is DIFF (docs/math.md §9)",
                   "[kernels][gda_attention]", float, double) {
    // gr = 1: out = (A1 - lambda A2) V, DIFF's formula on the same maps; within docs/math.md §7 of
    // the DIFF reference (the kernels order their sums differently).
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    for (Index n : {Index{1}, Index{5}, kQueryTile + 3}) {
        KernelCase c = multi_group_case(n, n + kKeyTile + 7, MaskKind::causal);
        const GdaInputs<T> in = random_gda_inputs<T>(rng, c, 1);
        const GdaInputs<W> wide = widen<W>(in);
        RowMatrix<T> out(c.seq_len_q, c.value_dim);
        diffattn::gda_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, out, c.options());
        check_spec7<T>("gda gr=1 against DIFF " + c.describe(), out,
                       reference::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, c.options()),
                       reference::diff_attention(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, c.options()),
                       case_error_bound<T>(c, 2));
    }
}
