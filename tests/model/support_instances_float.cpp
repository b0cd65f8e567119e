// The one instantiation of the model's class templates shared by every TU of test_model (see the
// end of model_files.hpp), in float; support_instances_double.cpp has double. Two TUs rather than
// one so that a build on two cores compiles them side by side (the ThreadSanitizer build waits
// for nothing else). The header's `extern template` declarations come first here too, which is
// allowed: an explicit instantiation definition may follow them.
#include "model_files.hpp"

DIFFATTN_TEST_MODEL_INSTANCES(, float)
