// WeightMatrix and its pool (core/weight_matrix.hpp, core/weight_pool.hpp): the value semantics of
// RowMatrix over storage that a model's matrices share, packed in 2 MB-aligned chunks.
#include "diffattn/core/weight_matrix.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>

using namespace diffattn;

namespace {
std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
}  // namespace

TEST_CASE("weight matrices start as zeros of their shape, also on recycled memory", "[layers][weights]") {
    // Memory just freed is handed out again: the zeros must be written, not assumed from fresh pages.
    for (const Index rows : {Index{3}, Index{64}, Index{1100}}) {  // 1100 rows: 4.3 MB, a chunk of its own
        {
            WeightMatrix<float> dirty(rows, 1024);
            dirty.setConstant(7.0f);
            CHECK(dirty(rows - 1, 1023) == 7.0f);
        }
        const WeightMatrix<float> m(rows, 1024);
        CHECK(m.rows() == rows);
        CHECK(m.cols() == 1024);
        CHECK(m.cwiseAbs().maxCoeff() == 0.0f);
    }
    const WeightMatrix<double> empty;
    CHECK(empty.size() == 0);
    CHECK(WeightMatrix<double>(0, 5).cols() == 5);
    CHECK_THROWS_WITH(WeightMatrix<float>(-1, 4), Catch::Contains("WeightMatrix: a shape of -1 x 4"));
    // Larger than any machine's memory: refused by name before the allocation, not std::bad_alloc.
    CHECK_THROWS_AS(WeightMatrix<float>(Index{1} << 40, Index{1} << 40), ShapeError);
    CHECK_THROWS_WITH(WeightMatrix<float>(Index{1} << 40, 4), Catch::Contains("WeightMatrix: 1099511627776 x 4 weights would take"));
}

TEST_CASE("weight matrices copy deeply and move their storage, as RowMatrix does", "[layers][weights]") {
    const RowMatrix<double> values = RowMatrix<double>::Random(5, 7);
    WeightMatrix<double> a = values;  // from an Eigen expression
    CHECK(a == values);

    WeightMatrix<double> copy = a;
    CHECK(copy.data() != a.data());
    copy(0, 0) += 1.0;
    CHECK(a == values);  // the original is untouched

    WeightMatrix<double> assigned(2, 2);
    assigned = a;  // another shape: new storage of a's shape
    CHECK(assigned.rows() == 5);
    CHECK(assigned == values);
    CHECK(assigned.data() != a.data());

    const double* storage = a.data();
    WeightMatrix<double> moved = std::move(a);
    CHECK(moved.data() == storage);
    CHECK(moved == values);
    CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): a moved-from matrix is empty

    // Assigning an expression that reads the matrix itself, of another shape: the source is read
    // before the old storage goes.
    moved = moved.leftCols(3);
    CHECK(moved.cols() == 3);
    CHECK(moved == values.leftCols(3));
    moved = moved.transpose();
    CHECK(moved == values.leftCols(3).transpose());

    // resize keeps the storage when the shape is the same, as Eigen's resize does.
    const double* before = moved.data();
    moved.resize(3, 5);
    CHECK(moved.data() == before);
    moved.resize(4, 4);
    CHECK(moved.rows() == 4);
    CHECK(moved.cols() == 4);

    // Eigen sees the pooled storage in place: a Ref binds without a copy.
    const Eigen::Ref<const RowMatrix<double>> ref(moved);
    CHECK(ref.data() == moved.data());
}

TEST_CASE("the pool packs small weight matrices one after another on 2 MB-aligned chunks", "[layers][weights]") {
    const WeightMatrix<float> first(33, 16);  // 2112 bytes: padded to 2112, a multiple of 64
    const WeightMatrix<float> second(3, 5);   // 60 bytes: padded to 64
    const WeightMatrix<float> third(8, 8);
    CHECK(address(first.data()) % WeightPool::kAlignment == 0);
    CHECK(address(second.data()) == address(first.data()) + 2112);
    CHECK(address(third.data()) == address(second.data()) + 64);

    // A matrix of a quarter chunk or more gets a 2 MB-aligned chunk of its own.
    const WeightMatrix<float> large(static_cast<Index>(WeightPool::kChunkBytes / 4 / sizeof(float)), 1);
    CHECK(address(large.data()) % kHugePageBytes == 0);
    const WeightMatrix<float> after(8, 8);
    CHECK(address(after.data()) == address(third.data()) + 256);  // the shared chunk goes on being filled
}

TEST_CASE("a chunk lives while any matrix in it does", "[layers][weights]") {
    // Under AddressSanitizer a chunk freed too early is a use after free here.
    WeightMatrix<double> survivor;
    {
        WeightMatrix<double> neighbour(64, 64);
        survivor = WeightMatrix<double>(16, 16);
        neighbour.setConstant(1.0);
    }
    survivor.setConstant(2.0);
    CHECK(survivor.sum() == 2.0 * 256);
}
