// How many random shapes a sweep of one code path draws: fewer in a sanitizer build
// (DIFFATTN_TEST_SANITIZED, set by the asan preset through tests/CMakeLists.txt), whose run time
// ASan multiplies; every kind, mode and path of a sweep still runs there (a sweep's structural
// cases are never thinned, only its repetitions), and the release suite draws them all.
#pragma once

#include <algorithm>

namespace diffattn::test {

#ifdef DIFFATTN_TEST_SANITIZED
inline constexpr int kSanitizedRepetitionDivisor = 2;
#else
inline constexpr int kSanitizedRepetitionDivisor = 1;
#endif

/// `count` random repetitions of one path, divided by kSanitizedRepetitionDivisor, but never fewer
/// than min(count, at_least): a sweep that cycles its options over the repetitions (every i-th
/// shape masked, padded, ...) passes `at_least` = its cycle, so each option still runs.
inline int random_repetitions(int count, int at_least) {
    return std::max(std::min(count, at_least), count / kSanitizedRepetitionDivisor);
}

}  // namespace diffattn::test
