// Bit-exact conversions between storage formats and float, and little-endian byte access.
//
// Used by the safetensors reader and writer. Everything here works on single values and
// byte pointers of any alignment (memcpy-free shifts; compilers turn them into plain loads),
// so the result is the same on little- and big-endian hosts.
//
//   F16  (IEEE 754 binary16):  1 sign | 5 exponent (bias 15)  | 10 mantissa bits
//   BF16 (bfloat16):           the top 16 bits of an IEEE 754 binary32 float
//   F32, F64:                  IEEE 754 binary32 / binary64
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace diffattn::detail {

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "diffattn's safetensors support needs IEEE 754 binary32 float");
static_assert(std::numeric_limits<double>::is_iec559 && sizeof(double) == 8,
              "diffattn's safetensors support needs IEEE 754 binary64 double");

/// Reads a little-endian u16 from bytes[0..2) (any alignment).
inline std::uint16_t load_u16_le(const unsigned char* bytes) noexcept {
    return static_cast<std::uint16_t>(bytes[0] | (bytes[1] << 8));
}

/// Reads a little-endian u32 from bytes[0..4) (any alignment).
inline std::uint32_t load_u32_le(const unsigned char* bytes) noexcept {
    return static_cast<std::uint32_t>(bytes[0]) | (static_cast<std::uint32_t>(bytes[1]) << 8) |
           (static_cast<std::uint32_t>(bytes[2]) << 16) | (static_cast<std::uint32_t>(bytes[3]) << 24);
}

/// Reads a little-endian u64 from bytes[0..8) (any alignment).
inline std::uint64_t load_u64_le(const unsigned char* bytes) noexcept {
    return static_cast<std::uint64_t>(load_u32_le(bytes)) |
           (static_cast<std::uint64_t>(load_u32_le(bytes + 4)) << 32);
}

/// Writes `value` as 4 little-endian bytes into bytes[0..4).
inline void store_u32_le(std::uint32_t value, unsigned char* bytes) noexcept {
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
}

/// Writes `value` as 8 little-endian bytes into bytes[0..8).
inline void store_u64_le(std::uint64_t value, unsigned char* bytes) noexcept {
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
}

/// The float whose IEEE binary32 bit pattern is `bits`.
inline float float_from_bits(std::uint32_t bits) noexcept {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

/// The IEEE binary32 bit pattern of `value`.
inline std::uint32_t bits_from_float(float value) noexcept {
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

/// The double whose IEEE binary64 bit pattern is `bits`.
inline double double_from_bits(std::uint64_t bits) noexcept {
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

/// Exact binary16 -> binary32 conversion (every binary16 value is a binary32 value):
/// signed zeros, subnormals (renormalised), infinities, and NaNs with their payload and sign.
inline float f16_bits_to_float(std::uint16_t half) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
    const std::uint32_t exponent = (half >> 10) & 0x1Fu;
    std::uint32_t mantissa = half & 0x3FFu;
    std::uint32_t bits = 0;
    if (exponent == 0x1Fu) {
        bits = sign | 0x7F800000u | (mantissa << 13);  // inf (mantissa 0) or NaN (payload kept)
    } else if (exponent != 0) {
        bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);  // normal: rebias
    } else if (mantissa == 0) {
        bits = sign;  // +-0
    } else {
        // Subnormal: mantissa * 2^-24. Shift until the implicit bit (bit 10) is set; each shift
        // halves the binary32 exponent, which starts at that of 2^-14 (field 127 - 14 = 113).
        std::uint32_t exponent32 = 127 - 14;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent32;
        }
        bits = sign | (exponent32 << 23) | ((mantissa & 0x3FFu) << 13);
    }
    return float_from_bits(bits);
}

/// Exact bfloat16 -> binary32 conversion: bfloat16 is the high half of a binary32.
inline float bf16_bits_to_float(std::uint16_t bf16) noexcept {
    return float_from_bits(static_cast<std::uint32_t>(bf16) << 16);
}

/// `value` rounded to the nearest float into `out`; false when a finite `value` is too large in
/// magnitude for float (it would round to infinity). Infinities and NaNs convert as themselves.
inline bool narrow_to_float(double value, float& out) noexcept {
    constexpr double max_float = static_cast<double>(std::numeric_limits<float>::max());
    constexpr double rounds_to_infinity = 0x1.ffffffp127;  // 2^128 - 2^103: FLT_MAX + half an ulp
    const double magnitude = std::fabs(value);
    if (std::isfinite(value) && magnitude > max_float) {
        if (magnitude >= rounds_to_infinity) return false;
        out = value > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
        return true;
    }
    out = static_cast<float>(value);
    return true;
}

}  // namespace diffattn::detail
