// The x86 intrinsics headers (<immintrin.h>), included here before Eigen or any other header
// includes them: core/types.hpp includes this first, ahead of <Eigen/Core>. A build for AVX or
// later uses them throughout; a build for any x86-64 (GCC, Clang) uses them in the functions that
// carry their own target attribute (kernels/bf16_dot.hpp), which a generic TU compiles too.
//
// Why: GCC 12 (Debian 12's compiler) reports "'__Y' may be used uninitialized" inside its own
// AVX-512 headers wherever an optimised build inlines an intrinsic that starts from an undefined
// vector (GCC bug 105593; Debian 12 has GCC 12.2): hundreds of warnings per file that uses the kernels
// with -march=native and -Wall. GCC decides by the location of the warning, the intrinsics
// header's own line, so silencing those two warnings around the header's first inclusion silences
// exactly them; a use of an uninitialised value in any other code is still reported. If a program
// includes <immintrin.h> (or Eigen) before any diffattn header, the warnings come back.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && (defined(__AVX__) || defined(__x86_64__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#elif defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
#endif
