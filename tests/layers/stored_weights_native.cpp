// linear() with weights stored as bf16, q8_0 and q4_0, compiled for the build machine's vector ISA
// (diffattn::native, as the examples and benchmarks are): with AVX-512 each block is decoded in
// registers (layers/stored_weight_dots.hpp), which the portable test builds never compile. The
// same cases as test_weight_formats.cpp's.
#include "stored_weight_cases.hpp"

TEMPLATE_TEST_CASE("linear with stored weights, native build", "[layers][weights]", float, double) {
    stored_weight_test::check_stored_products<TestType>();
}

TEMPLATE_TEST_CASE("stored weight panels, native build", "[layers][weights]", float, double) {
    stored_weight_test::check_stored_panels<TestType>();
}
