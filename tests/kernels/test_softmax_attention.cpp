// Fast softmax_attention (docs/math.md §2.1) against the plain reference under docs/math.md §7.
#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

#include <optional>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// Runs one case through the fast kernel and both references and checks docs/math.md §7.
template <typename T>
void check_softmax_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    const auto in = random_diff_inputs<T>(rng, c);
    const auto wide = in.template cast<W>();
    const AttentionOptions o = c.options();

    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345));  // every entry must be written
    diffattn::softmax_attention(in.q1, in.k1, in.v, out, o, workspace);
    const RowMatrix<T> plain = reference::softmax_attention(in.q1, in.k1, in.v, o);
    const RowMatrix<W> oracle = reference::softmax_attention(wide.q1, wide.k1, wide.v, o);
    check_spec7<T>("softmax_attention " + c.describe(), out, plain, oracle, case_error_bound<T>(c, 1));
}

}  // namespace

TEMPLATE_TEST_CASE("softmax_attention matches the reference (docs/math.md §7) on tile-edge and random shapes",
                   "[kernels][softmax_attention]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const std::vector<KernelCase> cases = kernel_cases(rng, kQueryTile, kKeyTile, 8);
    // Alternate a temporary workspace and one workspace reused across calls of every size.
    AttentionWorkspace<T> workspace;
    for (std::size_t i = 0; i < cases.size(); ++i)
        check_softmax_case<T>(rng, cases[i], i % 2 == 0 ? nullptr : &workspace);
}

TEMPLATE_TEST_CASE("softmax_attention over several query groups: docs/math.md §7, and identical for 1, 2 and 3 threads",
                   "[kernels][softmax_attention][threads]", float, double) {
    // The shapes above fit in one query group (kGroupRows rows); these span several, with a
    // partial last group and block, a KV cache (S > N) and key padding, so a group's earlier
    // blocks see fewer keys than its later ones.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    struct Shape {
        Index n, s;
        std::optional<Index> valid_len;
    };
    const Shape shapes[] = {{2 * kGroupRows + kQueryTile + 3, 2 * kGroupRows + kQueryTile + 3, std::nullopt},
                            {kGroupRows + 1, kGroupRows + 1 + kKeyTile + 9, std::nullopt},
                            {kGroupRows + kQueryTile - 5, kGroupRows + 2 * kKeyTile, kGroupRows + kKeyTile + 17}};
    for (const Shape& shape : shapes) {
        for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
            KernelCase c;
            c.seq_len_q = shape.n;
            c.seq_len_kv = shape.s;
            c.head_dim = 24;
            c.value_dim = 40;
            c.mask = mask;
            c.valid_len = shape.valid_len;
            INFO(c.describe());
            check_softmax_case<T>(rng, c, nullptr);
            const auto in = random_diff_inputs<T>(rng, c);
            RowMatrix<T> one(c.seq_len_q, c.value_dim), more(c.seq_len_q, c.value_dim);
            diffattn::softmax_attention(in.q1, in.k1, in.v, one, c.options());
            for (int threads : {2, 3}) {
                c.threads = threads;
                diffattn::softmax_attention(in.q1, in.k1, in.v, more, c.options());
                CHECK((more.array() == one.array()).all());
            }
        }
    }
}

TEMPLATE_TEST_CASE("softmax_attention: heads are column blocks of wider matrices, output into a column block",
                   "[kernels][softmax_attention]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    const Index n = kQueryTile + 3, s = 2 * kKeyTile + 5, d = 16, dv = 24, heads = 3;
    const RowMatrix<T> q_all = random_matrix<T>(rng, n, heads * d);   // [N x 3d]
    const RowMatrix<T> k_all = random_matrix<T>(rng, s, heads * d);   // [S x 3d]
    const RowMatrix<T> v_all = random_matrix<T>(rng, s, heads * dv);  // [S x 3dv]
    const T sentinel = T(-777);
    RowMatrix<T> out_all = RowMatrix<T>::Constant(n, heads * dv, sentinel);
    AttentionOptions o;  // causal, S > N
    const Index h = 1;   // the middle head

    const ConstMatrixRef<T> q(q_all.middleCols(h * d, d));
    const ConstMatrixRef<T> k(k_all.middleCols(h * d, d));
    const ConstMatrixRef<T> v(v_all.middleCols(h * dv, dv));
    // Bound without a copy.
    CHECK(q.data() == q_all.data() + h * d);
    CHECK(k.data() == k_all.data() + h * d);
    CHECK(v.data() == v_all.data() + h * dv);
    diffattn::softmax_attention(q, k, v, out_all.middleCols(h * dv, dv), o);

    CHECK((out_all.leftCols(h * dv).array() == sentinel).all());
    CHECK((out_all.rightCols((heads - h - 1) * dv).array() == sentinel).all());
    const RowMatrix<T> q_h = q, k_h = k, v_h = v;
    const RowMatrix<T> plain = reference::softmax_attention(q_h, k_h, v_h, o);
    const RowMatrix<W> oracle = reference::softmax_attention(cast_to<W>(q_h), cast_to<W>(k_h), cast_to<W>(v_h), o);
    const RowMatrix<T> got = out_all.middleCols(h * dv, dv);
    check_spec7<T>("middle head", got, plain, oracle, forward_error_bound<T>(d, s, 0.25 * d, 1));
}

TEMPLATE_TEST_CASE("softmax_attention decode calls: N < kMinPackedRows, keys split over 1, 2 and 3 threads, "
                   "docs/math.md §7",
                   "[kernels][softmax_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<T>(rng, 24, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        check_softmax_case<T>(rng, c, workspace);
    });
}

namespace {

/// softmax_attention_pair (DIFF V2's two query heads over one kv head) on one case: each output equal,
/// bit for bit, to softmax_attention on its own map, and within docs/math.md §7 of the reference.
template <typename T>
void check_pair_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    const auto in = random_diff_inputs<T>(rng, c);
    const AttentionOptions o = c.options();
    RowMatrix<T> out1 = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345));
    RowMatrix<T> out2 = out1, alone1 = out1, alone2 = out1;
    detail::softmax_attention_pair<T, T>(in.q1, in.k1, in.q2, in.k2, in.v, out1, out2, o, workspace);
    diffattn::softmax_attention(in.q1, in.k1, in.v, alone1, o, workspace);
    diffattn::softmax_attention(in.q2, in.k2, in.v, alone2, o, workspace);
    CHECK(out1 == alone1);
    CHECK(out2 == alone2);
    const auto wide = in.template cast<W>();
    check_spec7<T>("softmax_attention_pair map 2 " + c.describe(), out2, reference::softmax_attention(in.q2, in.k2, in.v, o),
                   reference::softmax_attention(wide.q2, wide.k2, wide.v, o), case_error_bound<T>(c, 1));
}

}  // namespace

TEMPLATE_TEST_CASE("softmax_attention_pair equals two softmax_attention calls bit for bit, prefill and decode on "
                   "1, 2 and 3 threads",
                   "[kernels][softmax_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    AttentionWorkspace<T> workspace;
    for (const KernelCase& c : kernel_cases(rng, kQueryTile, kKeyTile, 4)) check_pair_case<T>(rng, c, &workspace);
    for_each_decode_case<T>(rng, 8, [&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_pair_case<T>(rng, c, ws);
    });
}

namespace {

/// gated_softmax_difference (DIFF V2's head over one kv head) on one case: out = O1 - diag(gate) O2,
/// gates in (0, 1) drawn per row, within docs/math.md §7 of the reference's two maps; a call of few
/// rows takes the combined-weights path (kernels/diff_few_rows.hpp), larger ones the pair.
template <typename T>
void check_gated_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    const auto in = random_diff_inputs<T>(rng, c);
    const AttentionOptions o = c.options();
    std::uniform_real_distribution<double> unit(0.05, 0.95);
    RowMatrix<T> gates(c.seq_len_q, 2);  // the gate of row r at (r, 1): a strided column, as a head's
    gates.col(0).setConstant(T(-7));  // not a gate: the kernel must read the strided column only
    for (Index r = 0; r < c.seq_len_q; ++r) gates(r, 1) = static_cast<T>(unit(rng));
    const Eigen::Map<const Vector<T>, 0, Eigen::InnerStride<>> gate(gates.data() + 1, c.seq_len_q,
                                                                    Eigen::InnerStride<>(2));
    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345)), second = out;
    detail::gated_softmax_difference<T, T>(in.q1, in.k1, in.q2, in.k2, in.v, gate, out, second, o, workspace);
    const Vector<T> g = gate;
    const RowMatrix<T> plain = reference::softmax_attention(in.q1, in.k1, in.v, o) -
                               g.asDiagonal() * reference::softmax_attention(in.q2, in.k2, in.v, o);
    const auto wide = in.template cast<W>();
    const Vector<W> g_wide = g.template cast<W>();
    const RowMatrix<W> oracle = reference::softmax_attention(wide.q1, wide.k1, wide.v, o) -
                                g_wide.asDiagonal() * reference::softmax_attention(wide.q2, wide.k2, wide.v, o);
    check_spec7<T>("gated_softmax_difference " + c.describe(), out, plain, oracle, case_error_bound<T>(c, 2));
}

}  // namespace

TEMPLATE_TEST_CASE("gated_softmax_difference: DIFF V2's O1 - gate O2 within docs/math.md §7, prefill and decode on "
                   "1, 2 and 3 threads",
                   "[kernels][softmax_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    AttentionWorkspace<T> workspace;
    for (const KernelCase& c : kernel_cases(rng, kQueryTile, kKeyTile, 4)) check_gated_case<T>(rng, c, &workspace);
    for_each_decode_case<T>(rng, 12, [&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_gated_case<T>(rng, c, ws);
    });
    RowMatrix<T> q = RowMatrix<T>::Ones(3, 4), k = RowMatrix<T>::Ones(5, 4), out(3, 4), second(3, 4);
    Vector<T> two(2);
    const Eigen::Map<const Vector<T>, 0, Eigen::InnerStride<>> short_gate(two.data(), 2, Eigen::InnerStride<>(1));
    const auto call = [&] { detail::gated_softmax_difference<T, T>(q, k, q, k, k, short_gate, out, second, {}, &workspace); };
    CHECK_THROWS_AS(call(), ShapeError);
}
