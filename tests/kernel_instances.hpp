// Compile-time saver of the test suite: the library's tiled kernels (diffattn::detail::*_attention<T>,
// non-inline function templates) are instantiated ONCE, in tests/support_kernel_instances.cpp
// (library diffattn_test_support), instead of in every test TU that calls them directly or through
// a layer or model. TUs of executables that link that library see the `extern template`
// declarations below (DIFFATTN_TEST_SHARED_SUPPORT is a usage requirement of the library), so they
// only call the one copy; the code is the library's, compiled with the same flags. TUs that do not
// link it (the *_nomalloc executables, compiled with EIGEN_RUNTIME_NO_MALLOC, which must not mix
// with objects compiled without it) instantiate the kernels themselves, as before.
//
// The declarations name each specialization by decltype of itself, so they follow the library's
// signatures without repeating them. Include this header after the library headers a test uses
// (it includes the kernel headers itself).
#pragma once

#include "diffattn/kernels/diff_attention.hpp"
#include "diffattn/kernels/dint_attention.hpp"
#include "diffattn/kernels/gda_attention.hpp"
#include "diffattn/kernels/softmax_attention.hpp"

/// Explicit instantiation declarations (PREFIX = extern) or definitions (PREFIX empty) of the
/// fast kernels of one scalar type T.
#define DIFFATTN_TEST_KERNEL_INSTANCES(PREFIX, T)                                                             \
    PREFIX template decltype(diffattn::detail::softmax_attention<T, T>) diffattn::detail::softmax_attention<T, T>; \
    PREFIX template decltype(diffattn::detail::diff_attention<T, T>) diffattn::detail::diff_attention<T, T>;      \
    PREFIX template decltype(diffattn::detail::dint_attention<T, T>) diffattn::detail::dint_attention<T, T>;      \
    PREFIX template decltype(diffattn::detail::gda_attention<T, T>) diffattn::detail::gda_attention<T, T>;

#if defined(DIFFATTN_TEST_SHARED_SUPPORT)
DIFFATTN_TEST_KERNEL_INSTANCES(extern, float)
DIFFATTN_TEST_KERNEL_INSTANCES(extern, double)
#endif
