// add_merged_row (kernels/online_softmax.hpp): online-softmax states of the same query rows over
// disjoint runs of keys, merged, give the softmax output over all the keys (the key split DINT's
// causal_softmax integral uses on several threads). Checked against the softmax written out in
// Wide<T>, with rows that see no key of some runs, rows that see no key at all, and a NaN; the same
// for OnlineSoftmaxState::merge, which folds such states into one (the distributed kernels).
#include "test_support.hpp"

#include "diffattn/kernels/online_softmax.hpp"

#include <cmath>
#include <limits>
#include <vector>

using namespace diffattn;
using namespace diffattn::test;

namespace {

/// Scaled logits [rows x keys], values [keys x value_dim], and the keys each row sees: a prefix
/// [0, key_end[r]) (docs/math.md §1's masks are prefixes).
template <typename T>
struct SplitCase {
    RowMatrix<T> logits, values;
    std::vector<Index> key_end;
};

/// The state of rows [0, rows) over the keys [begin, end), folded the way the core folds a tile.
template <typename T>
OnlineSoftmaxState<T> state_over(const SplitCase<T>& c, Index begin, Index end) {
    const Index rows = c.logits.rows(), keys = end - begin, value_dim = c.values.cols();
    OnlineSoftmaxState<T> state;
    state.reserve(rows, value_dim);
    state.reset(rows, value_dim);
    // fold() needs rows padded to a whole SIMD packet: 16 columns of padding cover AVX-512 floats.
    RowMatrix<T> tile(rows, keys + 16);
    tile.leftCols(keys) = c.logits.middleCols(begin, keys);
    auto probabilities = tile.leftCols(keys);
    state.fold(0, probabilities, true, [&](Index r) { return std::clamp<Index>(c.key_end[r] - begin, 0, keys); });
    state.accumulator_rows(0, rows).noalias() += probabilities * c.values.middleRows(begin, keys);
    return state;
}

/// scale * softmax over the visible keys, times V, in Wide<T>; rows that see no key stay `unseen`.
template <typename T>
RowMatrix<Wide<T>> expected_rows(const SplitCase<T>& c, T scale, Wide<T> unseen) {
    using W = Wide<T>;
    RowMatrix<W> out = RowMatrix<W>::Constant(c.logits.rows(), c.values.cols(), unseen);
    for (Index r = 0; r < c.logits.rows(); ++r) {
        const Index n = c.key_end[r];
        if (n == 0) continue;
        const auto logits = c.logits.row(r).head(n).template cast<W>();
        const Eigen::Matrix<W, 1, Eigen::Dynamic> weights = (logits.array() - logits.maxCoeff()).exp().matrix();
        out.row(r) = W(scale) * (weights / weights.sum()) * c.values.topRows(n).template cast<W>();
    }
    return out;
}

/// The case both tests split: 9 rows, 40 keys, values of width 5. Row 0 sees nothing; rows 1-2
/// see only the first run of keys; the others end inside or after later runs.
template <typename T>
SplitCase<T> nine_rows(std::mt19937& rng) {
    SplitCase<T> c{random_matrix<T>(rng, 9, 40, -6.0, 6.0), random_matrix<T>(rng, 40, 5), {}};
    c.key_end = {0, 3, 7, 8, 19, 25, 33, 40, 40};
    return c;
}

}  // namespace

TEMPLATE_TEST_CASE("add_merged_row: states over disjoint runs of keys merge into the softmax over all of them",
                   "[kernels][online_softmax]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    const Index rows = 9, keys = 40, value_dim = 5;
    SplitCase<T> c = nine_rows<T>(rng);
    const T scale = T(0.75), unseen = T(7);
    const std::vector<Index> run_ends = {8, 20, 21, 40};  // runs [0, 8), [8, 20), [20, 21), [21, 40)
    std::vector<OnlineSoftmaxState<T>> parts;
    for (std::size_t i = 0, begin = 0; i < run_ends.size(); begin = static_cast<std::size_t>(run_ends[i++])) {
        parts.push_back(state_over(c, static_cast<Index>(begin), run_ends[i]));
    }
    // add_merged_row adds to the row; row 0 (no key anywhere) must be left as it is.
    RowMatrix<T> merged = RowMatrix<T>::Zero(rows, value_dim);
    merged.row(0).setConstant(unseen);
    for (Index r = 0; r < rows; ++r) add_merged_row(parts.data(), static_cast<Index>(parts.size()), r, scale, merged.row(r));
    RowMatrix<W> expected = expected_rows(c, scale, W(unseen));
    // One state over all keys, normalised the usual way, is the same computation in one piece.
    const OnlineSoftmaxState<T> whole = state_over(c, 0, keys);
    const long double tolerance = 64 * std::numeric_limits<T>::epsilon();
    for (Index r = 0; r < rows; ++r) {
        INFO("row " << r << " sees " << c.key_end[static_cast<std::size_t>(r)] << " keys");
        const auto error = (merged.row(r).template cast<W>() - expected.row(r)).cwiseAbs().maxCoeff();
        CHECK(static_cast<long double>(error) <= tolerance);
        if (r > 0) {
            const RowMatrix<T> one_state = scale * whole.normalized_row(r);
            CHECK(static_cast<long double>((one_state.template cast<W>() - expected.row(r)).cwiseAbs().maxCoeff()) <=
                  tolerance);
        }
    }
    CHECK((merged.row(0).array() == unseen).all());

    // A NaN logit in one run reaches its whole row and no other.
    c.logits(5, 10) = std::numeric_limits<T>::quiet_NaN();
    parts[1] = state_over(c, 8, 20);
    RowMatrix<T> with_nan = RowMatrix<T>::Zero(rows, value_dim);
    for (Index r = 0; r < rows; ++r) add_merged_row(parts.data(), static_cast<Index>(parts.size()), r, scale, with_nan.row(r));
    CHECK(with_nan.row(5).array().isNaN().all());
    for (Index r = 0; r < rows; ++r) {
        if (r != 5) CHECK_FALSE(with_nan.row(r).array().isNaN().any());
    }
}

TEMPLATE_TEST_CASE("OnlineSoftmaxState::merge: folding key-split states in keeps the softmax over all keys",
                   "[kernels][online_softmax]", float, double) {
    using T = TestType;
    using W = Wide<T>;
    DIFFATTN_TEST_RNG(rng);
    const Index rows = 9, value_dim = 5;
    SplitCase<T> c = nine_rows<T>(rng);
    const std::vector<Index> run_ends = {8, 20, 21, 40};
    // Merge the runs in a scrambled order into a state that starts empty (as the ring's totals do).
    OnlineSoftmaxState<T> merged;
    merged.reserve(rows, value_dim);
    merged.reset(rows, value_dim);
    for (const std::size_t i : {2u, 0u, 3u, 1u}) {
        merged.merge(state_over(c, i == 0 ? 0 : run_ends[i - 1], run_ends[i]));
    }
    const RowMatrix<W> expected = expected_rows(c, T(1), W(0));
    const long double tolerance = 64 * std::numeric_limits<T>::epsilon();
    for (Index r = 0; r < rows; ++r) {
        INFO("row " << r << " sees " << c.key_end[static_cast<std::size_t>(r)] << " keys");
        const RowMatrix<T> row = merged.normalized_row(r);
        CHECK(static_cast<long double>((row.template cast<W>() - expected.row(r)).cwiseAbs().maxCoeff()) <= tolerance);
    }
    CHECK(merged.row_sum(0) == T(0));  // a row that saw no key normalises to zeros

    // A NaN logit in one run reaches its whole row and no other.
    c.logits(5, 10) = std::numeric_limits<T>::quiet_NaN();
    OnlineSoftmaxState<T> with_nan;
    with_nan.reserve(rows, value_dim);
    with_nan.reset(rows, value_dim);
    for (std::size_t i = 0; i < run_ends.size(); ++i) with_nan.merge(state_over(c, i == 0 ? 0 : run_ends[i - 1], run_ends[i]));
    for (Index r = 0; r < rows; ++r) {
        const RowMatrix<T> row = with_nan.normalized_row(r);
        if (r == 5) {
            CHECK(row.array().isNaN().all());
        } else {
            CHECK_FALSE(row.array().isNaN().any());
        }
    }
}
