// The kernels' hot path allocates nothing once the workspace (and a DINT history) is reserved.
//
// Built into test_nomalloc with EIGEN_RUNTIME_NO_MALLOC (tests/CMakeLists.txt: *_nomalloc.cpp).
// Eigen reports a forbidden heap allocation through eigen_assert, which NDEBUG (Release) turns off,
// so this file routes eigen_assert to a counter that the test reads: the check works in every
// build type, and a forbidden allocation is a test failure rather than an abort.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter

#include "test_support.hpp"

#include "diffattn/kernels/attention_workspace.hpp"
#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"
#include "diffattn/layers/head_blocks.hpp"

#include <string>
#include <vector>

using namespace diffattn;
using namespace diffattn::test;

using diffattn_nomalloc::without_malloc;

namespace {

/// The first kernel call of a process starts the OpenMP runtime, and libomp (the clang builds)
/// allocates once then, through operator new: not the kernels' doing, so it happens before the checks.
void start_openmp_runtime() {
    const RowMatrix<float> x = RowMatrix<float>::Ones(2, 2);
    RowMatrix<float> out(2, 2);
    diffattn::softmax_attention(x, x, x, out);
}

}  // namespace

TEST_CASE("no-malloc guard: a forbidden allocation is detected", "[kernels][nomalloc]") {
    const int failures = without_malloc([] {
        RowMatrix<float> m(7, 9);  // allocates
        m.setZero();
    });
    CHECK(failures > 0);
}

TEST_CASE("no-malloc guard: an allocation outside Eigen (std::string, std::vector) is detected", "[kernels][nomalloc]") {
    std::size_t sizes = 0;
    const int failures = without_malloc([&] {
        const std::string text(100, 'x');  // past the small-string buffer
        const std::vector<int> numbers(10);
        sizes = text.size() + numbers.size();
    });
    CHECK(sizes == 110);
    CHECK(failures >= 2);
}

TEMPLATE_TEST_CASE("kernels allocate nothing with a reserved workspace and history", "[kernels][nomalloc]", float,
                   double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index n = 200, s = 200, d = 64, dv = 128;  // dv = 2d, the DIFF Transformer layout
    const RowMatrix<T> q1 = random_matrix<T>(rng, n, d), q2 = random_matrix<T>(rng, n, d);
    const RowMatrix<T> k1 = random_matrix<T>(rng, s, d), k2 = random_matrix<T>(rng, s, d);
    const RowMatrix<T> v = random_matrix<T>(rng, s, dv);
    const T lambda = T(0.6);
    AttentionOptions causal;
    AttentionOptions none;
    none.mask = MaskKind::none;
    AttentionOptions padded = none;
    padded.valid_len = s - 37;

    AttentionWorkspace<T> workspace;
    workspace.reserve(n, s, d, dv);
    RowMatrix<T> out_softmax(n, dv), out_softmax_padded(n, dv), out_diff(n, dv), out_mean(n, dv), out_global(n, dv),
        out_softmax_integral(n, dv), out_gda(n, 2 * dv);
    RowMatrix<T> signal(n, 2 * d);  // a GDA group of two signal heads
    signal << q1, q2;
    // Histories sized up front: column sums for all S keys, row sums for dv values.
    DintHistory<T> history_softmax, history_mean;
    history_softmax.a1_column_sum = Vector<T>::Zero(s);
    history_mean.o1_row_sum = Vector<T>::Zero(dv);

    start_openmp_runtime();
    const int failures = without_malloc([&] {
        diffattn::softmax_attention(q1, k1, v, out_softmax, causal, &workspace);
        diffattn::softmax_attention(q1, k1, v, out_softmax_padded, padded, &workspace);
        diffattn::diff_attention(q1, k1, q2, k2, v, lambda, out_diff, causal, &workspace);
        diffattn::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::causal_softmax, out_softmax_integral, causal,
                                 &history_softmax, &workspace);
        diffattn::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::causal_mean, out_mean, causal, &history_mean,
                                 &workspace);
        diffattn::dint_attention(q1, k1, q2, k2, v, lambda, DintIntegral::global_mean, out_global, none, nullptr,
                                 &workspace);
        diffattn::gda_attention(signal, k1, q2, k2, v, lambda, out_gda, causal, &workspace);
    });
    INFO("first failure: " << diffattn_nomalloc::first_failure_text());
    CHECK(failures == 0);
    CHECK(out_softmax.allFinite());
    CHECK(out_softmax_padded.allFinite());
    CHECK(out_diff.allFinite());
    CHECK(out_softmax_integral.allFinite());
    CHECK(out_mean.allFinite());
    CHECK(out_global.allFinite());
    CHECK(out_gda.allFinite());
    CHECK(history_softmax.rows == n);
    CHECK(history_mean.rows == n);
}

TEMPLATE_TEST_CASE("DINT causal_softmax on 2 threads (its task queue) allocates nothing with a reserved workspace",
                   "[kernels][nomalloc][threads]", float, double) {
    // Several query groups, so the queue reuses its map and run slots; without OpenMP the call runs
    // on one thread and this checks that path again.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index n = 5 * kGroupRows + 17, d = 16, dv = 32;
    const RowMatrix<T> q1 = random_matrix<T>(rng, n, d), q2 = random_matrix<T>(rng, n, d);
    const RowMatrix<T> k1 = random_matrix<T>(rng, n, d), k2 = random_matrix<T>(rng, n, d);
    const RowMatrix<T> v = random_matrix<T>(rng, n, dv);
    AttentionOptions options;
    options.threads = 2;
    AttentionWorkspace<T> workspace;
    workspace.reserve(n, n, d, dv, options.threads);
    RowMatrix<T> out(n, dv);
    diffattn::dint_attention(q1, k1, q2, k2, v, T(0.6), DintIntegral::causal_softmax, out, options, nullptr,
                             &workspace);  // starts the thread team outside the check
    const int failures = without_malloc([&] {
        diffattn::dint_attention(q1, k1, q2, k2, v, T(0.6), DintIntegral::causal_softmax, out, options, nullptr,
                                 &workspace);
    });
    INFO("first failure: " << diffattn_nomalloc::first_failure_text());
    CHECK(failures == 0);
    CHECK(out.allFinite());
}

TEMPLATE_TEST_CASE("DINT decoding with a KV cache allocates nothing once the history is reserved",
                   "[kernels][nomalloc]", float, double) {
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index total = 200, first = 150, d = 64, dv = 128;
    const RowMatrix<T> q1 = random_matrix<T>(rng, total, d), q2 = random_matrix<T>(rng, total, d);
    const RowMatrix<T> k1 = random_matrix<T>(rng, total, d), k2 = random_matrix<T>(rng, total, d);
    const RowMatrix<T> v = random_matrix<T>(rng, total, dv);
    const T lambda = T(0.6);
    const AttentionOptions causal;

    AttentionWorkspace<T> workspace;
    workspace.reserve(total, total, d, dv);
    RowMatrix<T> out_softmax(total, dv), out_mean(total, dv);
    DintHistory<T> history_softmax, history_mean;
    history_softmax.a1_column_sum = Vector<T>::Zero(total);  // room for every key of the sequence
    history_mean.o1_row_sum = Vector<T>::Zero(dv);

    // The prompt (first 150 tokens), then 50 tokens in chunks of 1, 9 and 40, all without malloc.
    start_openmp_runtime();
    const int failures = without_malloc([&] {
        Index begin = 0;
        for (Index size : {first, Index{1}, Index{9}, Index{40}}) {
            const Index end = begin + size;
            diffattn::dint_attention(q1.middleRows(begin, size), k1.topRows(end), q2.middleRows(begin, size),
                                     k2.topRows(end), v.topRows(end), lambda, DintIntegral::causal_softmax,
                                     out_softmax.middleRows(begin, size), causal, &history_softmax, &workspace);
            diffattn::dint_attention(q1.middleRows(begin, size), k1.topRows(end), q2.middleRows(begin, size),
                                     k2.topRows(end), v.topRows(end), lambda, DintIntegral::causal_mean,
                                     out_mean.middleRows(begin, size), causal, &history_mean, &workspace);
            begin = end;
        }
    });
    INFO("first failure: " << diffattn_nomalloc::first_failure_text());
    CHECK(failures == 0);
    CHECK(out_softmax.allFinite());
    CHECK(out_mean.allFinite());
    CHECK(history_softmax.rows == total);
    CHECK(history_mean.rows == total);
}

TEMPLATE_TEST_CASE("decode steps split over the keys on 2 threads allocate nothing, in every kind and mode",
                   "[kernels][nomalloc][threads][decode]", float, double) {
    // Calls of fewer than kMinPackedRows rows fold runs of keys into the workspace's key-split
    // states on each thread and merge them (kernels/key_split.hpp): nothing of that may allocate.
    using T = TestType;
    DIFFATTN_TEST_RNG(rng);
    const Index total = 7 * kKeyTile + 5, d = 64, dv = 128;
    const RowMatrix<T> q1 = random_matrix<T>(rng, total, d), q2 = random_matrix<T>(rng, total, d);
    const RowMatrix<T> k1 = random_matrix<T>(rng, total, d), k2 = random_matrix<T>(rng, total, d);
    const RowMatrix<T> v = random_matrix<T>(rng, total, dv);
    const T lambda = T(0.6);
    AttentionOptions causal;
    causal.threads = 2;
    AttentionOptions none = causal;
    none.mask = MaskKind::none;
    AttentionWorkspace<T> workspace;
    workspace.reserve(total, total, d, dv, causal.threads);
    RowMatrix<T> out(total, dv);
    const RowMatrix<T> signal = random_matrix<T>(rng, total, 4 * d);  // a GDA group of four signal heads
    RowMatrix<T> out_gda(total, 4 * dv);
    DintHistory<T> history_softmax, history_mean;
    history_softmax.a1_column_sum = Vector<T>::Zero(total);
    history_mean.o1_row_sum = Vector<T>::Zero(dv);
    const Index prompt = total - 4;
    diffattn::dint_attention(q1.topRows(prompt), k1.topRows(prompt), q2.topRows(prompt), k2.topRows(prompt),
                             v.topRows(prompt), lambda, DintIntegral::causal_softmax, out.topRows(prompt), causal,
                             &history_softmax, &workspace);  // starts the thread team outside the check
    diffattn::dint_attention(q1.topRows(prompt), k1.topRows(prompt), q2.topRows(prompt), k2.topRows(prompt),
                             v.topRows(prompt), lambda, DintIntegral::causal_mean, out.topRows(prompt), causal,
                             &history_mean, &workspace);
    const int failures = without_malloc([&] {
        Index begin = prompt;
        for (Index size : {Index{1}, Index{3}}) {  // a one-token step, then a chunk of three
            const Index end = begin + size;
            const auto q1_rows = q1.middleRows(begin, size), q2_rows = q2.middleRows(begin, size);
            auto out_rows = out.middleRows(begin, size);
            diffattn::softmax_attention(q1_rows, k1.topRows(end), v.topRows(end), out_rows, causal, &workspace);
            diffattn::diff_attention(q1_rows, k1.topRows(end), q2_rows, k2.topRows(end), v.topRows(end), lambda,
                                     out_rows, causal, &workspace);
            diffattn::dint_attention(q1_rows, k1.topRows(end), q2_rows, k2.topRows(end), v.topRows(end), lambda,
                                     DintIntegral::global_mean, out_rows, none, nullptr, &workspace);
            diffattn::dint_attention(q1_rows, k1.topRows(end), q2_rows, k2.topRows(end), v.topRows(end), lambda,
                                     DintIntegral::causal_mean, out_rows, causal, &history_mean, &workspace);
            diffattn::dint_attention(q1_rows, k1.topRows(end), q2_rows, k2.topRows(end), v.topRows(end), lambda,
                                     DintIntegral::causal_softmax, out_rows, causal, &history_softmax, &workspace);
            // One token: the signal heads stacked as the rows of one map (gda_few_rows).
            auto gda_rows = out_gda.middleRows(begin, size);
            diffattn::gda_attention(signal.middleRows(begin, size), k1.topRows(end), q2_rows, k2.topRows(end),
                                    v.topRows(end), lambda, gda_rows, causal, &workspace);
            begin = end;
        }
    });
    INFO("first failure: " << diffattn_nomalloc::first_failure_text());
    CHECK(failures == 0);
    CHECK(out.allFinite());
    CHECK(out_gda.bottomRows(4).allFinite());
    CHECK(history_softmax.rows == total);
    CHECK(history_mean.rows == total);
}

TEST_CASE("BF16 products allocate nothing with a workspace reserved for them, on 1 and 2 threads, over float "
          "keys and a BF16 cache's blocks",
          "[kernels][nomalloc][bf16]") {
    // The bf16_dot packings live in the workspace (reserve(..., compute)); the widened products use
    // the float ones. A prefill of several query groups, then a chunk over a BF16 cache's keys.
    DIFFATTN_TEST_RNG(rng);
    using S = Eigen::bfloat16;
    const Index n = kGroupRows + 40, d = 40, dv = 72;
    const RowMatrix<float> q1 = random_matrix<float>(rng, n, d), q2 = random_matrix<float>(rng, n, d);
    const RowMatrix<float> k1 = random_matrix<float>(rng, n, d), k2 = random_matrix<float>(rng, n, d);
    const RowMatrix<float> v = random_matrix<float>(rng, n, dv);
    const RowMatrix<S> v_cache = v.cast<S>();
    Vector<S> k1_store(detail::whole_key_blocks(n) * d), k2_store(detail::whole_key_blocks(n) * d);
    const auto k1_blocks = HeadBlocks<S>::blocked_keys(k1_store.data(), 1, d, n);
    const auto k2_blocks = HeadBlocks<S>::blocked_keys(k2_store.data(), 1, d, n);
    k1_blocks.write_rows(0, k1.cast<S>());
    k2_blocks.write_rows(0, k2.cast<S>());
    const detail::KeyRows<S> k1_cache = k1_blocks.as_const().keys(0, n), k2_cache = k2_blocks.as_const().keys(0, n);
    std::vector<Compute> modes = bf16_paths_here();
    modes.push_back(Compute::bf16);
    start_openmp_runtime();
    for (Compute compute : modes) {
        for (int threads : {1, 2}) {
            INFO(to_string(compute) << " on " << threads << " threads");
            AttentionOptions o;
            o.compute = compute;
            o.threads = threads;
            AttentionWorkspace<float> workspace(n, n, d, dv, threads, compute);
            RowMatrix<float> out(n, dv);
            DintHistory<float> history;
            history.a1_column_sum = Vector<float>::Zero(n);
            const Index chunk = 24, first = n - chunk;
            const auto q1_chunk = q1.bottomRows(chunk), q2_chunk = q2.bottomRows(chunk);
            auto out_chunk = out.bottomRows(chunk);
            AttentionOptions team = o;  // starts the thread team outside the check, on another workspace
            team.compute = Compute::scalar;
            diffattn::softmax_attention(q1, k1, v, out, team);
            const int failures = without_malloc([&] {
                diffattn::softmax_attention(q1, k1, v, out, o, &workspace);
                diffattn::diff_attention(q1, k1, q2, k2, v, 0.6f, out, o, &workspace);
                for (DintIntegral integral : kDintIntegrals) {
                    AttentionOptions mode = o;
                    if (integral == DintIntegral::global_mean) mode.mask = MaskKind::none;
                    diffattn::dint_attention(q1, k1, q2, k2, v, 0.6f, integral, out, mode, nullptr, &workspace);
                }
                diffattn::dint_attention(q1.topRows(first), k1.topRows(first), q2.topRows(first), k2.topRows(first),
                                         v.topRows(first), 0.6f, DintIntegral::causal_softmax, out.topRows(first), o,
                                         &history, &workspace);
                detail::dint_attention<float, S>(q1_chunk, k1_cache, q2_chunk, k2_cache, v_cache, 0.6f,
                                                 DintIntegral::causal_softmax, out_chunk, o, &history, &workspace);
                detail::diff_attention<float, S>(q1_chunk, k1_cache, q2_chunk, k2_cache, v_cache, 0.6f, out_chunk, o,
                                                 &workspace);
            });
            INFO("first failure: " << diffattn_nomalloc::first_failure_text());
            CHECK(failures == 0);
            CHECK(out.allFinite());
            CHECK(history.rows == n);
        }
    }
}
