# Runs one consumer test (cmake -P; registered by tests/CMakeLists.txt).
#
#   -DMODE=install    cmake --install BUILD_DIR into a fresh PREFIX (the fixture of the next two)
#   -DMODE=cmake      configure tests/consumers/<NAME> into WORK_DIR/<NAME>, build it, run its
#                     consumer and consumer_native (NAME = find_package | add_subdirectory |
#                     fetchcontent; consumer_targets.cmake)
#   -DMODE=pkgconfig  compile consumer.cpp with `pkg-config --cflags diffattn` from PREFIX, run it
#
# Common inputs: DIFFATTN_SOURCE_DIR, WORK_DIR, PREFIX, GENERATOR, MAKE_PROGRAM, CXX_COMPILER,
# BUILD_TYPE, EIGEN3_DIR, NLOHMANN_JSON_DIR. Every step is echoed; any failure is fatal.
cmake_minimum_required(VERSION 3.16)

set(consumers_dir "${DIFFATTN_SOURCE_DIR}/tests/consumers")

function(run step)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "[${step}] ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${step}] failed (${rc})")
  endif()
endfunction()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  run(install "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")
  foreach(f include/diffattn/diffattn.hpp include/diffattn/version.hpp
            share/cmake/diffattn/diffattnConfig.cmake
            share/cmake/diffattn/diffattnConfigVersion.cmake
            share/cmake/diffattn/diffattnTargets.cmake
            share/pkgconfig/diffattn.pc)
    if(NOT EXISTS "${PREFIX}/${f}")
      message(FATAL_ERROR "install: ${PREFIX}/${f} is missing")
    endif()
  endforeach()

elseif(MODE STREQUAL "cmake")
  set(bin "${WORK_DIR}/${NAME}")
  file(REMOVE_RECURSE "${bin}")
  set(configure "${CMAKE_COMMAND}" -S "${consumers_dir}/${NAME}" -B "${bin}"
      -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
      "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
      "-DDIFFATTN_SOURCE_DIR=${DIFFATTN_SOURCE_DIR}"
      "-DCMAKE_PREFIX_PATH=${PREFIX}")
  if(MAKE_PROGRAM)
    list(APPEND configure "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  if(EIGEN3_DIR)
    list(APPEND configure "-DEigen3_DIR=${EIGEN3_DIR}")
  endif()
  if(NLOHMANN_JSON_DIR)
    list(APPEND configure "-Dnlohmann_json_DIR=${NLOHMANN_JSON_DIR}")
  endif()
  run(configure ${configure})
  run(build "${CMAKE_COMMAND}" --build "${bin}")
  run(run "${bin}/consumer")
  run(run "${bin}/consumer_native")

elseif(MODE STREQUAL "pkgconfig")
  find_program(PKG_CONFIG_EXECUTABLE NAMES pkg-config pkgconf REQUIRED)
  set(bin "${WORK_DIR}/${NAME}")
  file(REMOVE_RECURSE "${bin}")
  file(MAKE_DIRECTORY "${bin}")
  # Only the installed diffattn.pc; eigen3.pc and nlohmann_json.pc come from the system path.
  set(ENV{PKG_CONFIG_PATH} "${PREFIX}/share/pkgconfig")
  execute_process(COMMAND "${PKG_CONFIG_EXECUTABLE}" --cflags diffattn
                  OUTPUT_VARIABLE cflags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags diffattn failed (${rc})")
  endif()
  message(STATUS "pkg-config --cflags diffattn: ${cflags}")
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  # One -I must resolve to the install prefix (the .pc file finds it relative to itself).
  get_filename_component(want "${PREFIX}/include" REALPATH)
  set(found OFF)
  foreach(flag IN LISTS cflags)
    if(flag MATCHES "^-I(.+)$")
      get_filename_component(dir "${CMAKE_MATCH_1}" REALPATH)
      if(dir STREQUAL want)
        set(found ON)
      endif()
    endif()
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "pkg-config gave no -I for ${want}")
  endif()
  run(compile "${CXX_COMPILER}" -std=c++17 ${cflags} "-DCONSUMER_KIND=\"pkg-config\""
      "${consumers_dir}/consumer.cpp" -o "${bin}/consumer")
  run(run "${bin}/consumer")

else()
  message(FATAL_ERROR "consumer.cmake: unknown MODE '${MODE}'")
endif()
