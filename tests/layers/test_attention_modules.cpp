// The multi-head attention modules of docs/math.md §3 (softmax, diff, dint, shared_diff, diff_v2) against
// the double transcription in naive_reference.hpp, the Shared DIFF merge, thread-count
// independence, parameter counts (including the official MultiheadDiffAttn figures) and the
// configuration and shape errors.
#include "naive_reference.hpp"

#include "diffattn/layers/multi_head_attention.hpp"

#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

using namespace diffattn;

namespace {

struct Case {
    std::string name;
    AttentionConfig config;
};

AttentionConfig make(AttentionKind kind, Index d_model, Index heads, Index kv_heads, Index depth = 0) {
    AttentionConfig c;
    c.kind = kind;
    c.d_model = d_model;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.depth = depth;
    return c;
}

/// Every kind, with and without GQA, both pairings, every DINT integral, causal and not.
std::vector<Case> cases() {
    std::vector<Case> out;
    out.push_back({"softmax", make(AttentionKind::softmax, 32, 4, 4)});
    out.push_back({"softmax gqa rep 2", make(AttentionKind::softmax, 32, 4, 2, 1)});
    out.push_back({"softmax encoder", make(AttentionKind::softmax, 32, 4, 1)});
    out.back().config.causal = false;
    out.push_back({"diff", make(AttentionKind::diff, 32, 2, 2)});
    out.push_back({"diff depth 3", make(AttentionKind::diff, 32, 2, 2, 3)});
    out.push_back({"diff gqa per_head", make(AttentionKind::diff, 64, 4, 2, 1)});
    out.push_back({"diff gqa per_subhead", make(AttentionKind::diff, 64, 4, 2, 1)});
    out.back().config.gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back({"diff gqa rep 4 per_subhead", make(AttentionKind::diff, 64, 4, 1, 2)});
    out.back().config.gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back({"diff encoder", make(AttentionKind::diff, 32, 2, 2)});
    out.back().config.causal = false;
    out.push_back({"diff rope_theta 100", make(AttentionKind::diff, 32, 1, 1)});
    out.back().config.rope_theta = 100.0;
    for (DintIntegral integral : {DintIntegral::causal_softmax, DintIntegral::causal_mean}) {
        out.push_back({std::string("dint ") + to_string(integral), make(AttentionKind::dint, 32, 2, 2, 1)});
        out.back().config.dint_integral = integral;
        out.push_back({std::string("dint gqa ") + to_string(integral), make(AttentionKind::dint, 64, 4, 2, 2)});
        out.back().config.dint_integral = integral;
    }
    out.push_back({"dint global_mean encoder", make(AttentionKind::dint, 32, 2, 2, 1)});
    out.back().config.dint_integral = DintIntegral::global_mean;
    out.back().config.causal = false;
    out.push_back({"dint gqa per_subhead", make(AttentionKind::dint, 64, 4, 2)});
    out.back().config.gqa_pairing = DiffGqaPairing::per_subhead;
    out.push_back({"shared_diff rank 3", make(AttentionKind::shared_diff, 32, 2, 2, 1)});
    out.back().config.shared_diff_rank = 3;
    out.push_back({"shared_diff rank 1, 4 heads", make(AttentionKind::shared_diff, 64, 4, 4, 2)});
    out.back().config.shared_diff_rank = 1;
    out.push_back({"diff_v2", make(AttentionKind::diff_v2, 32, 4, 2)});
    out.back().config.given_head_dim = 6;
    out.push_back({"diff_v2 no gqa", make(AttentionKind::diff_v2, 16, 2, 2)});
    out.back().config.given_head_dim = 8;
    out.push_back({"diff_v2 encoder", make(AttentionKind::diff_v2, 16, 2, 1)});
    out.back().config.given_head_dim = 4;
    out.back().config.causal = false;
    out.push_back({"gda ratio 4, 2 kv heads", make(AttentionKind::gda, 64, 8, 2, 1)});
    out.back().config.gda_group_ratio = 4;
    out.push_back({"gda ratio 2, 1 kv head serving 3 groups", make(AttentionKind::gda, 48, 6, 1, 2)});
    out.back().config.gda_group_ratio = 2;
    out.push_back({"gda ratio 1 head_dim 6", make(AttentionKind::gda, 16, 2, 2)});
    out.back().config.gda_group_ratio = 1;
    out.back().config.given_head_dim = 6;
    return out;
}

template <typename T>
MultiHeadAttention<T> seeded_module(const AttentionConfig& config, std::uint64_t seed) {
    MultiHeadAttention<T> module(config);
    ParameterList<T> list;
    module.collect_parameters("", list);
    init_parameters_uniform(list, seed);
    // Lambda vectors larger than the demo init, so lambda differs visibly from lambda_init.
    if (config.has_lambda()) {
        module.weights().lambda.q1 *= T(3);
        module.weights().lambda.k2 *= T(3);
    }
    return module;
}

template <typename T>
RowMatrix<T> seeded_input(Index rows, Index cols, std::uint64_t seed) {
    SeededUniform random(seed);
    RowMatrix<T> x(rows, cols);
    for (Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(random.next());
    return x;
}

template <typename T>
naive::Mat reference_output(MultiHeadAttention<T>& module, const RowMatrix<T>& x) {
    ParameterList<T> list;
    module.collect_parameters("", list);
    return naive::attention(module.config(), naive::tensors_of(list), x.template cast<double>());
}

template <typename T>
RowMatrix<T> run(const MultiHeadAttention<T>& module, const RowMatrix<T>& x, int threads = 1) {
    AttentionScratch<T> scratch(module.config(), x.rows() + 3, threads);
    const ExecutionContext context{threads, 0.0};  // these small calls on `threads` threads too (thread-count tests)
    RowMatrix<T> y(x.rows(), module.config().d_model);
    module.forward(x, y, scratch, context);
    return y;
}

/// Module tolerance, relative to max(1, max |y|): a module chains ~10 operations of width <= 64
/// (projections, rotary, softmax, the DIFF subtraction, subln, out_proj), each adding a few
/// epsilon; the largest error seen is about 5 epsilon (float and double alike), so 64 epsilon
/// leaves room for other compilers and SIMD widths without hiding a wrong formula (which is off
/// by 1e-3 or more).
template <typename T>
double module_tolerance() {
    return 64 * std::numeric_limits<T>::epsilon();
}

}  // namespace

TEMPLATE_TEST_CASE("every attention module matches the docs/math.md §3 transcription", "[layers][attention]", float, double) {
    using T = TestType;
    for (const Case& c : cases()) {
        for (Index n : {Index(1), Index(13), Index(70)}) {  // 70 > one 64-row query tile of the kernels
            INFO(c.name << ", N = " << n);
            MultiHeadAttention<T> module = seeded_module<T>(c.config, 11);
            const RowMatrix<T> x = seeded_input<T>(n, c.config.d_model, 5);
            const naive::Mat expected = reference_output(module, x);
            const RowMatrix<T> y = run(module, x);
            const double scale = std::max(1.0, expected.cwiseAbs().maxCoeff());
            const double error = (y.template cast<double>() - expected).cwiseAbs().maxCoeff() / scale;
            INFO("relative error " << error);
            CHECK(error < module_tolerance<T>());
            CHECK(expected.cwiseAbs().maxCoeff() > 1e-3);  // the comparison is not vacuous
        }
    }
}

TEMPLATE_TEST_CASE("Shared DIFF: projecting through the factors and through merged weights agree",
                   "[layers][attention][shared_diff]", float, double) {
    using T = TestType;
    AttentionConfig config = make(AttentionKind::shared_diff, 64, 4, 4, 1);
    config.shared_diff_rank = 2;
    MultiHeadAttention<T> module = seeded_module<T>(config, 3);
    const RowMatrix<T> x = seeded_input<T>(20, 64, 9);
    const RowMatrix<T> factored = run(module, x);
    module.merge();
    REQUIRE(module.merged());
    CHECK(module.weights().q_proj.rows() == config.q_width());
    CHECK(module.weights().q_proj.cols() == 64);
    const RowMatrix<T> merged = run(module, x);
    const double scale = std::max<double>(1.0, factored.cwiseAbs().maxCoeff());
    CHECK((merged - factored).cwiseAbs().maxCoeff() / scale < module_tolerance<T>());
    // The merged rows of map t are base + b_t a_t^T.
    const auto& s = module.weights().shared;
    const Index d = config.head_dim(), r = config.shared_diff_rank;
    for (Index t = 0; t < 2 * config.n_heads; ++t) {
        RowMatrix<double> w = s.q_base.template cast<double>() +
                              s.q_b.middleRows(t * d, d).template cast<double>() *
                                  s.q_a.middleCols(t * r, r).template cast<double>().transpose();
        CHECK((module.weights().q_proj.dense().middleRows(t * d, d).template cast<double>() - w).cwiseAbs().maxCoeff() <
              module_tolerance<T>());
    }
    // Handing out writable parameters drops the merge (the factors may change).
    ParameterList<T> list;
    module.collect_parameters("", list);
    CHECK_FALSE(module.merged());
    CHECK((run(module, x) - factored).cwiseAbs().maxCoeff() == T(0));
}

TEMPLATE_TEST_CASE("Shared DIFF: the factored projection's token blocks give the formula on any thread count",
                   "[layers][attention][shared_diff][threads]", float, double) {
    using T = TestType;
    const Index D = 32, H = 2, d = 8, r = 3, maps = 2 * H;
    const Index n = 805;  // 3 token blocks of 269, 269 and 267 rows: a block offset bug shows
    REQUIRE(detail::shared_diff_token_block(n) == 269);
    SharedDiffFactors<T> f(D, H, d, r);
    f.q_base = seeded_input<T>(d, D, 1);
    f.k_base = seeded_input<T>(d, D, 2);
    f.q_a = seeded_input<T>(D, maps * r, 3);
    f.k_a = seeded_input<T>(D, maps * r, 4);
    f.q_b = seeded_input<T>(maps * d, r, 5);
    f.k_b = seeded_input<T>(maps * d, r, 6);
    const RowMatrix<T> x = seeded_input<T>(n, D, 7);
    const auto project = [&](int threads) {
        RowMatrix<T> base(n, 2 * d), xa(n, 2 * maps * r), q(n, maps * d), k(n, maps * d);
        // min flops 0: every block count on `threads` threads
        f.project(x, base, xa, q, k, ExecutionContext{threads, 0.0});
        RowMatrix<T> qk(n, 2 * maps * d);
        qk << q, k;
        return qk;
    };
    const RowMatrix<T> one = project(1);
    // docs/math.md §3.3 in double: map t of Q is X q_base^T + (X a_t) b_t^T; likewise K.
    const RowMatrix<double> xd = x.template cast<double>();
    RowMatrix<double> expected(n, 2 * maps * d);
    const WeightMatrix<T>* bases[2] = {&f.q_base, &f.k_base};
    const WeightMatrix<T>* as[2] = {&f.q_a, &f.k_a};
    const WeightMatrix<T>* bs[2] = {&f.q_b, &f.k_b};
    for (int which = 0; which < 2; ++which) {
        for (Index t = 0; t < maps; ++t) {
            expected.middleCols((which * maps + t) * d, d) =
                xd * bases[which]->template cast<double>().transpose() +
                (xd * as[which]->middleCols(t * r, r).template cast<double>()) *
                    bs[which]->middleRows(t * d, d).template cast<double>().transpose();
        }
    }
    const double scale = std::max(1.0, expected.cwiseAbs().maxCoeff());
    CHECK((one.template cast<double>() - expected).cwiseAbs().maxCoeff() / scale < module_tolerance<T>());
    for (int threads : {2, 3}) CHECK((project(threads) - one).cwiseAbs().maxCoeff() == T(0));
    // Mis-sized scratch or outputs are named, not written past.
    RowMatrix<T> base(n, 2 * d), xa(n, 2 * maps * r), q(n, maps * d), short_k(n - 1, maps * d), narrow_xa(n, maps * r);
    CHECK_THROWS_WITH(f.project(x, base, xa, q, short_k),
                      Catch::Contains("k is 804x32 but must be 805x32") && Catch::Contains("SharedDiffFactors::project"));
    CHECK_THROWS_AS(f.project(x, base, narrow_xa, q, q), ShapeError);
    CHECK_THROWS_AS(f.project(x.leftCols(D - 1), base, xa, q, q), ShapeError);
}

TEMPLATE_TEST_CASE("results do not depend on the number of threads", "[layers][attention][threads]", float, double) {
    using T = TestType;
    for (const Case& c : cases()) {
        INFO(c.name);
        const MultiHeadAttention<T> module = seeded_module<T>(c.config, 17);
        const RowMatrix<T> x = seeded_input<T>(33, c.config.d_model, 2);
        const RowMatrix<T> one = run(module, x, 1);
        for (int threads : {2, 3}) {
            CHECK((run(module, x, threads) - one).cwiseAbs().maxCoeff() == T(0));
        }
    }
}

TEST_CASE("heads stay on one thread when their work is below min_parallel_flops per thread",
          "[layers][attention][threads]") {
    std::vector<int> workspaces(3);
    // The size of the team the heads ran on (tasks are handed out dynamically, so which threads
    // get a task is up to the scheduler; the team is not): 1 when they stayed on the caller.
    const auto threads_used = [&](double flops, double min_flops_per_thread) {
        std::vector<int> team_of_head(8, 0);
        std::vector<std::ptrdiff_t> workspace_of_head(8, -1);
        const ExecutionContext context{3, min_flops_per_thread};
        detail::for_each_head(8, kQueryTile, flops, context, workspaces, [&](Index h, int& workspace, int) {
            workspace_of_head[static_cast<std::size_t>(h)] = &workspace - workspaces.data();
#if defined(DIFFATTN_HAS_OPENMP)
            team_of_head[static_cast<std::size_t>(h)] = omp_get_num_threads();
#else
            team_of_head[static_cast<std::size_t>(h)] = 1;
#endif
        });
        for (std::ptrdiff_t w : workspace_of_head) CHECK((w >= 0 && w < 3));  // every head ran, on a thread's own workspace
        return *std::max_element(team_of_head.begin(), team_of_head.end());
    };
    // Work for one and a half threads stays on one.
    CHECK(threads_used(1.5 * detail::kMinParallelFlopsPerThread, detail::kMinParallelFlopsPerThread) == 1);
    CHECK(detail::threads_for_work(3, 1.5 * detail::kMinParallelFlopsPerThread) == 1);
    CHECK(detail::threads_for_work(3, 2.5 * detail::kMinParallelFlopsPerThread) == 2);
    CHECK(detail::threads_for_work(3, 1e12) == 3);
    CHECK(detail::threads_for_work(3, 1.0, 0.0) == 3);
    CHECK(detail::threads_for_work(1, 1e12) == 1);
#if defined(DIFFATTN_HAS_OPENMP)
    CHECK(threads_used(1e12, detail::kMinParallelFlopsPerThread) > 1);
    CHECK(threads_used(1e6, 0.0) > 1);
#endif
}

TEST_CASE("a decode step's heads count the bytes of keys and values they read as work", "[layers][attention][threads]") {
    // bench_decode's DIFF model: D 256, 4 heads of two 32-wide maps, value heads of 64. Per key a
    // query row multiplies 8 query maps of 32 and 8 maps' probabilities by 64 values: 768 products.
    const AttentionConfig diff = make(AttentionKind::diff, 256, 4, 4);
    REQUIRE(diff.k_width() + diff.v_width() == 512);  // floats of keys and values per cached token
    // A prefill's heads: 2 N S x 768 flops, whatever they read.
    CHECK(detail::heads_work(diff, 64, 64, 4) == 2.0 * 64 * 64 * 768);
    // One token over 256 cached ones: 0.4 MFLOP, below two threads' worth, but 512 KB of keys and
    // values to read, which two threads read faster than one.
    const double products = 2.0 * 256 * 768;
    CHECK(detail::threads_for_work(2, products) == 1);
    CHECK(detail::heads_work(diff, 1, 256, 4) == detail::kFlopsPerByteRead * 256 * 512 * 4);
    CHECK(detail::threads_for_work(2, detail::heads_work(diff, 1, 256, 4)) == 2);
    // Half the bytes in an f16 cache; a short context stays on one thread.
    CHECK(detail::heads_work(diff, 1, 2048, 2) == detail::kFlopsPerByteRead * 2048 * 512 * 2);
    CHECK(detail::threads_for_work(2, detail::heads_work(diff, 1, 64, 4)) == 1);
    // A chunk of a few rows reads the same bytes; past about 5 rows its products weigh more.
    CHECK(detail::heads_work(diff, 2, 2048, 4) == detail::kFlopsPerByteRead * 2048 * 512 * 4);
    CHECK(detail::heads_work(diff, 7, 2048, 4) == 2.0 * 7 * 2048 * 768);
    // From kMinPackedRows rows on, only the products count, even where the bytes would weigh more
    // (softmax, keys and values in double: 64 doubles per token against 64 products per row).
    const AttentionConfig softmax = make(AttentionKind::softmax, 32, 4, 4);
    REQUIRE(softmax.k_width() + softmax.v_width() == 64);
    CHECK(detail::heads_work(softmax, 8, 100, 8) == 2.0 * 8 * 100 * 64);
    CHECK(detail::heads_work(softmax, 7, 100, 8) == detail::kFlopsPerByteRead * 100 * 64 * 8);
}

TEST_CASE("GQA pairing conventions differ for rep > 1 and coincide for rep = 1", "[layers][attention]") {
    for (Index kv_heads : {Index(2), Index(4)}) {
        AttentionConfig per_head = make(AttentionKind::diff, 64, 4, kv_heads, 1);
        AttentionConfig per_subhead = per_head;
        per_subhead.gqa_pairing = DiffGqaPairing::per_subhead;
        MultiHeadAttention<double> a = seeded_module<double>(per_head, 5);
        MultiHeadAttention<double> b(per_subhead);
        b.weights() = a.weights();
        const RowMatrix<double> x = seeded_input<double>(9, 64, 1);
        const double difference = (run(a, x) - run(b, x)).cwiseAbs().maxCoeff();
        if (kv_heads == 4) {
            CHECK(difference == 0.0);
        } else {
            CHECK(difference > 1e-6);
            // The head layout: per_head keeps K1 != K2; per_subhead gives both maps of head h key sub-head h.
            CHECK(per_head.key_map(3, 0) == 2);
            CHECK(per_head.key_map(3, 1) == 3);
            CHECK(per_subhead.key_map(3, 0) == 3);
            CHECK(per_subhead.key_map(3, 1) == 3);
            CHECK(per_head.value_head(3, 0) == 1);
        }
    }
}

TEST_CASE("a one-row call groups the heads that read the same keys and values", "[layers][attention]") {
    // The groups follow from docs/math.md §3's key maps: softmax and diff per_head share among the
    // rep = H / Hkv heads of a key/value head; per_subhead gives maps 2h and 2h+1 key sub-head
    // (2h + m) / rep, so only rep / 2 heads share both; diff_v2's query heads 2h, 2h+1 read kv head
    // (2h + m) / (2H / Hkv), shared by H / Hkv heads. Shared DIFF has no shared keys; DINT's
    // integral is per head. (N = 1 runs through these groups in the transcription test above.)
    CHECK(detail::heads_sharing_kv(make(AttentionKind::softmax, 64, 8, 2)) == 4);
    CHECK(detail::heads_sharing_kv(make(AttentionKind::softmax, 64, 8, 8)) == 1);
    CHECK(detail::heads_sharing_kv(make(AttentionKind::diff, 64, 8, 2)) == 4);
    AttentionConfig per_subhead = make(AttentionKind::diff, 64, 8, 2);
    per_subhead.gqa_pairing = DiffGqaPairing::per_subhead;
    CHECK(detail::heads_sharing_kv(per_subhead) == 2);
    per_subhead.n_kv_heads = 4;  // rep 2: both maps of head h read key sub-head h
    CHECK(detail::heads_sharing_kv(per_subhead) == 1);
    AttentionConfig v2 = make(AttentionKind::diff_v2, 64, 8, 2);
    v2.given_head_dim = 8;
    CHECK(detail::heads_sharing_kv(v2) == 4);
    CHECK(detail::heads_sharing_kv(make(AttentionKind::shared_diff, 64, 8, 8)) == 1);
    CHECK(detail::heads_sharing_kv(make(AttentionKind::dint, 64, 8, 2)) == 1);
    AttentionConfig gda = make(AttentionKind::gda, 64, 8, 2);  // its kernel runs a group's heads together
    gda.gda_group_ratio = 4;
    CHECK(detail::heads_sharing_kv(gda) == 1);
}

TEST_CASE("parameter counts: the official MultiheadDiffAttn figures", "[layers][attention][parameters]") {
    // MultiheadDiffAttn(embed_dim=1024, depth=0, num_heads=8): q, k, v, out 1024^2 each, 4 lambda
    // vectors of head_dim 64, subln of 128.
    AttentionConfig config = make(AttentionKind::diff, 1024, 8, 8);
    CHECK(config.parameter_count() == 4194688);
    config.n_kv_heads = 4;  // num_kv_heads=4: k and v shrink to 1024 x 512
    CHECK(config.parameter_count() == 3146112);
    MultiHeadAttention<float> module(config);
    ParameterList<float> list;
    module.collect_parameters("self_attn.", list);
    CHECK(list.parameter_count() == 3146112);
    CHECK(module.parameter_count() == 3146112);
    CHECK(list.items().size() == 4 + 4 + 1);
}

TEST_CASE("parameter counts: the documented formulas equal the tensors of every kind",
          "[layers][attention][parameters]") {
    for (const Case& c : cases()) {
        INFO(c.name);
        MultiHeadAttention<float> module(c.config);
        ParameterList<float> list;
        module.collect_parameters("", list);
        CHECK(list.parameter_count() == module.parameter_count());
        const Index D = c.config.d_model, H = c.config.n_heads, Hkv = c.config.kv_heads();
        const Index rep = H / Hkv, d = c.config.head_dim(), r = c.config.shared_diff_rank;
        Index formula = 0;
        switch (c.config.kind) {
            case AttentionKind::softmax: formula = 2 * D * D + 2 * D * D / rep; break;
            case AttentionKind::diff:
            case AttentionKind::dint: formula = 2 * D * D + 2 * D * D / rep + 6 * d; break;
            case AttentionKind::shared_diff: formula = 2 * d * D + 4 * H * r * (D + d) + 2 * D * D + 6 * d; break;
            case AttentionKind::diff_v2: formula = 2 * H * d * D + 2 * Hkv * d * D + H * d * D + H * D; break;
            case AttentionKind::gda:
                formula = (H + H / c.config.gda_group_ratio) * d * D + 4 * Hkv * d * D + 2 * H * d * D + 6 * d;
                break;
        }
        CHECK(module.parameter_count() == formula);
    }
}

TEST_CASE("bad attention configurations are ConfigErrors naming the key", "[layers][attention][errors]") {
    auto message_of = [](const AttentionConfig& c) {
        try {
            MultiHeadAttention<float> module(c);
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    using Catch::Matchers::Contains;
    CHECK_THAT(message_of(make(AttentionKind::diff, 30, 4, 4)), Contains("hidden_size"));
    CHECK_THAT(message_of(make(AttentionKind::softmax, 30, 4, 4)), Contains("hidden_size"));
    CHECK_THAT(message_of(make(AttentionKind::diff, 32, 4, 3)), Contains("num_key_value_heads"));
    CHECK_THAT(message_of(make(AttentionKind::diff, 32, 0, 0)), Contains("num_attention_heads"));
    CHECK_THAT(message_of(make(AttentionKind::diff_v2, 32, 4, 2)), Contains("head_dim"));
    AttentionConfig odd = make(AttentionKind::diff_v2, 32, 4, 2);
    odd.given_head_dim = 5;
    CHECK_THAT(message_of(odd), Contains("even"));
    CHECK_THAT(message_of(make(AttentionKind::diff, 24, 4, 4)), Contains("even"));  // d = 3
    AttentionConfig shared = make(AttentionKind::shared_diff, 32, 2, 2);
    CHECK_THAT(message_of(shared), Contains("shared_diff_rank"));
    shared.shared_diff_rank = 2;
    shared.n_kv_heads = 1;
    CHECK_THAT(message_of(shared), Contains("num_key_value_heads"));
    AttentionConfig global = make(AttentionKind::dint, 32, 2, 2);
    global.dint_integral = DintIntegral::global_mean;
    CHECK_THAT(message_of(global), Contains("global_mean") && Contains("causal"));
    global.causal = false;
    CHECK(message_of(global) == "no error");
    AttentionConfig theta = make(AttentionKind::diff, 32, 2, 2);
    theta.rope_theta = 0;
    CHECK_THAT(message_of(theta), Contains("rope_theta"));
    AttentionConfig gda = make(AttentionKind::gda, 48, 6, 1);  // d = 48 / 12 = 4
    CHECK_THAT(message_of(gda), Contains("gda_group_ratio (0) must be > 0"));
    gda.gda_group_ratio = 4;
    CHECK_THAT(message_of(gda), Contains("gda_group_ratio (4)") && Contains("divide num_attention_heads (6)"));
    gda.gda_group_ratio = 3;
    gda.n_kv_heads = 3;  // 2 noise heads, 3 kv heads
    CHECK_THAT(message_of(gda), Contains("num_key_value_heads (3) must divide the 2 noise heads"));
    gda.n_kv_heads = 2;
    CHECK(message_of(gda) == "no error");
}

TEST_CASE("forward checks its arguments", "[layers][attention][errors]") {
    const AttentionConfig config = make(AttentionKind::dint, 32, 2, 2);
    const MultiHeadAttention<double> module(config);
    AttentionScratch<double> scratch(config, 8);
    RowMatrix<double> x = RowMatrix<double>::Ones(8, 32), y(8, 32);
    CHECK_NOTHROW(module.forward(x, y, scratch));
    RowMatrix<double> too_long = RowMatrix<double>::Ones(9, 32), y9(9, 32);
    CHECK_THROWS_AS(module.forward(too_long, y9, scratch), ShapeError);
    RowMatrix<double> narrow = RowMatrix<double>::Ones(8, 31);
    CHECK_THROWS_AS(module.forward(narrow, y, scratch), ShapeError);
    RowMatrix<double> y_wrong(7, 32);
    CHECK_THROWS_AS(module.forward(x, y_wrong, scratch), ShapeError);
    CHECK_THROWS_AS(module.forward(x, x, scratch), ShapeError);  // out aliases x
    AttentionScratch<double> other(make(AttentionKind::softmax, 32, 2, 2), 8);
    CHECK_THROWS_AS(module.forward(x, y, other), ShapeError);
    // The same widths with another rope_theta: the scratch's rotary table holds other angles.
    AttentionConfig other_theta = config;
    other_theta.rope_theta = 500000.0;
    AttentionScratch<double> theta_scratch(other_theta, 8);
    CHECK_THROWS_WITH(module.forward(x, y, theta_scratch),
                      Catch::Contains("the scratch was built for another attention"));
    // Zero tokens is a no-op.
    RowMatrix<double> empty(0, 32), empty_out(0, 32);
    CHECK_NOTHROW(module.forward(empty, empty_out, scratch));
}

TEST_CASE("forward with a KV cache view refuses encoders and full views", "[layers][attention][errors]") {
    const AttentionConfig config = make(AttentionKind::diff, 32, 2, 2);
    const MultiHeadAttention<double> module(config);
    AttentionScratch<double> scratch(config, 4);
    RowMatrix<double> keys = RowMatrix<double>::Zero(8, config.k_width());
    RowMatrix<double> values = RowMatrix<double>::Zero(8, config.v_width());
    const RotaryTable<double> rotary(config.head_dim(), 8, config.rope_theta);
    const RowMatrix<double> x = seeded_input<double>(2, 32, 3);
    RowMatrix<double> y(2, 32), plain(2, 32);
    module.forward(x, plain, scratch);
    KvCacheView<double> view{HeadBlocks<double>::columns(keys, config.n_key_maps()),
                             HeadBlocks<double>::columns(values, config.n_value_heads()), 0, nullptr, &rotary};
    module.forward(x, y, scratch, ExecutionContext{}, &view);  // an empty cache: the plain forward
    CHECK(y == plain);
    // A view whose key maps are twice as wide as the module's.
    RowMatrix<double> wide_keys = RowMatrix<double>::Zero(8, 2 * config.k_width());
    KvCacheView<double> mismatched{HeadBlocks<double>::columns(wide_keys, config.n_key_maps()),
                                   HeadBlocks<double>::columns(values, config.n_value_heads()), 0, nullptr, &rotary};
    CHECK_THROWS_AS(module.forward(x, y, scratch, ExecutionContext{}, &mismatched), ShapeError);
    CHECK_THROWS_WITH(module.forward(x, y, scratch, ExecutionContext{}, &mismatched),
                      Catch::Contains("the KV cache has " + std::to_string(config.n_key_maps()) + " key maps of [8 x " +
                                      std::to_string(2 * config.head_dim()) + "]"));
    view.length = 7;  // 7 + 2 rows do not fit in 8
    CHECK_THROWS_WITH(module.forward(x, y, scratch, ExecutionContext{}, &view),
                      Catch::Contains("the KV cache holds 7 of at most 8 tokens; 2 more do not fit"));

    AttentionConfig encoder = config;
    encoder.causal = false;
    const MultiHeadAttention<double> encoder_module(encoder);
    view.length = 0;
    CHECK_THROWS_AS(encoder_module.forward(x, y, scratch, ExecutionContext{}, &view), OptionError);
    CHECK_THROWS_WITH(encoder_module.forward(x, y, scratch, ExecutionContext{}, &view),
                      Catch::Contains("MultiHeadAttention::forward") && Catch::Contains("bidirectional encoder"));
}

TEST_CASE("forward refuses a context with more threads than the scratch has workspaces",
          "[layers][attention][threads][errors]") {
    const AttentionConfig config = make(AttentionKind::softmax, 32, 2, 2);
    const MultiHeadAttention<double> module(config);
    AttentionScratch<double> scratch(config, 4, 1);  // workspaces for one thread
    const RowMatrix<double> x = RowMatrix<double>::Ones(4, 32);
    RowMatrix<double> y(4, 32);
    CHECK_NOTHROW(module.forward(x, y, scratch, ExecutionContext{1, 0.0}));
    CHECK_THROWS_AS(module.forward(x, y, scratch, ExecutionContext{0, 0.0}), OptionError);
#if defined(DIFFATTN_HAS_OPENMP)
    CHECK_THROWS_WITH(module.forward(x, y, scratch, ExecutionContext{2, 0.0}),
                      Catch::Contains("for_each_head: 2 threads but 1 workspaces"));
#endif
}

TEST_CASE("HeadBlocks: a cache's head-major blocks hold what the projections' column blocks hold",
          "[layers][kv_cache]") {
    // 3 heads of width 5, room for 7 rows; 4 rows written from 2 on, as a call's projections lay
    // them out (heads side by side).
    const Index heads = 3, width = 5, capacity = 7;
    RowMatrix<double> rows(4, heads * width);
    for (Index r = 0; r < rows.rows(); ++r) {
        for (Index c = 0; c < rows.cols(); ++c) rows(r, c) = static_cast<double>(100 * r + c);
    }
    RowMatrix<double> side_by_side = RowMatrix<double>::Zero(capacity, heads * width);
    RowMatrix<float> head_major = RowMatrix<float>::Zero(heads * capacity, width);
    const auto columns = HeadBlocks<double>::columns(side_by_side, heads);
    const auto blocks = HeadBlocks<float>::head_major(head_major, heads);
    CHECK(blocks.capacity == capacity);
    CHECK(blocks.total_width() == heads * width);
    columns.write_rows(2, rows);
    blocks.write_rows(2, rows);
    for (Index b = 0; b < heads; ++b) {
        // Head b's rows are one contiguous block of the head-major store...
        CHECK(head_major.middleRows(b * capacity + 2, 4) == rows.middleCols(b * width, width).cast<float>());
        // ...and the same values as column block b of the side-by-side store.
        CHECK(blocks.as_const().head(b, 0, capacity).cast<double>() == columns.head(b, 0, capacity));
    }
    CHECK(blocks.gather<double>(capacity) == side_by_side);
    CHECK(side_by_side.middleRows(2, 4) == rows);
    CHECK_THROWS_AS(HeadBlocks<double>::columns(side_by_side, 4), ShapeError);  // 15 columns, 4 heads
    CHECK_THROWS_AS(HeadBlocks<float>::head_major(head_major, 2), ShapeError);  // 21 rows, 2 heads
}
