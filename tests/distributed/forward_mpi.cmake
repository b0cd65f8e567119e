# ctest forward_mpi: `mpirun -np R diffattn-forward` (docs/distributed.md), R = 2 and 3, against one
# process: the line "ranks: R (...)", the same top-5 next tokens, and --logits written by rank 0
# alone with the logits of one process (compare_logits.py: the same shape, equal up to rounding);
# a rank whose own --logits folder is missing does not matter (only rank 0 touches the path). A
# rank that fails alone (its own --model, flag or tokens; mpirun's MPMD form gives each rank its
# own arguments) or leaves before the forward (--tokenize) must not leave the others waiting: the
# run ends within the timeout, exit status 2, with that rank's message.
#   cmake -DFORWARD=<exe> -DMPIEXEC=<mpiexec> -DPYTHON=<python3> -DCOMPARE=<compare_logits.py>
#         -DMODEL=<dir> -DWORK=<dir> -P forward_mpi.cmake
cmake_minimum_required(VERSION 3.21)
set(tokens "3 14 15 92 65 35 89 79 32 38 46 26 43 38 32 79 50 28 84 19 71 69 39")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(args --model "${MODEL}" --tokens "${tokens}")
execute_process(COMMAND "${FORWARD}" ${args} --logits "${WORK}/one.safetensors"
                RESULT_VARIABLE one_status OUTPUT_VARIABLE one ERROR_VARIABLE one_error TIMEOUT 120)
if(NOT one_status EQUAL 0)
  message(FATAL_ERROR "forward_mpi: one process: exit ${one_status}\n${one_error}")
endif()
if(one MATCHES "ranks:")
  message(FATAL_ERROR "forward_mpi: one process printed a ranks line\n${one}")
endif()

# The ids of the top 5 of a run's output (the logits differ in the last digits: the ranks sum in
# another order).
function(top_ids output out)
  string(REGEX MATCHALL "\n +[0-9]+  logit" _ids "${output}")
  string(REGEX REPLACE "  logit|\n| " "" _ids "${_ids}")
  set(${out} "${_ids}" PARENT_SCOPE)
endfunction()
top_ids("${one}" one_ids)

foreach(ranks IN ITEMS 2 3)
  set(file "${WORK}/np${ranks}.safetensors")
  execute_process(COMMAND "${MPIEXEC}" --oversubscribe -np ${ranks} "${FORWARD}" ${args} --logits "${file}"
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE error TIMEOUT 120)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "forward_mpi: -np ${ranks}: exit ${status}\n${error}")
  endif()
  if(NOT out MATCHES "\nranks: ${ranks} \\(sequence split by rank: \\[0, [0-9]+\\)( \\[[0-9]+, [0-9]+\\))+\\)\n")
    message(FATAL_ERROR "forward_mpi: no 'ranks: ${ranks}' line in\n${out}")
  endif()
  top_ids("${out}" ids)
  if(NOT one_ids STREQUAL ids OR one_ids STREQUAL "")
    message(FATAL_ERROR "forward_mpi: top-5 ids '${one_ids}' on one process but '${ids}' on ${ranks} ranks")
  endif()
  execute_process(COMMAND "${PYTHON}" "${COMPARE}" "${WORK}/one.safetensors" "${file}"
                  RESULT_VARIABLE same OUTPUT_VARIABLE same_out ERROR_VARIABLE same_error)
  if(NOT same EQUAL 0)
    message(FATAL_ERROR "forward_mpi: -np ${ranks}: the --logits file is not one process's: ${same_error}")
  endif()
  message(STATUS "forward_mpi: -np ${ranks}: ranks line, top-5 ids ${ids}, ${same_out}")
endforeach()
file(GLOB leftovers "${WORK}/.*")
if(leftovers)
  message(FATAL_ERROR "forward_mpi: temporary files left: ${leftovers}")
endif()

# Rank 1's --logits names a folder it does not have: only rank 0 writes, so the run succeeds.
execute_process(COMMAND "${MPIEXEC}" --oversubscribe -np 1 "${FORWARD}" ${args} --logits "${WORK}/mpmd.safetensors"
                        : -np 1 "${FORWARD}" ${args} --logits "${WORK}/missing/x.safetensors"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE error TIMEOUT 120)
if(NOT status EQUAL 0 OR NOT EXISTS "${WORK}/mpmd.safetensors" OR EXISTS "${WORK}/missing")
  message(FATAL_ERROR "forward_mpi: rank 1's own --logits path mattered: exit ${status}\n${error}")
endif()

# A rank that fails alone, or stops before the forward (--tokenize): every variant ends (the
# timeout would say it hung) with status 2 and its message, and the others name it.
set(variants "--model|${WORK}/no-such-model|model directory"
             "--bogus|x|unknown argument \"--bogus\""
             "--tokens|1 2 99999|--tokens: token 2"
             "--tokenize|Hello|stopped before the forward")
foreach(variant IN LISTS variants)
  string(REPLACE "|" ";" variant "${variant}")
  list(GET variant 0 flag)
  list(GET variant 1 value)
  list(GET variant 2 expected)
  set(bad_args ${args})
  if(flag STREQUAL "--bogus")
    list(APPEND bad_args --bogus)
  elseif(flag STREQUAL "--tokenize")  # done before the forward, successfully: the others must not wait either
    set(bad_args --model "${MODEL}" --prompt "${value}" --tokenize)
  else()
    list(FIND bad_args "${flag}" at)
    math(EXPR at "${at} + 1")
    list(REMOVE_AT bad_args ${at})
    list(INSERT bad_args ${at} "${value}")
  endif()
  foreach(ranks IN ITEMS 2 3)
    math(EXPR healthy "${ranks} - 1")
    execute_process(COMMAND "${MPIEXEC}" --oversubscribe -np ${healthy} "${FORWARD}" ${args}
                            : -np 1 "${FORWARD}" ${bad_args}
                    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE error TIMEOUT 60)
    if(NOT status EQUAL 2)
      message(FATAL_ERROR "forward_mpi: rank ${healthy} of ${ranks} given ${flag}: exit '${status}', not 2\n${error}")
    endif()
    string(FIND "${error}" "${expected}" found)
    string(FIND "${error}" "rank ${healthy} of ${ranks} stopped before the forward" named)
    if(found EQUAL -1 OR named EQUAL -1)
      message(FATAL_ERROR "forward_mpi: rank ${healthy} of ${ranks} given ${flag}: no '${expected}' and 'rank "
                          "${healthy} of ${ranks} stopped before the forward' in\n${error}")
    endif()
  endforeach()
endforeach()
message(STATUS "forward_mpi: a rank failing alone ends the run with status 2 and its message")
