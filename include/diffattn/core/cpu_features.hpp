// What the CPU running the program offers, asked at run time: the one place code compiled for any
// x86-64 decides whether it may take a path that needs a newer instruction set (the BF16 products
// of kernels/bf16_dot.hpp). GCC's and Clang's __builtin_cpu_supports read CPUID and whether the
// OS saves the wider registers (XCR0); elsewhere every answer is no.
#pragma once

namespace diffattn::detail {

/// Whether functions compiled with __attribute__((target(...))) for AVX-512 exist in this build:
/// GCC or Clang on x86-64.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DIFFATTN_X86_TARGETS 1
#endif

/// AVX-512 F, BW, VL and BF16 (vdpbf16ps, vcvtne2ps2bf16), usable by this process.
inline bool cpu_has_avx512_bf16() {
#if defined(DIFFATTN_X86_TARGETS)
    static const bool has = (__builtin_cpu_init(), true) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    return has;
#else
    return false;
#endif
}

/// Whether the CPU is Intel's. On the Intel cores with AVX512-BF16 measured here (Emerald Rapids)
/// vdpbf16ps issues at a quarter of the rate of an fp32 FMA, so half its multiply-adds
/// (docs/benchmarks.md, "BF16 products").
inline bool cpu_is_intel() {
#if defined(DIFFATTN_X86_TARGETS)
    static const bool intel = (__builtin_cpu_init(), __builtin_cpu_is("intel"));
    return intel;
#else
    return false;
#endif
}

}  // namespace diffattn::detail
