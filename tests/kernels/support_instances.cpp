// The one instantiation of the plain reference and of the heavier test helpers shared by every TU
// of test_kernels (see the end of test_support.hpp). The header's `extern template` declarations
// come first here too, which is allowed: an explicit instantiation definition may follow them.
#include "test_support.hpp"

DIFFATTN_TEST_REFERENCE_INSTANCES(, float)
DIFFATTN_TEST_REFERENCE_INSTANCES(, double)
DIFFATTN_TEST_REFERENCE_INSTANCES(, long double)
DIFFATTN_TEST_HELPER_INSTANCES(, float, double)
DIFFATTN_TEST_HELPER_INSTANCES(, double, long double)
