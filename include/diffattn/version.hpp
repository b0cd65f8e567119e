// diffattn version. The numbers are literals so that a plain -I or pkg-config user needs no
// generated header; the top-level CMakeLists.txt checks they agree with project(VERSION).
#pragma once

#define DIFFATTN_VERSION_MAJOR 0
#define DIFFATTN_VERSION_MINOR 1
#define DIFFATTN_VERSION_PATCH 0

/// MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons.
#define DIFFATTN_VERSION \
    (DIFFATTN_VERSION_MAJOR * 10000 + DIFFATTN_VERSION_MINOR * 100 + DIFFATTN_VERSION_PATCH)

#define DIFFATTN_DETAIL_STRINGIFY_(x) #x
#define DIFFATTN_DETAIL_STRINGIFY(x) DIFFATTN_DETAIL_STRINGIFY_(x)

/// "0.1.0"
#define DIFFATTN_VERSION_STRING                          \
    DIFFATTN_DETAIL_STRINGIFY(DIFFATTN_VERSION_MAJOR) "." \
    DIFFATTN_DETAIL_STRINGIFY(DIFFATTN_VERSION_MINOR) "." \
    DIFFATTN_DETAIL_STRINGIFY(DIFFATTN_VERSION_PATCH)

namespace diffattn {

inline constexpr int version_major = DIFFATTN_VERSION_MAJOR;
inline constexpr int version_minor = DIFFATTN_VERSION_MINOR;
inline constexpr int version_patch = DIFFATTN_VERSION_PATCH;

/// The library version, "MAJOR.MINOR.PATCH".
inline constexpr char version[] = DIFFATTN_VERSION_STRING;

}  // namespace diffattn
