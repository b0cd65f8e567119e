// The one instantiation of the model's class templates shared by every TU of test_model (see the
// end of model_files.hpp). The header's `extern template` declarations come first here too,
// which is allowed: an explicit instantiation definition may follow them.
#include "model_files.hpp"

DIFFATTN_TEST_MODEL_INSTANCES(, float)
DIFFATTN_TEST_MODEL_INSTANCES(, double)
