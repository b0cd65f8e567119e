// Ranking logits (model/logit_ranking.hpp): a total order, so NaN logits give a defined answer:
// larger first, every NaN after every number (-infinity included), ties by the lower id. The
// greedy argmax of generation is the first of the same ranking.
#include "model_files.hpp"

#include "diffattn/model/generate.hpp"
#include "diffattn/model/logit_ranking.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

using namespace diffattn;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("top_logits ranks NaN last, whatever its place", "[model][ranking]") {
    // Every third logit NaN: a comparator `a > b` is not a strict weak ordering here, and
    // std::partial_sort with it put NaN and -2.59 into a top-5 without the largest values.
    Vector<float> logits(256);
    for (Index i = 0; i < logits.size(); ++i) {
        logits(i) = i % 3 == 0 ? kNaN : 3.0f * std::sin(0.37f * static_cast<float>(i * i));
    }
    const std::vector<Index> expected = model_test::ranking_by_sort(logits);
    for (Index k : {Index(0), Index(1), Index(5), Index(100), Index(256), Index(300)}) {
        INFO("k = " << k);
        const std::vector<Index> top = top_logits(logits, k);
        CHECK(top == std::vector<Index>(expected.begin(), expected.begin() + std::min<Index>(k, 256)));
    }
    CHECK(argmax_token(logits) == expected.front());
    CHECK(top_logit(logits) == expected.front());
}

TEST_CASE("top_logits: infinities, ties and rows that are all NaN", "[model][ranking]") {
    Vector<float> logits(6);
    logits << kNaN, -kInf, 2.0f, kInf, 2.0f, kNaN;
    CHECK(top_logits(logits, 6) == std::vector<Index>{3, 2, 4, 1, 0, 5});
    CHECK(argmax_token(logits) == 3);
    logits(3) = kNaN;
    CHECK(argmax_token(logits) == 2);  // equal logits: the lower id
    const Vector<float> nan = Vector<float>::Constant(4, kNaN);
    CHECK(top_logits(nan, 2) == std::vector<Index>{0, 1});
    CHECK(argmax_token(nan) == 0);
    const Vector<float> minus_infinity_after_nan = (Vector<float>(2) << kNaN, -kInf).finished();
    CHECK(argmax_token(minus_infinity_after_nan) == 1);
    CHECK_THROWS_AS(top_logits(logits, -1), ShapeError);
    CHECK_THROWS_AS(argmax_token(Vector<float>()), ShapeError);
    // Rows of a matrix, as generate() and the example pass them.
    RowMatrix<double> matrix(2, 3);
    matrix << 1, 5, std::nan(""), 7, std::nan(""), 7;
    CHECK(argmax_token(matrix.row(0)) == 1);
    CHECK(top_logits(matrix.row(1), 3) == std::vector<Index>{0, 2, 1});
}

TEST_CASE("greedy generation with NaN logits picks the largest number", "[model][ranking][generate]") {
    // lm_head rows 0, 3, 6, ... NaN: those logits are NaN at every position; the others finite.
    const ModelConfig config = test::tiny_config(AttentionKind::diff, 40);
    DecoderModel<double> model = DecoderModel<double>::seeded(config, 9);
    for (Index v = 0; v < config.vocab_size; v += 3) model.lm_head.dense().row(v).setConstant(std::nan(""));
    std::vector<Token> sequence = {1, 2, 3};
    const std::vector<Token> generated = generate(model, sequence, 5, true);
    CHECK(generate(model, sequence, 5, false) == generated);
    for (Token id : generated) {
        const RowMatrix<double> logits = model.logits(sequence);
        const auto last = logits.row(logits.rows() - 1);
        Index best = -1;
        for (Index v = 0; v < last.size(); ++v) {
            if (!std::isnan(last(v)) && (best < 0 || last(v) > last(best))) best = v;
        }
        CHECK(id == best);
        CHECK(id % 3 != 0);
        sequence.push_back(id);
    }
}
