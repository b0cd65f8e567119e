// What the CPU running the program offers, asked at run time: the one place code compiled for any
// x86-64 decides whether it may take a path that needs a newer instruction set (the BF16 products
// of kernels/bf16_dot.hpp and kernels/bf16_tiles.hpp). GCC's and Clang's __builtin_cpu_supports
// read CPUID and whether the OS saves the wider registers (XCR0); AMX is asked of CPUID, XCR0 and
// Linux itself, which grants the tile registers to a process only on request. Elsewhere every
// answer is no.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <cpuid.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

/// AMX tiles with BF16 products (tdpbf16ps) usable by this process: CPUID's AMX-TILE and
/// AMX-BF16 (leaf 7, EDX bits 24 and 22), the OS saving the tile state (XCR0 bits 17 and 18), and
/// Linux granting it to the process (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, asked once;
/// without the grant the first tile instruction faults). Linux only: elsewhere no.
inline bool cpu_has_amx_bf16() {
#if defined(DIFFATTN_X86_TARGETS) && defined(__linux__)
    static const bool has = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
        const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
        if (!tile || !bf16) return false;
        if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE: xgetbv runs
        unsigned xcr0_low = 0, xcr0_high = 0;
        __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0u));
        if (((xcr0_low >> 17) & 3u) != 3u) return false;
        constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>, Linux >= 5.16
        return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
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
