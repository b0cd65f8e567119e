// Built into test_nomalloc (EIGEN_RUNTIME_NO_MALLOC): once a Sampler is made (its scratch sized
// for the vocabulary), choosing tokens allocates nothing, greedy or sampled, with top-k and top-p
// or without, from float or double logits, rows of a logits matrix included.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/sampler.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace diffattn;

using diffattn_nomalloc::without_malloc;

TEMPLATE_TEST_CASE("choosing a token allocates nothing after the sampler is made", "[model][sampler][nomalloc]", float,
                   double) {
    using T = TestType;
    constexpr Index vocab = 5000;
    RowMatrix<T> logits(3, vocab);
    for (Index i = 0; i < logits.size(); ++i) logits.data()[i] = static_cast<T>(4.0 * std::sin(0.37 * static_cast<double>(i * i)));
    logits(1, 17) = std::numeric_limits<T>::quiet_NaN();
    struct Case {
        double temperature;
        Index top_k;
        double top_p;
    };
    for (const Case& c : {Case{0.0, 0, 1.0}, Case{0.8, 0, 1.0}, Case{0.8, 40, 1.0}, Case{0.8, 0, 0.9},
                          Case{1.3, 100, 0.95}, Case{1.0, vocab + 1, 0.5}}) {
        INFO("temperature " << c.temperature << ", top_k " << c.top_k << ", top_p " << c.top_p);
        Sampler sampler(SamplingOptions{c.temperature, c.top_k, c.top_p, 9}, vocab);
        std::vector<Index> tokens;
        tokens.reserve(30);
        const Vector<T> column = logits.row(2).transpose();
        CHECK(without_malloc([&] {
            for (int i = 0; i < 10; ++i) {
                tokens.push_back(sampler.sample(logits.row(0)));
                tokens.push_back(sampler.sample(logits.row(1)));
                tokens.push_back(sampler.sample(column));
            }
        }) == 0);
        INFO("first failure: " << diffattn_nomalloc::first_failure_text());
        CHECK(tokens.size() == 30);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            CHECK((tokens[i] >= 0 && tokens[i] < vocab));
            if (i % 3 == 1) CHECK(tokens[i] != 17);  // row 1's NaN logit
        }
    }
}
