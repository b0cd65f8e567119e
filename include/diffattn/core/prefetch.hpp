// A software prefetch of one cache line into L2: the hint every streaming loop of the decode path
// gives (the few-row kernels' keys and values, kernels/stored_rows.hpp; the decode-time
// projections' weights, layers/few_rows_linear.hpp).
#pragma once

#include <Eigen/Core>

#if !defined(__GNUC__) && !defined(__clang__) && (defined(_M_X64) || defined(_M_IX86))
#include <xmmintrin.h>
#endif

namespace diffattn::detail {

/// Asks for the cache line at p into the L2 cache (locality 2: x86's T1), not L1: the loops read
/// each line once, and a T0 prefetch's wait for L1's fill buffers stalled them (docs/benchmarks.md,
/// "Prefetching into L2"). A hint: an address past the data, even an unmapped one, never faults.
/// GCC's and Clang's builtin, which survives being inlined into an always-inline function (GCC 12
/// drops Eigen's prefetch there); MSVC's intrinsic on x86; elsewhere nothing, which changes no
/// result. A function whose body only calls this must be always inlined as well: GCC 12 counts it
/// free of side effects and deletes the calls to it (kernels/stored_rows.hpp's prefetch_ahead;
/// docs/benchmarks.md, "Prefetches GCC deleted").
EIGEN_ALWAYS_INLINE void prefetch_into_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 2);
#elif defined(_M_X64) || defined(_M_IX86)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
#else
    (void)p;
#endif
}

}  // namespace diffattn::detail
