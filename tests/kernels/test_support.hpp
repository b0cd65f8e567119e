// Shared helpers of the kernel tests, included together (one concept per header):
//   test_random.hpp      seeds and seeded random inputs (DIFFATTN_TEST_SEED, DIFFATTN_TEST_RNG)
//   spec7_accuracy.hpp   precision ladders and the docs/math.md §7 accuracy check against the plain
//                        reference (include/diffattn/kernels/reference.hpp)
//   kernel_cases.hpp     the shapes and options the kernel tests sweep, and their runners
//   diff_inputs.hpp      random DIFF / DINT inputs and DINT histories
// and, below, the one instantiation of the reference and of these helpers in test_kernels.
#pragma once

#include "diffattn/kernels/reference.hpp"
#include "diffattn/kernels/reference_gda.hpp"

#include "diff_inputs.hpp"
#include "kernel_cases.hpp"
#include "spec7_accuracy.hpp"
#include "test_random.hpp"

#include "../kernel_instances.hpp"  // the fast kernels, instantiated once (diffattn_test_support)

// ---------------------------------------------------------------------------------------------
// Instantiated once for the whole test_kernels executable, in support_instances.cpp (library
// test_kernels_support): the plain reference in float, double and long double (the oracle type of
// double) and the heavier helpers above. Every other TU of the executable sees these `extern
// template` declarations (DIFFATTN_TEST_SUPPORT_KERNELS is a usage requirement of that library)
// and only calls the shared copy, which saves compiling the same Eigen code (long double GEMMs
// above all) in each TU. TUs outside test_kernels (test_kernels_nomalloc) instantiate them as usual.
// ---------------------------------------------------------------------------------------------

/// The plain reference (include/diffattn/kernels/reference.hpp) in T, declared (PREFIX = extern)
/// or defined (PREFIX empty).
#define DIFFATTN_TEST_REFERENCE_INSTANCES(PREFIX, T)                                                               \
    PREFIX template decltype(diffattn::reference::mask_logits<T>) diffattn::reference::mask_logits<T>;             \
    PREFIX template decltype(diffattn::reference::masked_softmax<T>) diffattn::reference::masked_softmax<T>;       \
    PREFIX template decltype(diffattn::reference::masked_logits<T>) diffattn::reference::masked_logits<T>;         \
    PREFIX template decltype(diffattn::reference::attention_map<T>) diffattn::reference::attention_map<T>;         \
    PREFIX template decltype(diffattn::reference::softmax_attention_maps<T>)                                       \
        diffattn::reference::softmax_attention_maps<T>;                                                           \
    PREFIX template decltype(diffattn::reference::softmax_attention<T>) diffattn::reference::softmax_attention<T>; \
    PREFIX template decltype(diffattn::reference::diff_attention_maps<T>) diffattn::reference::diff_attention_maps<T>; \
    PREFIX template decltype(diffattn::reference::diff_attention<T>) diffattn::reference::diff_attention<T>;       \
    PREFIX template decltype(diffattn::reference::dint_history<T>) diffattn::reference::dint_history<T>;           \
    PREFIX template decltype(diffattn::reference::dint_attention_maps<T>) diffattn::reference::dint_attention_maps<T>; \
    PREFIX template decltype(diffattn::reference::dint_attention<T>) diffattn::reference::dint_attention<T>;       \
    PREFIX template decltype(diffattn::reference::gda_attention<T>) diffattn::reference::gda_attention<T>;

/// The helpers above for a kernel in T (oracle scalar W = Wide<T>).
#define DIFFATTN_TEST_HELPER_INSTANCES(PREFIX, T, W)                                                               \
    PREFIX template decltype(diffattn::test::random_matrix<T>) diffattn::test::random_matrix<T>;                   \
    PREFIX template decltype(diffattn::test::random_diff_inputs<T>) diffattn::test::random_diff_inputs<T>;         \
    PREFIX template diffattn::test::DiffInputs<W> diffattn::test::DiffInputs<T>::cast<W>() const;                 \
    PREFIX template decltype(diffattn::test::reference_history<T>) diffattn::test::reference_history<T>;           \
    PREFIX template decltype(diffattn::test::cast_history<T, W>) diffattn::test::cast_history<T, W>;               \
    PREFIX template decltype(diffattn::test::cast_history<W, T>) diffattn::test::cast_history<W, T>;               \
    PREFIX template decltype(diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<T>>)         \
        diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<T>>;                              \
    PREFIX template decltype(diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>)         \
        diffattn::test::max_abs_diff<diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>;                              \
    PREFIX template decltype(diffattn::test::check_spec7<T, diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>)       \
        diffattn::test::check_spec7<T, diffattn::RowMatrix<T>, diffattn::RowMatrix<W>>;

#if defined(DIFFATTN_TEST_SUPPORT_KERNELS)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, float)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, double)
DIFFATTN_TEST_REFERENCE_INSTANCES(extern, long double)
DIFFATTN_TEST_HELPER_INSTANCES(extern, float, double)
DIFFATTN_TEST_HELPER_INSTANCES(extern, double, long double)
#endif
