// The model's class templates in double for test_model_support: support_instances_float.cpp says
// why the two scalars have a TU each.
#include "model_files.hpp"

DIFFATTN_TEST_MODEL_INSTANCES(, double)
