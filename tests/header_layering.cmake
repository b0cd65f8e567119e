# The layering of include/diffattn, checked by ctest (test header_layering):
#
#   core  <-  kernels, io  <-  layers  <-  model  <-  analysis, distributed
#   core  <-  io  <-  text (the tokenizer)
#
# A header in one of these folders may include library headers from the folders listed for it
# below and from nowhere else, always by their full path ("diffattn/<folder>/<name>.hpp"): core
# includes core only, kernels never includes layers, and so on. Folders not listed (new ones on
# top) are not checked here, but no listed folder may include them.
#
#   cmake -DINCLUDE_DIR=<repo>/include -P tests/header_layering.cmake

cmake_minimum_required(VERSION 3.21)  # as the project; a -P script sets its own policies

if(NOT INCLUDE_DIR OR NOT IS_DIRECTORY "${INCLUDE_DIR}/diffattn")
  message(FATAL_ERROR "header_layering: pass -DINCLUDE_DIR=<dir holding diffattn/>, got '${INCLUDE_DIR}'")
endif()

set(allowed_core core)
set(allowed_kernels core kernels)
set(allowed_io core io)
set(allowed_layers core kernels io layers)
set(allowed_model core kernels io layers model)
set(allowed_analysis core kernels io layers model analysis)  # optional, on top of the model
set(allowed_text core io text)                               # the tokenizer: JSON files, no model
set(allowed_distributed core kernels io layers model distributed)  # optional (MPI), on top of the model

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}/diffattn" "${INCLUDE_DIR}/diffattn/*.hpp")
list(SORT headers)
set(checked 0)
set(violations "")
foreach(header IN LISTS headers)
  if(NOT header MATCHES "^([^/]+)/")
    continue()  # the umbrella diffattn.hpp and version.hpp
  endif()
  set(folder "${CMAKE_MATCH_1}")
  if(NOT DEFINED allowed_${folder})
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  file(STRINGS "${INCLUDE_DIR}/diffattn/${header}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" target "${line}")
    if(target MATCHES "^diffattn/([^/]+)/")
      set(target_folder "${CMAKE_MATCH_1}")
      if(NOT target_folder IN_LIST allowed_${folder})
        string(REPLACE ";" ", " allowed "${allowed_${folder}}")
        string(APPEND violations "  ${header} includes ${target} (${folder}/ may include ${allowed})\n")
      endif()
    else()
      string(APPEND violations "  ${header} includes \"${target}\" (library headers include each other as \"diffattn/<folder>/<name>.hpp\")\n")
    endif()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "header_layering: no header found under ${INCLUDE_DIR}/diffattn/{core,kernels,io,layers,model}")
endif()
if(violations)
  message(FATAL_ERROR "header_layering: includes against the layering core <- kernels, io <- layers <- model:\n${violations}")
endif()
message(STATUS "header_layering: ${checked} headers include only the layers below them")
