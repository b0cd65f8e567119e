// Rounding floats to BF16 (8 significant bits, float's exponent range: docs/math.md §7.1), the
// operands of the tiled core's BF16 products. Round to nearest, ties to even; NaN stays NaN and
// +-Inf stays +-Inf; a float above BF16's largest finite value rounds to Inf, as the conversion
// instructions do. round_to_bf16_in_place keeps each value a float (its low 16 bits zero): the
// operands of the widened products (kernels/packed_tiles.hpp, layers/panel_products.hpp).
#pragma once

#include "diffattn/core/types.hpp"

#include <cstdint>
#include <cstring>

namespace diffattn::detail {

/// The BF16 bits (upper half of a float) nearest to x.
inline std::uint16_t bf16_bits(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
}

/// The float whose upper half is `bits` (exact).
inline float bf16_value(std::uint16_t bits) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

/// x rounded to the nearest BF16 value, as a float.
inline float round_to_bf16(float x) { return bf16_value(bf16_bits(x)); }

/// A packet of probabilities (floats in [0, 2^112), or NaN) rounded to BF16 as round_to_bf16 rounds
/// them, in Eigen's packet operations of the TU's ISA: OnlineSoftmaxState::fold rounds the
/// probabilities it writes with it. For x in [2^E, 2^(E+1)), c = 2^(E+16) has a last bit of 2^(E-7),
/// BF16's spacing there, so x + c rounds x to nearest even on that spacing and (x + c) - c is exact:
/// five operations instead of the integer rounding's nine. A NaN stays NaN. Packets of one lane
/// take the scalar function.
template <typename Packet>
EIGEN_STRONG_INLINE Packet round_probabilities_to_bf16(const Packet& x) {
    namespace ei = Eigen::internal;
    if constexpr (ei::unpacket_traits<Packet>::size == 1) {
        return Packet(round_to_bf16(x));
    } else {
        using Bits = typename ei::unpacket_traits<Packet>::integer_packet;
        const Bits exponent = ei::pand(ei::preinterpret<Bits>(x), ei::pset1<Bits>(0x7f800000));
        // Denormals are spaced as the smallest normals (E = -126): c at least 2^-110.
        const Packet c = ei::pmax(ei::preinterpret<Packet>(ei::padd(exponent, ei::pset1<Bits>(16 << 23))),
                                  ei::pset1<Packet>(0x1p-110f));
        return ei::psub(ei::padd(x, c), c);
    }
}

/// p[0, n) rounded to BF16 in place. Vectors of 16 lanes in GCC's and Clang's vector extensions,
/// which compile to the TU's own ISA at any optimisation level (at -O2 GCC 12 leaves the plain loop
/// scalar: eight instructions a float, on a tile of probabilities per block and key tile).
inline void round_to_bf16_in_place(float* p, Index n) {
    Index i = 0;
#if defined(__GNUC__) || defined(__clang__)
    typedef std::uint32_t Lanes __attribute__((vector_size(64)));
    for (; i + 16 <= n; i += 16) {
        Lanes u;
        std::memcpy(&u, p + i, sizeof u);
        const Lanes nan = static_cast<Lanes>((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
        const Lanes rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        const Lanes result = (nan & (u | 0x00400000u) & 0xffff0000u) | (~nan & rounded);
        std::memcpy(p + i, &result, sizeof result);
    }
#endif
    for (; i < n; ++i) p[i] = round_to_bf16(p[i]);
}

}  // namespace diffattn::detail
