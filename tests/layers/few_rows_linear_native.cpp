// detail::few_rows_linear compiled for the build machine's vector ISA (diffattn::native, as the
// examples and benchmarks are): with 32 vector registers (AVX-512) 5-8 rows run as one wide group
// over chunks of x, with the x packet kept in a register (layers/few_rows_linear.hpp), which the
// portable test builds never compile. The same cases as test_basic_layers.cpp's.
#include "few_rows_linear_cases.hpp"

TEMPLATE_TEST_CASE("linear of a few rows, native build", "[layers][linear]", float, double) {
    INFO("wide groups compiled: " << diffattn::detail::kFewRowsWideGroups);
    check_few_rows_linear<TestType>();
}

TEST_CASE("x rows that crowd one L1 set are told apart", "[layers][linear]") {
    using diffattn::detail::rows_crowd_cache_sets;
    CHECK(rows_crowd_cache_sets(8, 4096));         // 1024 floats a row: all 8 rows in one set
    CHECK(rows_crowd_cache_sets(3, 8192));
    CHECK_FALSE(rows_crowd_cache_sets(2, 4096));   // two rows share the set's ways with W
    CHECK_FALSE(rows_crowd_cache_sets(8, 11264));  // 2816 floats: offsets 0, 3 KB, 2 KB, 1 KB, ...
    CHECK(rows_crowd_cache_sets(4, 4116));         // 1029 floats: rows 20 bytes on, one line
    CHECK_FALSE(rows_crowd_cache_sets(8, 4160));   // 1040 floats: each row one line on
}
