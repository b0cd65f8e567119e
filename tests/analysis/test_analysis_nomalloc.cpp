// Built into test_nomalloc (EIGEN_RUNTIME_NO_MALLOC): attention analysis on a long context runs in
// O(N) memory. Once an AttentionAnalyzer exists for max_len tokens (its forward state and the O(N)
// rows of the streamed maps) and has run once, a run over N = 2048 tokens (256 under
// AddressSanitizer, below) allocates nothing, not through Eigen and not through operator new: no
// N x S map is ever formed, only the buffers whose size is linear in N
// (AttentionAnalyzer::bytes_per_token), for every kind and DINT integral, including DINT's causal
// integrals, which stream over every earlier row of A1.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/analysis/attention_analysis.hpp"
#include "../address_sanitizer.hpp"
#include "../model/small_configs.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace diffattn;
using namespace diffattn::analysis;

using diffattn::test::small_config;
using diffattn_nomalloc::without_malloc;

namespace {

// Under AddressSanitizer every load and store is checked, and DINT's causal integrals read
// O(N^2) entries per analysed row: 2,048 tokens took over ten minutes of the CI's sanitizer run.
// The property does not depend on N (nothing of size N x S may be formed at any N), so the
// sanitizer build checks it on 256 tokens (any allocation still fails it).
constexpr bool kSanitized = diffattn_test::kAddressSanitizer;

}  // namespace

TEMPLATE_TEST_CASE("analysis of a long context allocates nothing after its buffers", "[analysis][nomalloc]", float,
                   double) {
    using T = TestType;
    constexpr Index long_context = 2048;
    const Index n = kSanitized ? 256 : long_context;
    struct Case {
        AttentionKind kind;
        DintIntegral integral;
        bool causal;
    };
    for (const Case c : {Case{AttentionKind::softmax, DintIntegral::causal_softmax, true},
                         Case{AttentionKind::diff, DintIntegral::causal_softmax, true},
                         Case{AttentionKind::shared_diff, DintIntegral::causal_softmax, true},
                         Case{AttentionKind::diff_v2, DintIntegral::causal_softmax, true},
                         Case{AttentionKind::dint, DintIntegral::causal_softmax, true},
                         Case{AttentionKind::dint, DintIntegral::causal_mean, true},
                         Case{AttentionKind::dint, DintIntegral::global_mean, false}}) {
        INFO(to_string(c.kind) << " " << to_string(c.integral));
        ModelConfig config = small_config(c.kind, c.integral);
        config.causal = c.causal;
        const DecoderModel<T> model = DecoderModel<T>::seeded(config, 9);
        std::vector<Token> tokens;
        for (Index i = 0; i < n; ++i) tokens.push_back(static_cast<Token>((7 * i + 3) % config.vocab_size));
        // The last rows of the context (a retrieval question at its end), the answer early on.
        std::vector<AnalysisRow> rows;
        for (Index r : {n - 3, n - 1}) {
            AnalysisRow row;
            row.position = r;
            row.answer = {10, 11, 12};
            for (Index j = 13; j < r; j += 5) row.noise.push_back(j);
            rows.push_back(row);
        }
        AttentionAnalyzer<T> analyzer(config, n);
        AnalysisResult result;
        analyzer.run(model, tokens, rows, result);  // the first run sizes the result and the positions
        const double first_answer = result.at(1, 0, 1).measure.answer_share();
        CHECK(without_malloc([&] { analyzer.run(model, tokens, rows, result); }) == 0);
        INFO("first failure: " << diffattn_nomalloc::first_failure_text());
        CHECK(result.at(1, 0, 1).measure.answer_share() == first_answer);
        for (const HeadRowFigures& f : result.figures) {
            // softmax and dint rows sum to 1; diff and shared_diff to 1 - lambda, diff_v2 to 1 - gate.
            const bool unit = c.kind == AttentionKind::softmax || c.kind == AttentionKind::dint;
            const double expected_sum = unit ? 1.0 : 1.0 - f.weight;
            CHECK(std::abs(f.measure.row_sum - expected_sum) < 1e-9);
        }
    }
    // The buffers grow linearly: a token costs the same at any max_len, far below one N x S map row.
    const ModelConfig config = small_config(AttentionKind::dint);
    CHECK(AttentionAnalyzer<T>::bytes_per_token(config) < static_cast<std::size_t>(long_context) * sizeof(double));
}
