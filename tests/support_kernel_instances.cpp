// The one instantiation of the fast kernels shared by every test executable that links
// diffattn_test_support (see kernel_instances.hpp). The header's `extern template` declarations
// come first here too, which is allowed: an explicit instantiation definition may follow them.
#include "kernel_instances.hpp"

DIFFATTN_TEST_KERNEL_INSTANCES(, float)
DIFFATTN_TEST_KERNEL_INSTANCES(, double)
