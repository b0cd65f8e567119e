// detail::few_rows_linear compiled for the build machine's vector ISA (diffattn::native, as the
// examples and benchmarks are): with 32 vector registers (AVX-512) 5-8 rows run as one wide group
// over chunks of x, with the x packet kept in a register (layers/few_rows_linear.hpp), which the
// portable test builds never compile. The same cases as test_basic_layers.cpp's.
#include "few_rows_linear_cases.hpp"

TEMPLATE_TEST_CASE("linear of a few rows, native build", "[layers][linear]", float, double) {
    INFO("wide groups compiled: " << diffattn::detail::kFewRowsWideGroups);
    check_few_rows_linear<TestType>();
}
