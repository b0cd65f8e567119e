// Fast dint_attention (docs/math.md §2.3) against the plain reference under docs/math.md §7, for every integral
// mode; with a KV cache (S > N) the causal modes get the DintHistory of the S - N earlier rows
// computed by the reference, and the history the kernel leaves behind is checked too.
#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/reference.hpp"
#include "dint_task_ledger.hpp"

#include <optional>
#include <random>
#include <vector>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// Runs one case of one integral mode. Returns false (nothing checked) when the mode does not
/// apply (global_mean needs mask none).
template <typename T>
bool check_dint_case(std::mt19937& rng, const KernelCase& c, DintIntegral integral, AttentionWorkspace<T>* workspace) {
    using W = Wide<T>;
    if (integral == DintIntegral::global_mean && c.mask != MaskKind::none) return false;
    const auto in = random_diff_inputs<T>(rng, c);
    const auto wide = in.template cast<W>();
    const AttentionOptions o = c.options();
    const std::string what = std::string("dint_attention ") + integral_name(integral) +
                             " lambda=" + std::to_string(static_cast<double>(in.lambda)) + " " + c.describe();
    INFO(what);

    // History of the earlier rows: required with a KV cache; with S = N sometimes a fresh
    // (empty) one, to check the kernel starts and fills it.
    const bool causal_mode = integral != DintIntegral::global_mean;
    const Index cached = c.seq_len_kv - c.seq_len_q;
    const bool use_history = causal_mode && (cached > 0 || uniform_index(rng, 0, 1) == 1);
    DintHistory<T> plain_history, fast_history;
    DintHistory<W> wide_history;
    RowMatrix<T> plain_a1;  // [S x S] A1 of every token of the sequence (reference)
    RowMatrix<W> wide_a1;
    if (use_history) {
        // The history is an input of this call like Q, K and V: computed accurately (in Wide<T>),
        // rounded once to T and given to the fast kernel and the plain reference; the oracle gets
        // those same T values cast back up (docs/math.md §7: the oracle runs on the inputs cast to double).
        plain_a1 = reference::attention_map<T>(in.q1_all, in.k1, o);
        wide_a1 = reference::attention_map<W>(wide.q1_all, wide.k1, o);
        plain_history = cast_history<T>(reference::dint_history<W>(wide_a1.topRows(cached), wide.v));
        wide_history = cast_history<W>(plain_history);
        fast_history = plain_history;
        if (cached == 0) fast_history = DintHistory<T>{};  // empty vectors: the kernel sizes them
    }

    RowMatrix<T> out = RowMatrix<T>::Constant(c.seq_len_q, c.value_dim, T(12345));
    diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, out, o,
                             use_history ? &fast_history : nullptr, workspace);
    const RowMatrix<T> plain = reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o,
                                                         use_history ? &plain_history : nullptr);
    const RowMatrix<W> oracle = reference::dint_attention(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda,
                                                          integral, o, use_history ? &wide_history : nullptr);
    check_spec7<T>(what, out, plain, oracle, case_error_bound<T>(c, 3));

    if (use_history) {
        // The kernel appended this call's N rows to the history. The history is state, not an
        // output, so docs/math.md §7 does not apply to it directly (its effect on later outputs is checked
        // under docs/math.md §7 by the incremental tests). It must be the sum over all S rows of A1
        // (causal_softmax) or O1 = A1 V (causal_mean) within the sum of the per-row docs/math.md §7
        // tolerances plus the rounding of a sequential sum: S eps sum_m |row_m|.
        CHECK(fast_history.rows == c.seq_len_kv);
        const bool softmax_mode = integral == DintIntegral::causal_softmax;
        const RowMatrix<T> plain_rows = softmax_mode ? plain_a1 : RowMatrix<T>(plain_a1 * in.v);  // [S x S] or [S x dv]
        const RowMatrix<W> wide_rows = softmax_mode ? wide_a1 : RowMatrix<W>(wide_a1 * wide.v);
        const RowMatrix<W> expected = wide_rows.colwise().sum();
        const long double row_tolerance = 2 * max_abs_diff(plain_rows, wide_rows) + spec7_additive<T>();
        const long double abs_sum = static_cast<long double>(wide_rows.cwiseAbs().colwise().sum().maxCoeff());
        const long double tolerance =
            c.seq_len_kv * row_tolerance + c.seq_len_kv * std::numeric_limits<T>::epsilon() * abs_sum;
        const Vector<T>& sums = softmax_mode ? fast_history.a1_column_sum : fast_history.o1_row_sum;
        REQUIRE(sums.size() >= expected.cols());
        if (!softmax_mode) CHECK(sums.size() == c.value_dim);
        const RowMatrix<T> got = sums.head(expected.cols()).transpose();
        INFO((softmax_mode ? "history a1_column_sum" : "history o1_row_sum")
             << " after the call: error " << static_cast<double>(max_abs_diff(got, expected)) << ", tolerance "
             << static_cast<double>(tolerance));
        CHECK(max_abs_diff(got, expected) <= tolerance);
        if (sums.size() > expected.cols()) CHECK(sums.tail(sums.size() - expected.cols()).isZero(0));
    }
    return true;
}

}  // namespace

TEMPLATE_TEST_CASE("dint_attention matches the reference (docs/math.md §7) in every integral mode", "[kernels][dint_attention]",
                   float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    // DINT builds the S x S maps of the whole sequence for its histories: bound S * S (S up to
    // about two key tiles) instead of N * S, and run each case in ONE causal mode drawn at random
    // (so each mode meets about half of the shapes per seed, all of them over a few seeds), plus
    // global_mean on every mask-none case.
    const std::vector<KernelCase> cases = kernel_cases(rng, kQueryTile, kKeyTile, 6, 70000, true);
    int checked[3] = {0, 0, 0};
    AttentionWorkspace<T> workspace;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const KernelCase& c = cases[i];
        AttentionWorkspace<T>* ws = i % 2 == 0 ? nullptr : &workspace;  // temporary or reused workspace
        const DintIntegral causal_mode =
            uniform_index(rng, 0, 1) == 0 ? DintIntegral::causal_softmax : DintIntegral::causal_mean;
        checked[causal_mode == DintIntegral::causal_softmax ? 0 : 1] += check_dint_case<T>(rng, c, causal_mode, ws);
        checked[2] += check_dint_case<T>(rng, c, DintIntegral::global_mean, ws);
    }
    CHECK(checked[0] > 10);
    CHECK(checked[1] > 10);
    CHECK(checked[2] > 10);
}

TEMPLATE_TEST_CASE("dint_attention: heads are column blocks of wider matrices, output into a column block",
                   "[kernels][dint_attention]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    const Index n = kQueryTile + 1, s = n, d = 8, heads = 3, h = 1;
    const RowMatrix<T> q_all = random_matrix<T>(rng, n, 2 * heads * d);
    const RowMatrix<T> k_all = random_matrix<T>(rng, s, 2 * heads * d);
    const RowMatrix<T> v_all = random_matrix<T>(rng, s, heads * 2 * d);
    const T lambda = T(0.3);
    const T sentinel = T(-777);
    const ConstMatrixRef<T> q1(q_all.middleCols(2 * h * d, d)), q2(q_all.middleCols((2 * h + 1) * d, d));
    const ConstMatrixRef<T> k1(k_all.middleCols(2 * h * d, d)), k2(k_all.middleCols((2 * h + 1) * d, d));
    const ConstMatrixRef<T> v(v_all.middleCols(h * 2 * d, 2 * d));
    CHECK(q1.data() == q_all.data() + 2 * h * d);
    CHECK(v.data() == v_all.data() + h * 2 * d);
    const RowMatrix<T> q1_h = q1, k1_h = k1, q2_h = q2, k2_h = k2, v_h = v;
    KernelCase c;
    c.seq_len_q = n;
    c.seq_len_kv = s;
    c.head_dim = d;

    for (DintIntegral integral : kDintIntegrals) {
        INFO(integral_name(integral));
        AttentionOptions o;
        if (integral == DintIntegral::global_mean) o.mask = MaskKind::none;
        RowMatrix<T> out_all = RowMatrix<T>::Constant(n, heads * 2 * d, sentinel);
        diffattn::dint_attention(q1, k1, q2, k2, v, lambda, integral, out_all.middleCols(h * 2 * d, 2 * d), o);
        CHECK((out_all.leftCols(h * 2 * d).array() == sentinel).all());
        CHECK((out_all.rightCols((heads - h - 1) * 2 * d).array() == sentinel).all());
        const RowMatrix<T> plain = reference::dint_attention(q1_h, k1_h, q2_h, k2_h, v_h, lambda, integral, o);
        const RowMatrix<W> oracle =
            reference::dint_attention(cast_to<W>(q1_h), cast_to<W>(k1_h), cast_to<W>(q2_h), cast_to<W>(k2_h),
                                      cast_to<W>(v_h), W(lambda), integral, o);
        const RowMatrix<T> got = out_all.middleCols(h * 2 * d, 2 * d);
        check_spec7<T>("middle head", got, plain, oracle, case_error_bound<T>(c, 3));
    }
}

TEMPLATE_TEST_CASE("dint_attention: one valid key (one-hot maps) keeps docs/math.md §7 over a long sequence",
                   "[kernels][dint_attention]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    // valid_len = 1: A1 = A2 = e_0 in every row, so every output row is exactly V[0] and the plain
    // reference is exact. A kernel that sums the rows of O1 (the docs/math.md §2.3 identity of the mean
    // modes) must not let that running sum's rounding grow with N past docs/math.md §7's additive term.
    KernelCase c;
    c.seq_len_q = 1024 / kDebugCostDivisor;
    c.seq_len_kv = c.seq_len_q;
    c.head_dim = 4;
    c.value_dim = 8;
    c.valid_len = 1;
    c.threads = 2;  // the running sums cross blocks run on different threads
    for (DintIntegral integral : kDintIntegrals) {
        c.mask = integral == DintIntegral::global_mean ? MaskKind::none : MaskKind::causal;
        const auto in = random_diff_inputs<T>(rng, c);
        const auto wide = in.template cast<W>();
        const AttentionOptions o = c.options();
        RowMatrix<T> out(c.seq_len_q, c.value_dim);
        diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, out, o);
        const RowMatrix<T> plain = reference::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, o);
        const RowMatrix<W> oracle =
            reference::dint_attention(wide.q1, wide.k1, wide.q2, wide.k2, wide.v, wide.lambda, integral, o);
        check_spec7<T>(std::string(integral_name(integral)) + " " + c.describe(), out, plain, oracle,
                       case_error_bound<T>(c, 3));
    }
}

TEMPLATE_TEST_CASE("dint_attention over several query groups: docs/math.md §7 on 1, 2 and 3 threads, mean modes identical",
                   "[kernels][dint_attention][threads]", float, double) {
    // Shapes spanning several query groups (kGroupRows), with a partial last group and a last
    // block of a few rows. Every mode matches the reference under docs/math.md §7 on each thread count
    // (causal_softmax's chunks then start inside groups); the mean modes must not depend on the
    // thread count at all, bit for bit.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index shapes[][2] = {{kGroupRows + kQueryTile + 3, kGroupRows + kQueryTile + 3},
                               {kGroupRows + 1, kGroupRows + 1 + kKeyTile + 9}};
    for (const auto& shape : shapes) {
        for (MaskKind mask : {MaskKind::causal, MaskKind::none}) {
            KernelCase c = multi_group_case(shape[0], shape[1], mask);
            for (DintIntegral integral : kDintIntegrals) {
                for (int threads : {1, 2, 3}) {
                    c.threads = threads;
                    check_dint_case<T>(rng, c, integral, nullptr);
                }
                // Bit identity is for the mean modes, here without a history (a KV cache in causal_mean
                // needs one: checked under docs/math.md §7 above).
                if (integral == DintIntegral::causal_softmax ||
                    (integral == DintIntegral::global_mean && mask != MaskKind::none) ||
                    (integral == DintIntegral::causal_mean && c.seq_len_kv != c.seq_len_q)) {
                    continue;
                }
                c.threads = 1;
                INFO(integral_name(integral) << " " << c.describe());
                const auto in = random_diff_inputs<T>(rng, c);
                RowMatrix<T> one(c.seq_len_q, c.value_dim), more(c.seq_len_q, c.value_dim);
                diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, one, c.options());
                for (int threads : {2, 3}) {
                    c.threads = threads;
                    diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, integral, more, c.options());
                    CHECK((more.array() == one.array()).all());
                }
            }
        }
    }
}

TEST_CASE("split_key_tiles cuts a group's key tiles into contiguous runs of about equal work", "[kernels][dint_attention]") {
    // Runs are what DINT's causal_softmax integral hands to threads: they must cover the keys the
    // group visits exactly once, in whole key tiles, and none may carry much more than its share.
    std::vector<Index> segment_end(8);
    const auto work_of = [](const auto& mask, Index q_begin, Index q_rows, Index begin, Index end) {
        Index keys = 0;  // keys of [begin, end) that the group's blocks compute, as split_key_tiles counts them
        for (Index b = q_begin; b < q_begin + q_rows; b += kQueryTile) {
            const Index b_end = std::min(b + kQueryTile, q_begin + q_rows);
            keys += std::clamp<Index>(std::min(end, block_visit_end(mask, b, b_end)) - begin, 0, end - begin) * (b_end - b);
        }
        return keys;
    };
    const auto check = [&](const auto& mask, Index q_begin, Index q_rows, Index max_segments) {
        const Index visit_end = block_visit_end(mask, q_begin, q_begin + q_rows);
        const Index tiles = (visit_end + kKeyTile - 1) / kKeyTile;
        INFO("group [" << q_begin << ", " << q_begin + q_rows << "), visit_end " << visit_end << ", max_segments "
                       << max_segments);
        const Index segments = detail::split_key_tiles(mask, q_begin, q_rows, max_segments, segment_end);
        REQUIRE(segments == std::min(tiles, max_segments));
        const Index total = work_of(mask, q_begin, q_rows, 0, visit_end);
        Index begin = 0;
        for (Index s = 0; s < segments; ++s) {
            const Index end = segment_end[static_cast<std::size_t>(s)];
            INFO("segment " << s << " [" << begin << ", " << end << ")");
            CHECK(end > begin);
            CHECK((end % kKeyTile == 0 || end == visit_end));
            // Its share, give or take the one tile (the most work a tile can carry) where it was cut.
            CHECK(work_of(mask, q_begin, q_rows, begin, end) <= total / segments + kKeyTile * q_rows);
            begin = end;
        }
        CHECK(begin == (segments > 0 ? visit_end : 0));
    };
    for (Index max_segments : {1, 2, 4, 6}) {
        for (Index q_begin : {Index(0), kGroupRows, 5 * kGroupRows}) {
            for (Index q_rows : {Index(1), kQueryTile + 3, kGroupRows}) {
                const Index n = q_begin + q_rows;
                check(CausalMask{0, n}, q_begin, q_rows, max_segments);
                check(CausalMask{300, n + 300}, q_begin, q_rows, max_segments);  // a KV cache of 300 keys
                check(CausalMask{0, 77}, q_begin, q_rows, max_segments);        // key padding
                check(NoMask{n}, q_begin, q_rows, max_segments);
                check(NoMask{0}, q_begin, q_rows, max_segments);                // no key at all
            }
        }
    }
}

TEST_CASE("order_key_runs hands out a group's key runs heaviest first", "[kernels][dint_attention]") {
    // The pipeline's phases end when their last task does; a heavy run handed out last keeps one
    // thread busy while the others wait. The order must be a permutation of the runs whose work
    // (keys computed x rows) never increases, ties kept in run order.
    std::vector<Index> segment_end(8), order(8);
    const auto check = [&](const auto& mask, Index q_begin, Index q_rows, Index max_segments) {
        const Index segments = detail::split_key_tiles(mask, q_begin, q_rows, max_segments, segment_end);
        detail::order_key_runs(mask, q_begin, q_rows, segments, segment_end, order);
        INFO("group [" << q_begin << ", " << q_begin + q_rows << "), " << segments << " runs");
        std::vector<Index> work;
        for (Index s = 0; s < segments; ++s) {
            const auto i = static_cast<std::size_t>(s);
            work.push_back(detail::key_range_work(mask, q_begin, q_rows, s == 0 ? 0 : segment_end[i - 1], segment_end[i]));
        }
        std::vector<Index> seen(order.begin(), order.begin() + segments);
        std::sort(seen.begin(), seen.end());
        for (Index s = 0; s < segments; ++s) CHECK(seen[static_cast<std::size_t>(s)] == s);
        for (Index s = 1; s < segments; ++s) {
            const Index before = order[static_cast<std::size_t>(s - 1)], run = order[static_cast<std::size_t>(s)];
            CHECK(work[static_cast<std::size_t>(before)] >= work[static_cast<std::size_t>(run)]);
            if (work[static_cast<std::size_t>(before)] == work[static_cast<std::size_t>(run)]) CHECK(before < run);
        }
    };
    // A causal group of 6 key tiles in 4 runs: the diagonal tiles are light, so the runs differ.
    check(CausalMask{0, 3 * kGroupRows}, 2 * kGroupRows, kGroupRows, 4);
    for (Index max_segments : {1, 3, 8}) {
        check(CausalMask{0, 6 * kGroupRows}, 5 * kGroupRows, kGroupRows, max_segments);
        check(CausalMask{300, 2 * kGroupRows + 300}, kGroupRows, kGroupRows, max_segments);
        check(NoMask{5 * kKeyTile + 17}, 0, kGroupRows, max_segments);
    }
    // The first case by hand: rows [512, 768) see keys [0, 768), 6 tiles of 128. Tiles 0-3 are full
    // (256 rows x 128 keys = W); block by block, tile 4 holds 64 + 3 * 128 keys x 64 rows = 0.875 W and
    // tile 5 (64 + 128) x 64 = 0.375 W. A quarter of the 5.25 W is 1.31 W, so the runs are tiles {0, 1},
    // {2}, {3}, {4, 5}: 2 W, W, W, 1.25 W, handed out as runs 0, 3, 1, 2.
    static_assert(kGroupRows == 256 && kKeyTile == 128 && kQueryTile == 64, "the hand count below assumes these");
    REQUIRE(detail::split_key_tiles(CausalMask{0, 768}, 512, 256, 4, segment_end) == 4);
    CHECK(std::vector<Index>(segment_end.begin(), segment_end.begin() + 4) == std::vector<Index>{256, 384, 512, 768});
    detail::order_key_runs(CausalMask{0, 768}, 512, 256, 4, segment_end, order);
    CHECK(std::vector<Index>(order.begin(), order.begin() + 4) == std::vector<Index>{0, 3, 1, 2});
}

TEST_CASE("plan_integral_runs cuts a group's integral only where the later maps cannot fill the other threads",
          "[kernels][dint_attention]") {
    const auto plan = [](const auto& mask, Index seq_len_q, int threads) {
        const DintPipeline<float> pipeline = planned_pipeline(mask, seq_len_q, threads);
        return std::vector<Index>(pipeline.run_count.begin(), pipeline.run_count.begin() + query_group_count(seq_len_q));
    };
    // By hand, in units W of a full key tile (128 keys) times a group (256 rows): causal group g sees
    // 2g full tiles and two diagonal tiles worth 0.875 W and 0.375 W (order_key_runs' test counts
    // them), so 2g + 1.25 W, and its two maps twice that.
    static_assert(kGroupRows == 256 && kKeyTile == 128 && kKeySegmentsPerThread == 2, "the hand count assumes these");
    // 4 groups on 2 threads: the last (7.25 W, 8 tiles) has no later maps beside it: 4 runs. Group 2
    // (5.25 W) runs beside group 3's maps (14.5 W), group 1 beside 25 W: whole.
    CHECK(plan(CausalMask{0, 1024}, 1024, 2) == std::vector<Index>{1, 1, 1, 4});
    // On 4 threads the 3 others would need 3 x 5.25 = 15.75 W > 14.5 W beside group 2: cut, into as
    // many runs as its 6 tiles allow; group 1 needs 3 x 3.25 = 9.75 W <= 25 W: whole.
    CHECK(plan(CausalMask{0, 1024}, 1024, 4) == std::vector<Index>{1, 1, 6, 8});
    // One thread: nothing to fill, nothing cut.
    CHECK(plan(CausalMask{0, 1024}, 1024, 1) == std::vector<Index>{1, 1, 1, 1});
    // A last group of 5 rows (5 x 1029 keys of work) leaves group 3 (237,568 = 7.25 W) alone: both cut.
    CHECK(plan(CausalMask{0, 1029}, 1029, 2) == std::vector<Index>{1, 1, 1, 4, 4});
    // No mask: 3 equal groups of 6 tiles; only the last lacks later maps.
    CHECK(plan(NoMask{768}, 768, 2) == std::vector<Index>{1, 1, 4});
    // No key at all: no runs.
    CHECK(plan(NoMask{0}, 600, 2) == std::vector<Index>{0, 0, 0});
}

TEST_CASE("DintTaskQueue hands out every task once, each only once its inputs are ready, and never stalls",
          "[kernels][dint_attention]") {
    // Several threads are played by one: up to max_in_flight tasks are "running" at once, and the
    // test randomly either takes a ready task (try_next) or finishes a running one. Whenever nothing
    // runs, a task must be ready until all are handed out (the queue's no-deadlock argument).
    DIFFATTN_TEST_RNG(rng);
    const auto drive = [&](const auto& mask, Index seq_len_q, int threads, std::size_t max_in_flight) {
        INFO("seq_len_q " << seq_len_q << ", threads " << threads << ", in flight " << max_in_flight);
        DintPipeline<float> pipeline = planned_pipeline(mask, seq_len_q, threads);
        DintTaskLedger ledger(seq_len_q, pipeline.run_count);
        detail::DintTaskQueue<float> queue(pipeline, seq_len_q);
        std::vector<detail::DintTask> running;
        std::bernoulli_distribution take_one(0.6);
        for (;;) {
            if (running.empty() || (running.size() < max_in_flight && take_one(rng))) {
                if (const std::optional<detail::DintTask> task = queue.try_next()) {
                    CHECK(ledger.check_handed_out(*task).empty());
                    running.push_back(*task);
                    continue;
                }
                if (running.empty()) {
                    REQUIRE(queue.exhausted());  // else: nothing ready, nothing running, tasks left: a stall
                    break;
                }
            }
            const auto i = std::uniform_int_distribution<std::size_t>(0, running.size() - 1)(rng);
            ledger.finish(running[i]);
            queue.finish(running[i]);
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        }
        CHECK(ledger.all_handed_out());
        CHECK(ledger.all_finished());
        CHECK_FALSE(queue.next().has_value());  // returns at once when none is left
    };
    const Index n = 6 * kGroupRows + kQueryTile + 5;  // 7 groups: every map slot and run slot reused
    for (std::size_t in_flight : {1, 2, 3, 5}) {
        for (int threads : {2, 3}) {
            for (int repeat = 0; repeat < 4; ++repeat) {
                drive(CausalMask{0, n}, n, threads, in_flight);
                drive(CausalMask{300, n + 300}, n, threads, in_flight);  // a KV cache of 300 keys
                drive(NoMask{n}, n, threads, in_flight);
                drive(NoMask{0}, n, threads, in_flight);  // no runs at all
            }
        }
    }
}

TEMPLATE_TEST_CASE("dint_attention causal_softmax through its multi-thread pipeline: docs/math.md §7, and the same bits on every run",
                   "[kernels][dint_attention][threads]", float, double) {
    // With T > 1 threads the causal_softmax integral runs query groups as tasks (maps, integral
    // runs, rows) handed out as their inputs are ready, whose buffers rotate by group: 4 groups and a
    // partial fifth cycle through all of them. The tasks go to whichever thread is free, so the bits
    // must not depend on which thread ran which: repeated calls must agree exactly.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index seq_len_q = 4 * kGroupRows + kQueryTile + 5;
    for (Index cached : {Index(0), kKeyTile + 9}) {
        KernelCase c = multi_group_case(seq_len_q, seq_len_q + cached, MaskKind::causal);
        for (int threads : {2, 3}) {
            c.threads = threads;
            check_dint_case<T>(rng, c, DintIntegral::causal_softmax, nullptr);
            if (cached > 0) continue;  // the repeat below needs no history
            INFO(c.describe());
            const auto in = random_diff_inputs<T>(rng, c);
            RowMatrix<T> first(c.seq_len_q, c.value_dim), again(c.seq_len_q, c.value_dim);
            AttentionWorkspace<T> workspace;
            diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, DintIntegral::causal_softmax, first,
                                     c.options(), nullptr, &workspace);
            for (int repeat = 0; repeat < 3; ++repeat) {
                diffattn::dint_attention(in.q1, in.k1, in.q2, in.k2, in.v, in.lambda, DintIntegral::causal_softmax,
                                         again, c.options(), nullptr, &workspace);
                CHECK((again.array() == first.array()).all());
            }
        }
    }
}

TEMPLATE_TEST_CASE("dint_attention decode calls whose row max moves far between key tiles: docs/math.md §7 in every "
                   "mode",
                   "[kernels][dint_attention][threads][decode]", float, double) {
    // causal_softmax rebuilds A1 from map 1's kept probabilities (dint_few_rows.hpp, KeptA1Tiles).
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_key_ramp_case<T>(rng, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        for (DintIntegral integral : kDintIntegrals) check_dint_case<T>(rng, c, integral, workspace);
    });
}

TEMPLATE_TEST_CASE("dint_attention decode calls: N < kMinPackedRows, keys split over 1, 2 and 3 threads, "
                   "docs/math.md §7 in every mode, with the history of a KV cache",
                   "[kernels][dint_attention][threads][decode]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    for_each_decode_case<T>(rng, 24, [&](const KernelCase& c, AttentionWorkspace<T>* workspace) {
        for (DintIntegral integral : kDintIntegrals) check_dint_case<T>(rng, c, integral, workspace);
    });
}
