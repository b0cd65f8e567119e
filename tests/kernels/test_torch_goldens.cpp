// Fast kernels against outputs of an independent float64 PyTorch transcription of docs/math.md §1-2
// (tools/torch_reference.py; files described in tests/data/kernels/README.md).
#include <diffattn/diffattn.hpp>

#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)

#include <catch2/catch.hpp>

#include <iostream>
#include <string>

#ifndef DIFFATTN_TEST_DATA_DIR
#define DIFFATTN_TEST_DATA_DIR "tests/data"
#endif

namespace {

using namespace diffattn;

std::string kernel_file(const std::string& name) { return std::string(DIFFATTN_TEST_DATA_DIR) + "/kernels/" + name; }

/// The inputs of one golden case in scalar type T.
template <typename T>
struct GoldenCase {
    explicit GoldenCase(const std::string& name) : file(kernel_file(name)) {
        q1 = file.matrix<T>("q1");
        k1 = file.matrix<T>("k1");
        q2 = file.matrix<T>("q2");
        k2 = file.matrix<T>("k2");
        v = file.matrix<T>("v");
        lambda = file.vector<T>("lambda")[0];
        scale = file.vector<double>("scale")[0];
    }
    RowMatrix<T> expected(const std::string& name) const { return file.matrix<T>(name); }

    SafetensorsFile file;
    RowMatrix<T> q1, k1, q2, k2, v;
    T lambda;
    double scale;
};

/// Largest difference allowed against a float64 golden: the docs/math.md §7 criterion's constant for
/// float (inputs are O(1), S <= 9, so the plain float transcription errs by < 1e-6), and a few
/// ulps of double.
template <typename T>
double tolerance() {
    return sizeof(T) == sizeof(float) ? 4e-6 : 1e-13;
}

template <typename T>
void require_close(const RowMatrix<T>& actual, const RowMatrix<T>& expected, const std::string& what) {
    REQUIRE(actual.rows() == expected.rows());
    REQUIRE(actual.cols() == expected.cols());
    const double error = (actual - expected).cwiseAbs().maxCoeff();
    INFO(what << ": max |fast - torch golden| = " << error);
    CHECK(error <= tolerance<T>());
}

}  // namespace

TEMPLATE_TEST_CASE("kernels match the PyTorch goldens: causal with a KV cache", "[kernels][golden]", float, double) {
    using T = TestType;
    for (const std::string name : {"causal_cache.safetensors", "causal_decode.safetensors"}) {
        const GoldenCase<T> g(name);
        const Index seq_len_kv = g.k1.rows();
        const Index cached = static_cast<Index>(g.file.template vector<double>("hist_rows")[0]);
        const Index seq_len_q = seq_len_kv - cached;
        const RowMatrix<T> q1_new = g.q1.bottomRows(seq_len_q), q2_new = g.q2.bottomRows(seq_len_q);
        AttentionOptions options;  // causal
        options.scale = g.scale;
        RowMatrix<T> out(seq_len_q, g.v.cols());

        softmax_attention(q1_new, g.k1, g.v, out, options);
        require_close<T>(out, g.expected("softmax"), name + " softmax");
        diff_attention(q1_new, g.k1, q2_new, g.k2, g.v, g.lambda, out, options);
        require_close<T>(out, g.expected("diff"), name + " diff");

        for (const auto& [integral, tensor] : {std::pair{DintIntegral::causal_softmax, "dint_causal_softmax"},
                                               std::pair{DintIntegral::causal_mean, "dint_causal_mean"}}) {
            // History from the golden's own docs/math.md §6 state ...
            DintHistory<T> given;
            given.rows = cached;
            given.a1_column_sum = g.file.template vector<T>("hist_a1_colsum");
            given.o1_row_sum = g.file.template vector<T>("hist_o1_sum");
            dint_attention(q1_new, g.k1, q2_new, g.k2, g.v, g.lambda, integral, out, options, &given);
            require_close<T>(out, g.expected(tensor), name + " " + tensor + " (golden history)");
            CHECK(given.rows == seq_len_kv);

            // ... and from running the kernel over the cached rows first.
            DintHistory<T> built;
            RowMatrix<T> prefix_out(cached, g.v.cols());
            dint_attention(g.q1.topRows(cached), g.k1.topRows(cached), g.q2.topRows(cached), g.k2.topRows(cached),
                           g.v.topRows(cached), g.lambda, integral, prefix_out, options, &built);
            if (integral == DintIntegral::causal_softmax) {
                const Vector<T> golden_sums = g.file.template vector<T>("hist_a1_colsum");
                CHECK((built.a1_column_sum.head(cached) - golden_sums).cwiseAbs().maxCoeff() <=
                      tolerance<T>() * double(cached));
            }
            dint_attention(q1_new, g.k1, q2_new, g.k2, g.v, g.lambda, integral, out, options, &built);
            require_close<T>(out, g.expected(tensor), name + " " + tensor + " (kernel-built history)");

            // The whole sequence in one call equals the *_full golden.
            RowMatrix<T> full(seq_len_kv, g.v.cols());
            dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, integral, full, options);
            require_close<T>(full, g.expected(std::string(tensor) + "_full"), name + " " + tensor + "_full");
        }
    }
}

TEMPLATE_TEST_CASE("kernels match the PyTorch goldens: no mask, padding, scale", "[kernels][golden]", float, double) {
    using T = TestType;
    {
        const GoldenCase<T> g("none_full.safetensors");
        AttentionOptions options;
        options.mask = MaskKind::none;
        RowMatrix<T> out(g.q1.rows(), g.v.cols());
        softmax_attention(g.q1, g.k1, g.v, out, options);
        require_close<T>(out, g.expected("softmax"), "none softmax");
        diff_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, out, options);
        require_close<T>(out, g.expected("diff"), "none diff");
        dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, DintIntegral::global_mean, out, options);
        require_close<T>(out, g.expected("dint_global_mean"), "none dint_global_mean");
    }
    {
        const GoldenCase<T> g("padding.safetensors");
        AttentionOptions options;
        options.valid_len = static_cast<Index>(g.file.template vector<double>("valid_len")[0]);
        RowMatrix<T> out(g.q1.rows(), g.v.cols());
        for (const MaskKind mask : {MaskKind::none, MaskKind::causal}) {
            options.mask = mask;
            const std::string suffix = mask == MaskKind::none ? "_none" : "_causal";
            softmax_attention(g.q1, g.k1, g.v, out, options);
            require_close<T>(out, g.expected("softmax" + suffix), "padding softmax" + suffix);
            diff_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, out, options);
            require_close<T>(out, g.expected("diff" + suffix), "padding diff" + suffix);
        }
        options.mask = MaskKind::none;
        dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, DintIntegral::global_mean, out, options);
        require_close<T>(out, g.expected("dint_global_mean_none"), "padding dint_global_mean_none");
        options.mask = MaskKind::causal;
        dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, DintIntegral::causal_softmax, out, options);
        require_close<T>(out, g.expected("dint_causal_softmax_causal"), "padding dint_causal_softmax_causal");
        dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, DintIntegral::causal_mean, out, options);
        require_close<T>(out, g.expected("dint_causal_mean_causal"), "padding dint_causal_mean_causal");
    }
    {
        const GoldenCase<T> g("scale.safetensors");
        AttentionOptions options;
        options.scale = g.scale;
        REQUIRE(g.scale == Approx(0.7));
        RowMatrix<T> out(g.q1.rows(), g.v.cols());
        softmax_attention(g.q1, g.k1, g.v, out, options);
        require_close<T>(out, g.expected("softmax"), "scale softmax");
        diff_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, out, options);
        require_close<T>(out, g.expected("diff"), "scale diff");
        dint_attention(g.q1, g.k1, g.q2, g.k2, g.v, g.lambda, DintIntegral::causal_softmax, out, options);
        require_close<T>(out, g.expected("dint_causal_softmax"), "scale dint_causal_softmax");
    }
}
