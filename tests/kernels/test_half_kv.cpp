// Keys and values stored in half precision (a half-precision KV cache, docs/math.md §6): the kernels
// widen them to T one tile at a time. The exact reference is the plain reference run on the same
// keys and values rounded to the storage scalar and widened again (a half or bfloat16 value is
// exactly a float), so the ordinary docs/math.md §7 criterion applies unchanged: the rounding is
// part of the inputs, not an error of the kernel.
#include "test_support.hpp"

#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

#include <Eigen/Core>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// Checks softmax, diff and dint (both causal integrals) with K and V stored as S against the
/// reference on the rounded values.
template <typename T, typename S>
void check_stored_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    DiffInputs<T> in = random_diff_inputs<T>(rng, c);
    const RowMatrix<S> k1 = in.k1.template cast<S>(), k2 = in.k2.template cast<S>(), v = in.v.template cast<S>();
    in.k1 = k1.template cast<T>();  // the values the kernels see, exactly
    in.k2 = k2.template cast<T>();
    in.v = v.template cast<T>();
    const DiffInputs<W> wide = in.template cast<W>();
    const AttentionOptions o = c.options();
    const std::string what = std::string(std::is_same_v<S, Eigen::half> ? "f16 " : "bf16 ") + c.describe();

    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345));
    detail::softmax_attention<T, S>(in.q1, k1, v, out, o, workspace);
    check_spec7<T>("softmax " + what, out, reference::softmax_attention<T>(in.q1, in.k1, in.v, o),
                   reference::softmax_attention<W>(wide.q1, wide.k1, wide.v, o), case_error_bound<T>(c, 1));

    out.setConstant(T(12345));
    detail::diff_attention<T, S>(in.q1, k1, in.q2, k2, v, in.lambda, out, o, workspace);
    check_spec7<T>("diff " + what, out, reference::diff_attention<T>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, o),
                   reference::diff_attention<W>(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, o),
                   case_error_bound<T>(c, 2));

    if (c.mask != MaskKind::causal) return;
    for (DintIntegral integral : kCausalDintIntegrals) {
        // The history of the earlier rows over the rounded keys, as check_dint_case makes it.
        const Index cached = c.seq_len_kv - c.seq_len_q;
        const RowMatrix<W> wide_a1 = reference::attention_map<W>(wide.q1_all, wide.k1, o);
        DintHistory<T> plain_history = cast_history<T>(reference::dint_history<W>(wide_a1.topRows(cached), wide.v));
        DintHistory<W> wide_history = cast_history<W>(plain_history);
        DintHistory<T> fast_history = plain_history;
        out.setConstant(T(12345));
        detail::dint_attention<T, S>(in.q1, k1, in.q2, k2, v, in.lambda, integral, out, o, &fast_history, workspace);
        check_spec7<T>(std::string("dint ") + integral_name(integral) + " " + what, out,
                       reference::dint_attention<T>(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o,
                                                    &plain_history),
                       reference::dint_attention<W>(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, integral,
                                                    o, &wide_history),
                       case_error_bound<T>(c, 3));
        CHECK(fast_history.rows == c.seq_len_kv);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("kernels on half-precision keys and values: decode calls match the reference on the "
                   "rounded values",
                   "[kernels][half_kv]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<T>(rng, 12, [&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_stored_case<T, Eigen::half>(rng, c, ws);
        check_stored_case<T, Eigen::bfloat16>(rng, c, ws);
    });
}

TEMPLATE_TEST_CASE("kernels on half-precision keys and values: prefill calls (packed tiles) match the "
                   "reference on the rounded values",
                   "[kernels][half_kv]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    AttentionWorkspace<T> workspace;
    for (const KernelCase& base : {multi_group_case(kQueryTile + 9, kQueryTile + 9 + kKeyTile + 3, MaskKind::causal),
                                   multi_group_case(kMinPackedRows, 2 * kKeyTile + 1, MaskKind::causal),
                                   multi_group_case(kQueryTile, kKeyTile + 5, MaskKind::none)}) {
        for (int threads : {1, 2}) {
            KernelCase c = base;
            c.threads = threads;
            INFO(c.describe());
            check_stored_case<T, Eigen::half>(rng, c, threads == 2 ? &workspace : nullptr);
            check_stored_case<T, Eigen::bfloat16>(rng, c, threads == 2 ? &workspace : nullptr);
        }
    }
}
