// How a call's BF16 products are taken on the CPU in hand (docs/math.md §7.1, §10.1): the
// ProductPath a Compute mode resolves to, the one check of a mode against the kernel's scalar and
// the CPU, the rounding of operands to BF16, and the dispatch of the pair packings' products to
// vdpbf16ps (bf16_dot.hpp) or AMX tiles (bf16_tiles.hpp). The tiled attention core
// (packed_tiles.hpp) and the projections of many rows (layers/panel_products.hpp) both resolve and
// multiply their products here.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/compute.hpp"
#include "diffattn/core/cpu_features.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"
#include "diffattn/kernels/bf16_tiles.hpp"

#include <cassert>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace diffattn {

/// How the tiled core multiplies, resolved from AttentionOptions::compute for the CPU in hand.
enum class ProductPath { scalar, bf16_widened, bf16_dot, bf16_amx };

inline const char* to_string(ProductPath path) {
    switch (path) {
        case ProductPath::scalar: return "scalar";
        case ProductPath::bf16_widened: return "bf16_widened";
        case ProductPath::bf16_dot: return "bf16_dot";
        case ProductPath::bf16_amx: return "bf16_amx";
    }
    return "unknown";
}

/// Whether this build and CPU can take the bf16_dot path.
inline bool bf16_dot_available() {
#if defined(DIFFATTN_X86_TARGETS)
    return detail::cpu_has_avx512_bf16();
#else
    return false;
#endif
}

/// Whether this build and CPU can take the bf16_amx path: AMX tiles granted to the process, and
/// AVX512-BF16 for the packings it shares with bf16_dot. A test build (DIFFATTN_EMULATE_AMX_TILES)
/// takes it wherever it can pack, on emulated tiles where the CPU has none (kernels/bf16_tiles.hpp).
inline bool bf16_amx_available() {
#if defined(DIFFATTN_X86_TARGETS)
    return detail::cpu_has_avx512_bf16() && (detail::cpu_has_amx_bf16() || detail::bf16_tiles::kEmulatedWithoutAmx);
#else
    return false;
#endif
}

/// The BF16 product units a call may use: vdpbf16ps (`dot`) and AMX tiles (`tiles`).
struct Bf16Units {
    bool dot = false;
    bool tiles = false;
};

/// The units of this build and CPU.
inline Bf16Units bf16_units_here() { return {bf16_dot_available(), bf16_amx_available()}; }

/// The explicit BF16 paths this build and CPU run, each a Compute naming one ProductPath:
/// bf16_widened everywhere, bf16_dot where bf16_dot_available(), bf16_amx where
/// bf16_amx_available(). What the tests and benchmarks iterate over to cover every path the host
/// offers; Compute::bf16, the automatic choice, resolves to one of them (automatic_bf16_path) and
/// is not in the list.
inline std::vector<Compute> bf16_paths_here() {
    std::vector<Compute> paths{Compute::bf16_widened};
    if (bf16_dot_available()) paths.push_back(Compute::bf16_dot);
    if (bf16_amx_available()) paths.push_back(Compute::bf16_amx);
    return paths;
}

/// The path Compute::bf16 takes on a CPU that has vdpbf16ps or not (`dot_available`): vdpbf16ps
/// where it runs at full rate, else the widened products. On Intel's cores vdpbf16ps does half the
/// multiply-adds of fp32 FMAs in the same time (docs/benchmarks.md, "BF16 products"), so the widened
/// products, at the FMAs' rate, are faster there. AMX tiles are taken only when asked for
/// (Compute::bf16_amx) until their rate is measured against these (docs/benchmarks.md).
inline ProductPath automatic_bf16_path(bool dot_available = bf16_dot_available()) {
    return dot_available && !detail::cpu_is_intel() ? ProductPath::bf16_dot : ProductPath::bf16_widened;
}

/// The path of a compute mode that the call's checks accepted (detail::resolve_products below).
inline ProductPath product_path(Compute compute, bool dot_available = bf16_dot_available()) {
    switch (compute) {
        case Compute::scalar: return ProductPath::scalar;
        case Compute::bf16: return automatic_bf16_path(dot_available);
        case Compute::bf16_dot: return ProductPath::bf16_dot;
        case Compute::bf16_widened: return ProductPath::bf16_widened;
        case Compute::bf16_amx: return ProductPath::bf16_amx;
    }
    return ProductPath::scalar;
}

/// The compute mode that takes `path` on any CPU where the path runs.
inline Compute compute_of(ProductPath path) {
    switch (path) {
        case ProductPath::scalar: break;
        case ProductPath::bf16_widened: return Compute::bf16_widened;
        case ProductPath::bf16_dot: return Compute::bf16_dot;
        case ProductPath::bf16_amx: return Compute::bf16_amx;
    }
    return Compute::scalar;
}

/// Whether `path` multiplies bf16_dot.hpp's packings (BF16 rows and pair panels): bf16_dot and
/// bf16_amx, which differ only in the instruction that multiplies them.
inline bool uses_pair_packings(ProductPath path) {
    return path == ProductPath::bf16_dot || path == ProductPath::bf16_amx;
}

namespace detail {

/// The products of a fast kernel computing in T under `compute` (docs/math.md §7.1): OptionError for a
/// BF16 mode of a double kernel, for bf16_dot or bf16_amx where `units` lacks its unit (this CPU
/// or build has no vdpbf16ps, or no AMX tiles: bf16_units_here()), and for an unknown mode.
template <typename T>
ProductPath resolve_products(const char* function, Compute compute, Bf16Units units = bf16_units_here()) {
    switch (compute) {
        case Compute::scalar: return ProductPath::scalar;
        case Compute::bf16:
        case Compute::bf16_dot:
        case Compute::bf16_widened:
        case Compute::bf16_amx: break;
        default: throw OptionError(concat(function, ": unknown Compute value"));
    }
    require<OptionError>(std::is_same_v<T, float>, function, ": compute ", to_string(compute),
                         " needs a float kernel; this one computes in double");
    require<OptionError>(compute != Compute::bf16_dot || units.dot, function,
                         ": compute bf16_dot needs a CPU with AVX512-BF16 (vdpbf16ps), which this one lacks; "
                         "compute bf16 takes the products this CPU has");
    require<OptionError>(compute != Compute::bf16_amx || units.tiles, function,
                         ": compute bf16_amx needs a CPU with AMX tiles (AMX-BF16, granted by the OS) and "
                         "AVX512-BF16, which this one lacks; compute bf16 takes the products this CPU has");
    return product_path(compute, units.dot);
}

/// C [m x n] = alpha * A B, or += A B when `accumulate`, by the product unit of `path` (bf16_dot or
/// bf16_amx) on bf16_dot.hpp's packings: the one dispatch of the tiled core and the projections.
inline void multiply_pairs(ProductPath path, const std::uint32_t* a, Index lda, Index m, const std::uint32_t* b,
                           Index ldb, Index n, Index k_pairs, float* c, Index ldc, float alpha, bool accumulate) {
#if defined(DIFFATTN_X86_TARGETS)
    if (path == ProductPath::bf16_amx) {
        return bf16_tiles::multiply(a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha, accumulate);
    }
    assert(path == ProductPath::bf16_dot);
    bf16_dot::multiply(a, lda, m, b, ldb, n, k_pairs, c, ldc, alpha, accumulate);
#else
    (void)path, (void)a, (void)lda, (void)m, (void)b, (void)ldb, (void)n, (void)k_pairs, (void)c, (void)ldc,
        (void)alpha, (void)accumulate;
    assert(false && "no BF16 product units in this build");
#endif
}

/// p[0, n) rounded to BF16 in place, kept as floats: by vcvtne2ps2bf16 where the CPU has it (a
/// third of the instructions), else portably.
inline void round_operands_to_bf16(float* p, Index n) {
#if defined(DIFFATTN_X86_TARGETS)
    if (bf16_dot_available()) return bf16_dot::round_in_place(p, n);
#endif
    round_to_bf16_in_place(p, n);
}

}  // namespace detail
}  // namespace diffattn
