// Keys and values stored in half precision (a half-precision KV cache, docs/math.md §6): the kernels
// widen them to T one tile at a time. The exact reference is the plain reference run on the same
// keys and values rounded to the storage scalar and widened again (a half or bfloat16 value is
// exactly a float), so the ordinary docs/math.md §7 criterion applies unchanged: the rounding is
// part of the inputs, not an error of the kernel. Keys may also lie in a KV cache's blocks of 16
// keys (kernels/key_rows.hpp), in T or in half precision: the same checks then read them there.
#include "blocked_keys.hpp"
#include "test_support.hpp"

#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/head_blocks.hpp"

#include <Eigen/Core>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// How the keys of a check lie: row by row, or in a KV cache's blocks of 16 keys.
enum class KeyLayout { rows, blocks };

template <typename S>
std::string scalar_name() {
    if constexpr (std::is_same_v<S, Eigen::half>) return "f16";
    if constexpr (std::is_same_v<S, Eigen::bfloat16>) return "bf16";
    return "T";
}

/// Checks softmax, diff and dint (both causal integrals) with K and V stored as S (K in `layout`)
/// against the reference on the rounded values.
template <typename T, typename S>
void check_stored_case(std::mt19937& rng, const KernelCase& c, AttentionWorkspace<T>* workspace,
                       KeyLayout layout = KeyLayout::rows) {
    using W = Wide<T>;
    DiffInputs<T> in = random_diff_inputs<T>(rng, c);
    const RowMatrix<S> k1_rows = in.k1.template cast<S>(), k2_rows = in.k2.template cast<S>();
    const RowMatrix<S> v = in.v.template cast<S>();
    in.k1 = k1_rows.template cast<T>();  // the values the kernels see, exactly
    in.k2 = k2_rows.template cast<T>();
    in.v = v.template cast<T>();
    const BlockedKeys<S> k1_blocks(k1_rows), k2_blocks(k2_rows);
    const bool blocked = layout == KeyLayout::blocks;
    const detail::KeyRows<S> k1 = blocked ? k1_blocks.keys : detail::KeyRows<S>(k1_rows);
    const detail::KeyRows<S> k2 = blocked ? k2_blocks.keys : detail::KeyRows<S>(k2_rows);
    const DiffInputs<W> wide = in.template cast<W>();
    const AttentionOptions o = c.options();
    const std::string what = scalar_name<S>() + (blocked ? " keys in blocks of 16, " : " ") + c.describe();

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

/// Calls check(c, workspace) on the prefill cases (query groups of packed tiles), 1 and 2 threads.
template <typename T, typename Check>
void for_each_prefill_case(Check&& check) {
    AttentionWorkspace<T> workspace;
    for (const KernelCase& base : {multi_group_case(kQueryTile + 9, kQueryTile + 9 + kKeyTile + 3, MaskKind::causal),
                                   multi_group_case(kMinPackedRows, 2 * kKeyTile + 1, MaskKind::causal),
                                   multi_group_case(kQueryTile, kKeyTile + 5, MaskKind::none)}) {
        for (int threads : {1, 2}) {
            KernelCase c = base;
            c.threads = threads;
            INFO(c.describe());
            check(c, threads == 2 ? &workspace : nullptr);
        }
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
    for_each_prefill_case<T>([&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_stored_case<T, Eigen::half>(rng, c, ws);
        check_stored_case<T, Eigen::bfloat16>(rng, c, ws);
    });
}

TEMPLATE_TEST_CASE("kernels on keys in a KV cache's blocks of 16: decode calls match the reference",
                   "[kernels][half_kv][key_blocks]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<T>(rng, 12, [&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_stored_case<T, T>(rng, c, ws, KeyLayout::blocks);
        check_stored_case<T, Eigen::half>(rng, c, ws, KeyLayout::blocks);
        check_stored_case<T, Eigen::bfloat16>(rng, c, ws, KeyLayout::blocks);
    });
}

TEMPLATE_TEST_CASE("kernels on keys in a KV cache's blocks of 16: prefill calls (packed tiles) match the "
                   "reference",
                   "[kernels][half_kv][key_blocks]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_prefill_case<T>([&](const KernelCase& c, AttentionWorkspace<T>* ws) {
        check_stored_case<T, T>(rng, c, ws, KeyLayout::blocks);
        check_stored_case<T, Eigen::half>(rng, c, ws, KeyLayout::blocks);
    });
}

TEST_CASE("KeyRows: blocked keys turn back into the rows they were written from", "[kernels][key_blocks]") {
    // 37 keys of 5 entries: two whole blocks and 5 keys of a third; the unused slots keep -77.
    RowMatrix<double> rows(37, 5);
    for (Index r = 0; r < rows.rows(); ++r) {
        for (Index i = 0; i < rows.cols(); ++i) rows(r, i) = static_cast<double>(10 * r + i);
    }
    const BlockedKeys<double> blocked(rows);
    CHECK(blocked.store.size() == 48 * 5);
    CHECK(blocked.keys.is_blocked());
    // Key 17 (block 1, lane 1), entry 3: at 1 * 16 * 5 + 3 * 16 + 1.
    CHECK(blocked.store(80 + 48 + 1) == rows(17, 3));
    CHECK(blocked.store(2 * 80 + 5) == -77.0);  // block 2, entry 0, lane 5: past the last key
    RowMatrix<double> buffer(kKeyTile, 5);
    for (Index begin : {Index{0}, Index{3}, Index{16}, Index{30}}) {
        const Index count = rows.rows() - begin;
        CHECK(detail::key_rows_as<double>(blocked.keys, begin, count, buffer) == rows.middleRows(begin, count));
    }
    CHECK(HeadBlocks<double>::blocked_keys(nullptr, 2, 5, 37).head_stride == 48 * 5);  // whole blocks per head
    // The memory a blocked operand covers, whole blocks: an output there overlaps it.
    RowMatrix<double> q = RowMatrix<double>::Zero(1, 5);
    Eigen::Map<RowMatrix<double>> out_in_last_block(const_cast<double*>(blocked.store.data()) + 47 * 5, 1, 5);
    const auto attend = [&] {
        detail::softmax_attention<double, double>(q, blocked.keys, rows, out_in_last_block, AttentionOptions{},
                                                  nullptr);
    };
    CHECK_THROWS_AS(attend(), ShapeError);
}
