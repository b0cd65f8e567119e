# diffattn_native_options(<out_var>)
#
# Sets <out_var> to the compile options that target the build machine's vector ISA with the
# current CXX compiler: "-march=native;-mtune=generic" where it takes both, "-march=native" where
# it takes only that, and nothing where it takes neither (MSVC): a missing flag makes the code
# portable and slower, it never fails the build.
#
# -mtune=generic: -march=native alone also *tunes* for the detected CPU, and g++ 12's znver3
# schedule loses ~20% in Eigen's GEMM kernels on Zen 3; the generic schedule keeps the native ISA
# (AVX2 / AVX-512, FMA) without it (docs/benchmarks.md).
#
# Used by the top-level CMakeLists.txt (diffattn::native, the examples, the benchmarks) and, after
# `cmake --install`, by diffattnConfig.cmake with the consumer's compiler.
include_guard(GLOBAL)
include(CheckCXXCompilerFlag)

function(diffattn_native_options out_var)
  check_cxx_compiler_flag(-march=native DIFFATTN_CXX_HAS_MARCH_NATIVE)
  set(options "")
  if(DIFFATTN_CXX_HAS_MARCH_NATIVE)
    list(APPEND options -march=native)
    check_cxx_compiler_flag(-mtune=generic DIFFATTN_CXX_HAS_MTUNE_GENERIC)
    if(DIFFATTN_CXX_HAS_MTUNE_GENERIC)
      list(APPEND options -mtune=generic)
    endif()
  endif()
  set(${out_var} "${options}" PARENT_SCOPE)
endfunction()
