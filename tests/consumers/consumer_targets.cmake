# consumer_add_programs(<kind>): the programs every CMake consumer project builds from consumer.cpp,
# with CONSUMER_KIND="<kind>":
#   consumer         links diffattn::diffattn
#   consumer_native  links diffattn::diffattn and the opt-in diffattn::native, which must carry
#                    -march=native whenever this project's compiler takes it (so a consumer gets
#                    the machine's vector ISA, whichever way it found diffattn)
include(CheckCXXCompilerFlag)
set(_consumer_source "${CMAKE_CURRENT_LIST_DIR}/consumer.cpp")

function(consumer_add_programs kind)
  add_executable(consumer "${_consumer_source}")
  target_link_libraries(consumer PRIVATE diffattn::diffattn)
  target_compile_definitions(consumer PRIVATE "CONSUMER_KIND=\"${kind}\"")

  if(NOT TARGET diffattn::native)
    message(FATAL_ERROR "diffattn::native is missing (${kind})")
  endif()
  get_target_property(options diffattn::native INTERFACE_COMPILE_OPTIONS)
  check_cxx_compiler_flag(-march=native consumer_has_march_native)
  # In-tree the options sit in $<BUILD_INTERFACE:...>: look for the flag in the text.
  if(consumer_has_march_native AND NOT options MATCHES "-march=native")
    message(FATAL_ERROR "diffattn::native carries '${options}', not -march=native (${kind})")
  endif()
  message(STATUS "diffattn::native (${kind}): ${options}")
  add_executable(consumer_native "${_consumer_source}")
  target_link_libraries(consumer_native PRIVATE diffattn::diffattn diffattn::native)
  target_compile_definitions(consumer_native PRIVATE "CONSUMER_KIND=\"${kind} + diffattn::native\"")
endfunction()
