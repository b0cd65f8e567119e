// The x86 intrinsics headers (<immintrin.h>) of a build for AVX or later, included here before
// Eigen or any other header includes them: core/types.hpp includes this first, ahead of <Eigen/Core>.
//
// Why: GCC 12 (Debian 12's compiler) reports "'__Y' may be used uninitialized" inside its own
// AVX-512 headers wherever an optimised build inlines an intrinsic that starts from an undefined
// vector (GCC bug 105593; Debian 12 has GCC 12.2): hundreds of warnings per file that uses the kernels
// with -march=native and -Wall. GCC decides by the location of the warning, the intrinsics
// header's own line, so silencing those two warnings around the header's first inclusion silences
// exactly them; a use of an uninitialised value in any other code is still reported. If a program
// includes <immintrin.h> (or Eigen) before any diffattn header, the warnings come back.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX__)  // the wider vectors' headers
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
