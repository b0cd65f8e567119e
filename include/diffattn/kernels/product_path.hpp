// How a call's BF16 products are taken on the CPU in hand (docs/math.md §7.1, §10.1): the
// ProductPath a Compute mode resolves to, the one check of a mode against the kernel's scalar and
// the CPU, and the rounding of operands to BF16. The tiled attention core (packed_tiles.hpp) and
// the projections of many rows (layers/panel_products.hpp) both resolve their products here.
#pragma once

#include "diffattn/core/checks.hpp"
#include "diffattn/core/compute.hpp"
#include "diffattn/core/cpu_features.hpp"
#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"
#include "diffattn/kernels/bf16_dot.hpp"
#include "diffattn/kernels/bf16_rounding.hpp"

#include <type_traits>
#include <vector>

namespace diffattn {

/// How the tiled core multiplies, resolved from AttentionOptions::compute for the CPU in hand.
enum class ProductPath { scalar, bf16_widened, bf16_dot };

inline const char* to_string(ProductPath path) {
    switch (path) {
        case ProductPath::scalar: return "scalar";
        case ProductPath::bf16_widened: return "bf16_widened";
        case ProductPath::bf16_dot: return "bf16_dot";
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

/// The explicit BF16 paths this build and CPU run, each a Compute naming one ProductPath:
/// bf16_widened everywhere, bf16_dot where bf16_dot_available(). What the tests and benchmarks
/// iterate over to cover every path the host offers; Compute::bf16, the automatic choice, resolves
/// to one of them (automatic_bf16_path) and is not in the list.
inline std::vector<Compute> bf16_paths_here() {
    std::vector<Compute> paths{Compute::bf16_widened};
    if (bf16_dot_available()) paths.push_back(Compute::bf16_dot);
    return paths;
}

/// The path Compute::bf16 takes on a CPU that has vdpbf16ps or not (`dot_available`): vdpbf16ps
/// where it runs at full rate, else the widened products. On Intel's cores vdpbf16ps does half the
/// multiply-adds of fp32 FMAs in the same time (docs/benchmarks.md, "BF16 products"), so the widened
/// products, at the FMAs' rate, are faster there.
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
    }
    return ProductPath::scalar;
}

/// The compute mode that takes `path` on any CPU where the path runs.
inline Compute compute_of(ProductPath path) {
    switch (path) {
        case ProductPath::scalar: break;
        case ProductPath::bf16_widened: return Compute::bf16_widened;
        case ProductPath::bf16_dot: return Compute::bf16_dot;
    }
    return Compute::scalar;
}

namespace detail {

/// The products of a fast kernel computing in T under `compute` (docs/math.md §7.1): OptionError for a
/// BF16 mode of a double kernel, for bf16_dot where `dot_available` is false (this CPU or build has
/// no vdpbf16ps: bf16_dot_available()), and for an unknown mode.
template <typename T>
ProductPath resolve_products(const char* function, Compute compute, bool dot_available) {
    switch (compute) {
        case Compute::scalar: return ProductPath::scalar;
        case Compute::bf16:
        case Compute::bf16_dot:
        case Compute::bf16_widened: break;
        default: throw OptionError(concat(function, ": unknown Compute value"));
    }
    require<OptionError>(std::is_same_v<T, float>, function, ": compute ", to_string(compute),
                         " needs a float kernel; this one computes in double");
    require<OptionError>(compute != Compute::bf16_dot || dot_available, function,
                         ": compute bf16_dot needs a CPU with AVX512-BF16 (vdpbf16ps), which this one lacks; "
                         "compute bf16 takes the products this CPU has");
    return product_path(compute, dot_available);
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
