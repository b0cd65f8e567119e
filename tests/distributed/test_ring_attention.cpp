// The sequence-parallel kernels (include/diffattn/distributed/ring_attention.hpp) against the
// single-process kernels and the plain reference, under mpirun -np 2 and -np 3: every kernel, every
// DINT integral, causal and none, uneven slices, float and double (docs/math.md §7).
#include "../kernels/test_support.hpp"

#include "diffattn/distributed/ring_attention.hpp"

#include <mpi.h>

#include <string>
#include <vector>

namespace {

using namespace diffattn;
using namespace diffattn::test;
using diffattn::distributed::RingAttention;

enum class Kernel { softmax, diff, dint };

int world_rank() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}
int world_size() {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

/// Uneven slices: rank r gets a share that grows with r, the last rank the rest.
std::vector<Index> uneven_slices(Index length, int ranks) {
    std::vector<Index> begin{0};
    for (int r = 1; r < ranks; ++r) begin.push_back(length * (r * r + r) / (ranks * ranks + ranks) + 7 * r);
    begin.push_back(length);
    return begin;
}

template <typename T>
void check_case(Kernel kernel, MaskKind mask, DintIntegral integral, Index length) {
    const int rank = world_rank(), ranks = world_size();
    std::mt19937 rng(kDefaultSeed + static_cast<std::uint32_t>(length));  // the same inputs on every rank
    const Index d = 16, dv = 32;
    const RowMatrix<T> q1 = random_matrix<T>(rng, length, d, -2, 2), k1 = random_matrix<T>(rng, length, d, -2, 2);
    const RowMatrix<T> q2 = random_matrix<T>(rng, length, d, -2, 2), k2 = random_matrix<T>(rng, length, d, -2, 2);
    const RowMatrix<T> v = random_matrix<T>(rng, length, dv);
    const T lambda = T(0.3);
    AttentionOptions options;
    options.mask = mask;

    // One process on the whole sequence: the fast kernel, the plain reference in T and in Wide<T>.
    RowMatrix<T> whole(length, dv);
    RowMatrix<T> plain;
    RowMatrix<Wide<T>> oracle;
    const auto wide = [](const RowMatrix<T>& m) { return cast_to<Wide<T>>(m); };
    switch (kernel) {
        case Kernel::softmax:
            softmax_attention(q1, k1, v, whole, options);
            plain = reference::softmax_attention<T>(q1, k1, v, options);
            oracle = reference::softmax_attention<Wide<T>>(wide(q1), wide(k1), wide(v), options);
            break;
        case Kernel::diff:
            diff_attention(q1, k1, q2, k2, v, lambda, whole, options);
            plain = reference::diff_attention<T>(q1, k1, q2, k2, v, lambda, options);
            oracle = reference::diff_attention<Wide<T>>(wide(q1), wide(k1), wide(q2), wide(k2), wide(v), lambda, options);
            break;
        case Kernel::dint:
            dint_attention(q1, k1, q2, k2, v, lambda, integral, whole, options);
            plain = reference::dint_attention<T>(q1, k1, q2, k2, v, lambda, integral, options);
            oracle = reference::dint_attention<Wide<T>>(wide(q1), wide(k1), wide(q2), wide(k2), wide(v), lambda,
                                                         integral, options);
            break;
    }

    // This rank's slice, through the ring.
    const std::vector<Index> begin = uneven_slices(length, ranks);
    const Index first = begin[static_cast<std::size_t>(rank)], rows = begin[static_cast<std::size_t>(rank) + 1] - first;
    RingAttention<T> ring(MPI_COMM_WORLD, first);
    RowMatrix<T> mine(rows, dv);
    const auto slice = [&](const RowMatrix<T>& m) { return ConstMatrixRef<T>(m.middleRows(first, rows)); };
    switch (kernel) {
        case Kernel::softmax: ring.softmax(slice(q1), slice(k1), slice(v), mine, options); break;
        case Kernel::diff: ring.diff(slice(q1), slice(k1), slice(q2), slice(k2), slice(v), lambda, mine, options); break;
        case Kernel::dint:
            ring.dint(slice(q1), slice(k1), slice(q2), slice(k2), slice(v), lambda, integral, mine, options);
            break;
    }

    const RowMatrix<T> plain_rows = plain.middleRows(first, rows);
    const RowMatrix<Wide<T>> oracle_rows = oracle.middleRows(first, rows);
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " kernel " +
                             std::to_string(static_cast<int>(kernel)) + " integral " +
                             std::to_string(static_cast<int>(integral)) + " mask " +
                             std::to_string(static_cast<int>(mask)) + " rank " + std::to_string(rank) + " of " +
                             std::to_string(ranks) + ", rows [" + std::to_string(first) + ", " +
                             std::to_string(first + rows) + ") of " + std::to_string(length);
    check_spec7<T>(what + " vs reference", mine, plain_rows, oracle_rows);
    // And within the same tolerance of the single-process kernel on the whole sequence.
    const Accuracy accuracy = spec7_accuracy<T>(mine, plain_rows, oracle_rows);
    INFO(what << ": max |ring - single process| " << static_cast<double>(max_abs_diff(mine, whole.middleRows(first, rows)))
              << ", tolerance " << static_cast<double>(accuracy.tolerance));
    CHECK(max_abs_diff(mine, whole.middleRows(first, rows)) <= accuracy.tolerance);
}

template <typename T>
void check_every_kernel(Index length) {
    for (const MaskKind mask : {MaskKind::causal, MaskKind::none}) {
        check_case<T>(Kernel::softmax, mask, DintIntegral::causal_softmax, length);
        check_case<T>(Kernel::diff, mask, DintIntegral::causal_softmax, length);
        for (const DintIntegral integral : kDintIntegrals) {
            if (integral == DintIntegral::global_mean && mask == MaskKind::causal) continue;
            check_case<T>(Kernel::dint, mask, integral, length);
        }
    }
}

TEST_CASE("ring kernels equal the single-process kernels, float", "[distributed]") {
    check_every_kernel<float>(611);   // several query groups and key tiles per slice
    check_every_kernel<float>(40);    // slices shorter than one query block
}

TEST_CASE("balanced_slices gives every rank the same work, rows weighed by their cost", "[distributed]") {
    // Causal: rows [a, b) cost about b^2 - a^2 map-pass work, times the rank's cost per row.
    const Index n = 1 << 20;
    const std::vector<double> cost = distributed::dint_rank_costs(DintIntegral::causal_softmax, 4);
    REQUIRE(cost == std::vector<double>{3.0, 4.0, 4.0, 3.0});
    const distributed::SequenceSlices causal = distributed::balanced_slices(n, 4, true, cost);
    REQUIRE(causal.length() == n);
    std::vector<double> work;
    for (int r = 0; r < 4; ++r) {
        const double a = static_cast<double>(causal.first(r)), b = static_cast<double>(causal.first(r + 1));
        work.push_back(cost[static_cast<std::size_t>(r)] * (b * b - a * a));
    }
    for (double w : work) CHECK(w == Approx(work[0]).epsilon(1e-5));
    // Equal costs: the boundaries n sqrt(r / R), as without costs.
    const distributed::SequenceSlices plain = distributed::balanced_slices(n, 4, true, {2.0, 2.0, 2.0, 2.0});
    CHECK(plain.begin == distributed::balanced_slices(n, 4, true).begin);
    CHECK(plain.first(1) == 524288);  // n sqrt(1/4)
    CHECK(plain.first(2) == 741455);  // round(n sqrt(1/2))
    // Mask none: rows in proportion to 1 / cost (1/3 : 1/4 : 1/4 : 1/3 of 7/6).
    const distributed::SequenceSlices none = distributed::balanced_slices(1400, 4, false, cost);
    CHECK(none.begin == std::vector<Index>{0, 400, 700, 1000, 1400});
    // Two ranks: no middle rank, equal costs.
    CHECK(distributed::dint_rank_costs(DintIntegral::causal_softmax, 2) == std::vector<double>{3.0, 3.0});
    CHECK(distributed::dint_rank_costs(DintIntegral::causal_mean, 3) == std::vector<double>{2.0, 2.0, 2.0});
}

TEST_CASE("ring kernels equal the single-process kernels, double", "[distributed]") {
    check_every_kernel<double>(611);
}

TEST_CASE("ring kernels refuse mismatched slices on every rank", "[distributed]") {
    const int rank = world_rank();
    if (world_size() < 2) return;  // the mismatches are between ranks
    const Index rows = 20 + rank, d = 8;
    RowMatrix<double> q = RowMatrix<double>::Ones(rows, d), v = RowMatrix<double>::Ones(rows, 2 * d);
    RowMatrix<double> k = RowMatrix<double>::Ones(rank == 1 ? rows + 3 : rows, d);
    RowMatrix<double> kv = RowMatrix<double>::Ones(k.rows(), 2 * d);
    RowMatrix<double> out(rows, 2 * d);
    RingAttention<double> ring(MPI_COMM_WORLD);
    // Rank 1's K holds 3 rows more than its Q: every rank throws, naming rank 1 and its rows.
    CHECK_THROWS_WITH(ring.softmax(q, k, kv.topRows(k.rows()), out),
                      Catch::Contains("rank 1 holds 21 query rows but 24 key rows"));
    // Head dims that differ across ranks.
    RowMatrix<double> q_wide = RowMatrix<double>::Ones(rows, rank == 0 ? d : d + 2);
    RowMatrix<double> k_wide = RowMatrix<double>::Ones(rows, q_wide.cols());
    CHECK_THROWS_AS(ring.softmax(q_wide, k_wide, v, out), ShapeError);
    // A rank whose own checks fail (out of the wrong shape) throws its own error; the others name it.
    RowMatrix<double> bad_out(rank == 0 ? rows + 1 : rows, 2 * d);
    if (rank == 0) {
        CHECK_THROWS_AS(ring.softmax(q, q, v, bad_out), ShapeError);
    } else {
        CHECK_THROWS_WITH(ring.softmax(q, q, v, bad_out), Catch::Contains("rank 0 of"));
    }
    // A slice that does not start where the ranks before end.
    RingAttention<double> misplaced(MPI_COMM_WORLD, rank == 0 ? 0 : 5);
    CHECK_THROWS_AS(misplaced.softmax(q, q, v, out), OptionError);
    // Key padding is not split across ranks.
    AttentionOptions padded;
    padded.valid_len = 3;
    CHECK_THROWS_AS(ring.softmax(q, q, v, out, padded), OptionError);
}

}  // namespace
