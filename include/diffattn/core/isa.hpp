// The vector instruction set the including translation unit is compiled for, as a short name.
//
// diffattn's kernels are Eigen expressions, so their speed is set by the ISA the *consumer's*
// compiler targets: a generic x86-64 build gets SSE2, `-march=native` (CMake: link
// diffattn::native) the machine's AVX2 / AVX-512 and FMA. Programs print this to say which one
// they run (examples/kernel_demo.cpp). The answer comes from the compiler's predefined macros of
// the including TU; a program must compile every TU that uses diffattn for one ISA anyway (Eigen's
// inline kernels differ between ISAs, so mixing them is an ODR violation).
#pragma once

namespace diffattn {

/// "AVX-512F", "AVX2+FMA", "AVX2", "AVX", "SSE4.2", "SSE2", "NEON" or "scalar": the widest vector
/// ISA enabled for this TU (and so for Eigen's kernels in it).
constexpr const char* compiled_isa() noexcept {
#if defined(EIGEN_DONT_VECTORIZE)
    return "scalar (EIGEN_DONT_VECTORIZE)";
#elif defined(__AVX512F__)
    return "AVX-512F";
#elif defined(__AVX2__) && defined(__FMA__)
    return "AVX2+FMA";
#elif defined(__AVX2__)
    return "AVX2";
#elif defined(__AVX__)
    return "AVX";
#elif defined(__SSE4_2__)
    return "SSE4.2";
#elif defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
    return "SSE2";
#elif defined(__ARM_NEON)
    return "NEON";
#else
    return "scalar";
#endif
}

}  // namespace diffattn
