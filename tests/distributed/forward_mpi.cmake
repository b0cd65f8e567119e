# ctest forward_mpi: `mpirun -np 2 diffattn-forward` prints the line "ranks: 2 (...)" and the same
# top-5 next tokens as one process, and writes --logits from rank 0 only (docs/distributed.md).
#   cmake -DFORWARD=<exe> -DMPIEXEC=<mpiexec> -DMODEL=<dir> -DWORK=<dir> -P forward_mpi.cmake
cmake_minimum_required(VERSION 3.21)
set(tokens "3 14 15 92 65 35 89 79 32 38 46 26 43 38 32 79 50 28 84 19")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${FORWARD}" --model "${MODEL}" --tokens "${tokens}"
                RESULT_VARIABLE one_status OUTPUT_VARIABLE one ERROR_VARIABLE one_error)
execute_process(COMMAND "${MPIEXEC}" -np 2 --oversubscribe "${FORWARD}" --model "${MODEL}" --tokens "${tokens}"
                        --logits "${WORK}/logits.safetensors"
                RESULT_VARIABLE two_status OUTPUT_VARIABLE two ERROR_VARIABLE two_error)
if(NOT one_status EQUAL 0 OR NOT two_status EQUAL 0)
  message(FATAL_ERROR "forward_mpi: exit ${one_status} / ${two_status}\n${one_error}\n${two_error}")
endif()
if(NOT two MATCHES "\nranks: 2 \\(sequence split by rank: \\[0, [0-9]+\\) \\[[0-9]+, 20\\)\\)\n")
  message(FATAL_ERROR "forward_mpi: no 'ranks: 2' line in\n${two}")
endif()
if(one MATCHES "ranks:")
  message(FATAL_ERROR "forward_mpi: one process printed a ranks line\n${one}")
endif()
# The ids of the top 5 (the logits differ in the last digits: the ranks sum in another order).
foreach(run IN ITEMS one two)
  string(REGEX MATCHALL "\n +[0-9]+  logit" _ids "${${run}}")
  string(REGEX REPLACE "  logit|\n| " "" _ids "${_ids}")
  set(${run}_ids "${_ids}")
endforeach()
if(NOT one_ids STREQUAL two_ids OR one_ids STREQUAL "")
  message(FATAL_ERROR "forward_mpi: top-5 ids '${one_ids}' on one process but '${two_ids}' on 2 ranks")
endif()
string(REGEX MATCHALL "wrote logits" _writes "${two}")
list(LENGTH _writes _count)
if(NOT _count EQUAL 1 OR NOT EXISTS "${WORK}/logits.safetensors")
  message(FATAL_ERROR "forward_mpi: expected rank 0 alone to write the logits, got ${_count} lines")
endif()
message(STATUS "forward_mpi: ranks line, top-5 ids ${two_ids} as one process, logits written once")
