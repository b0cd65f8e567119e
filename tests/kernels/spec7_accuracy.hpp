// The docs/math.md §7 accuracy check of the kernel tests: a fast kernel's output against the plain
// reference (include/diffattn/kernels/reference.hpp) in its own precision and one precision up.
//
// Accuracy (docs/math.md §7). A fast kernel in precision T is compared with the plain reference run one
// precision up, Wide<T> (float -> double, double -> long double), on the same inputs:
//     max|fast_T - ref_Wide| <= 2 * max|ref_T - ref_Wide| + additive<T>
// For float this is exactly docs/math.md §7 (the FlashAttention criterion, additive 1e-6). For double we
// apply the same criterion one rung up the ladder: the oracle is the reference in long double
// (64-bit mantissa on x86-64, 11 more bits than double) and the additive term is docs/math.md §7's 1e-6
// scaled by DBL_EPSILON / FLT_EPSILON (~1.9e-15, i.e. the same ~8 ulps of an O(1) output). Where
// long double is no wider than double the double oracle would be itself, so the tests fall back to
// an a-priori forward-error bound instead (spec7_accuracy's fallback_bound, forward_error_bound below).
#pragma once

#include <catch2/catch.hpp>

#include "diffattn/core/types.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

namespace diffattn::test {

/// One precision up: the oracle's scalar for a kernel in T.
template <typename T>
using Wide = std::conditional_t<std::is_same_v<T, float>, double, long double>;

/// True when Wide<T> carries more mantissa bits than T (long double may equal double off x86).
template <typename T>
inline constexpr bool kWideIsWider = std::numeric_limits<Wide<T>>::digits > std::numeric_limits<T>::digits;

/// max_ij |a_ij - b_ij| in long double; +infinity if the shapes differ or a NaN appears on one
/// side only (two NaNs in the same place count as equal).
template <typename A, typename B>
long double max_abs_diff(const A& a, const B& b) {
    if (a.rows() != b.rows() || a.cols() != b.cols()) return std::numeric_limits<long double>::infinity();
    long double worst = 0.0L;
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) {
            const long double x = static_cast<long double>(a(i, j));
            const long double y = static_cast<long double>(b(i, j));
            if (std::isnan(x) || std::isnan(y)) {
                if (std::isnan(x) && std::isnan(y)) continue;
                return std::numeric_limits<long double>::infinity();
            }
            const long double diff = std::fabs(x - y);
            if (!(diff <= worst)) worst = diff;  // also catches inf - inf = NaN
        }
    }
    return worst;
}

/// max_ij |a_ij| in long double.
template <typename A>
long double max_abs(const A& a) {
    long double worst = 0.0L;
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) worst = std::max(worst, std::fabs(static_cast<long double>(a(i, j))));
    }
    return worst;
}

/// True when every entry is finite.
template <typename A>
bool all_finite(const A& a) {
    for (Index i = 0; i < a.rows(); ++i) {
        for (Index j = 0; j < a.cols(); ++j) {
            if (!std::isfinite(static_cast<long double>(a(i, j)))) return false;
        }
    }
    return true;
}

/// docs/math.md §7's additive term for a kernel in T: 1e-6 for float; scaled by the unit roundoff ratio
/// for double (the same number of ulps of an O(1) output).
template <typename T>
long double spec7_additive() {
    return 1e-6L * static_cast<long double>(std::numeric_limits<T>::epsilon()) /
           static_cast<long double>(std::numeric_limits<float>::epsilon());
}

/// What one docs/math.md §7 comparison measured.
struct Accuracy {
    long double fast_error = 0;   ///< max|fast - oracle|
    long double plain_error = 0;  ///< max|plain reference in T - oracle|
    long double tolerance = 0;    ///< 2 * plain_error + additive (or the fallback bound)
    bool ok() const { return fast_error <= tolerance; }
};

/// docs/math.md §7 check of `fast` (a kernel's output in T) against `plain` (the reference in T) and
/// `oracle` (the reference in Wide<T>, same inputs).
///   fallback_bound: used instead of the plain error when Wide<T> is not wider than T; an a-priori
///   forward error bound of the reference, c * (d + S) * eps * (1 + max|V|), passed by the caller.
template <typename T, typename Fast, typename Oracle>
Accuracy spec7_accuracy(const Fast& fast, const RowMatrix<T>& plain, const Oracle& oracle,
                        long double fallback_bound = 0) {
    Accuracy a;
    a.fast_error = max_abs_diff(fast, oracle);
    a.plain_error = max_abs_diff(plain, oracle);
    if constexpr (kWideIsWider<T>) {
        a.tolerance = 2 * a.plain_error + spec7_additive<T>();
    } else {
        a.tolerance = fallback_bound + spec7_additive<T>();
    }
    return a;
}

/// Asserts docs/math.md §7 and reports the measured errors with the case description.
template <typename T, typename Fast, typename Oracle>
void check_spec7(const std::string& what, const Fast& fast, const RowMatrix<T>& plain, const Oracle& oracle,
                 long double fallback_bound = 0) {
    const Accuracy a = spec7_accuracy<T>(fast, plain, oracle, fallback_bound);
    INFO(what);
    INFO("fast error " << static_cast<double>(a.fast_error) << ", plain " << (sizeof(T) == 4 ? "float" : "double")
                       << " reference error " << static_cast<double>(a.plain_error) << ", tolerance "
                       << static_cast<double>(a.tolerance));
    CHECK(a.ok());
}

/// A-priori forward-error bound of the plain reference in T, used only when no wider oracle exists:
/// logits carry <= d eps relative error, the softmax sum <= S eps, and the output sum <= S eps,
/// each times max|V|; a factor 4 covers the fast kernel's own (different-order) rounding.
template <typename T>
long double forward_error_bound(Index head_dim, Index seq_len_kv, long double max_logit, long double max_value) {
    const long double eps = std::numeric_limits<T>::epsilon();
    return 4 * eps * (static_cast<long double>(head_dim) * (1 + max_logit) + 2 * static_cast<long double>(seq_len_kv)) *
           (1 + max_value);
}

}  // namespace diffattn::test
