// Fast diff_attention (docs/math.md §2.2) against the plain reference under docs/math.md §7.
#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/reference.hpp"

using namespace diffattn;
using namespace diffattn::test;

namespace {

template <typename T>
void check_diff_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    const auto in = random_diff_inputs<T>(rng, c);
    const auto wide = in.template cast<W>();
    const AttentionOptions o = c.options();

    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345));
    diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, out, o, workspace);
    const RowMatrix<T> plain = reference::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o);
    const RowMatrix<W> oracle = reference::diff_attention(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, o);
    check_spec7<T>("diff_attention lambda=" + std::to_string(static_cast<double>(in.lambda)) + " " + c.describe(), out,
                   plain, oracle, case_error_bound<T>(c, 2));
}

}  // namespace

TEMPLATE_TEST_CASE("diff_attention matches the reference (docs/math.md §7) on tile-edge and random shapes",
                   "[kernels][diff_attention]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const std::vector<KernelCase> cases = kernel_cases(rng, kQueryTile, kKeyTile, 8);
    // Alternate a temporary workspace and one workspace reused across calls of every size.
    AttentionWorkspace<T> workspace;
    for (std::size_t i = 0; i < cases.size(); ++i) check_diff_case<T>(rng, cases[i], i % 2 == 0 ? nullptr : &workspace);
}

TEMPLATE_TEST_CASE("diff_attention over several query groups: docs/math.md §7, and identical for 1, 2 and 3 threads",
                   "[kernels][diff_attention][threads]", float, double) {
    // As the softmax test of the same name: shapes spanning several query groups (kGroupRows).
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index shapes[][2] = {{2 * kGroupRows + kQueryTile + 3, 2 * kGroupRows + kQueryTile + 3},
                               {kGroupRows + 1, kGroupRows + 1 + kKeyTile + 9}};
    for (const auto& shape : shapes) {
        for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
            KernelCase c = multi_group_case(shape[0], shape[1], mask);
            INFO(c.describe());
            check_diff_case<T>(rng, c, nullptr);
            const auto in = random_diff_inputs<T>(rng, c);
            RowMatrix<T> one(c.seq_len_q, c.value_dim), more(c.seq_len_q, c.value_dim);
            diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, one, c.options());
            for (int threads : {2, 3}) {
                c.threads = threads;
                diffattn::diff_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, more, c.options());
                CHECK((more.array() == one.array()).all());
            }
        }
    }
}

TEMPLATE_TEST_CASE("diff_attention: heads are column blocks of wider matrices, output into a column block",
                   "[kernels][diff_attention]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    // The DIFF Transformer layout (docs/math.md §3.1): 2H query/key sub-heads of width d, H value heads of 2d.
    const Index n = 2 * kQueryTile + 1, s = n + kKeyTile - 1, d = 8, heads = 3;
    const RowMatrix<T> q_all = random_matrix<T>(rng, n, 2 * heads * d);
    const RowMatrix<T> k_all = random_matrix<T>(rng, s, 2 * heads * d);
    const RowMatrix<T> v_all = random_matrix<T>(rng, s, heads * 2 * d);
    const T sentinel = T(-777);
    RowMatrix<T> out_all = RowMatrix<T>::Constant(n, heads * 2 * d, sentinel);
    const T lambda = T(0.4);
    AttentionOptions o;
    const Index h = 1;  // the middle head: sub-heads 2 and 3

    const ConstMatrixRef<T> q1(q_all.middleCols(2 * h * d, d)), q2(q_all.middleCols((2 * h + 1) * d, d));
    const ConstMatrixRef<T> k1(k_all.middleCols(2 * h * d, d)), k2(k_all.middleCols((2 * h + 1) * d, d));
    const ConstMatrixRef<T> v(v_all.middleCols(h * 2 * d, 2 * d));
    CHECK(q2.data() == q_all.data() + (2 * h + 1) * d);
    CHECK(k2.data() == k_all.data() + (2 * h + 1) * d);
    CHECK(v.data() == v_all.data() + h * 2 * d);
    diffattn::diff_attention(q1, k1, q2, k2, v, lambda, out_all.middleCols(h * 2 * d, 2 * d), o);

    CHECK((out_all.leftCols(h * 2 * d).array() == sentinel).all());
    CHECK((out_all.rightCols((heads - h - 1) * 2 * d).array() == sentinel).all());
    const RowMatrix<T> q1_h = q1, k1_h = k1, q2_h = q2, k2_h = k2, v_h = v;
    const RowMatrix<T> plain = reference::diff_attention(q1_h, k1_h, q2_h, k2_h, v_h, lambda, o);
    const RowMatrix<W> oracle = reference::diff_attention(cast_to<W>(q1_h), cast_to<W>(k1_h), cast_to<W>(q2_h),
                                                          cast_to<W>(k2_h), cast_to<W>(v_h), W(lambda), o);
    const RowMatrix<T> got = out_all.middleCols(h * 2 * d, 2 * d);
    KernelCase c;
    c.seq_len_q = n;
    c.seq_len_kv = s;
    c.head_dim = d;
    check_spec7<T>("middle head", got, plain, oracle, case_error_bound<T>(c, 2));
}

TEMPLATE_TEST_CASE("diff_attention decode calls whose row max moves far between key tiles: docs/math.md §7",
                   "[kernels][diff_attention][threads][decode]", float, double) {
    // A call of few rows keeps each tile's probabilities against the row's max after that tile and
    // rescales them to the final max (kernels/kept_probabilities.hpp).
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_key_ramp_case<T>(rng, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        check_diff_case<T>(rng, c, workspace);
    });
}

TEMPLATE_TEST_CASE("diff_attention decode calls: N < kMinPackedRows, keys split over 1, 2 and 3 threads, "
                   "docs/math.md §7",
                   "[kernels][diff_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<T>(rng, 24, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        check_diff_case<T>(rng, c, workspace);
    });
}
