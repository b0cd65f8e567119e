# Checks that the documents the code leans on stay in step with it (run as `cmake -P`):
#   CHECK=catalogue  every row of docs/errors.md's catalogue has a TEST_CASE of the same name in
#                    tests/catalogue/test_bad_input_catalogue.cpp, and every TEST_CASE there a row;
#   CHECK=citations  every "docs/math.md §n" cited under include/, tests/, examples/, bench/,
#                    fuzz/ and tools/ names a section that docs/math.md has, and nothing cites
#                    the old out-of-repo "SPEC n";
#   CHECK=retrieval  every table line of the README and of docs/retrieval.md between
#                    "<!-- retrieval tables -->" and "<!-- /retrieval tables -->" is a line of
#                    docs/retrieval/tables.md, the committed output of scripts/retrieval-report.sh
#                    (their figures are that run's, not typed in), and each has at least 10.
# SOURCE_DIR is the project's source directory.
cmake_minimum_required(VERSION 3.20)

set(_failures "")

# The lines of a file as a CMake list (";" would split a line and "[" "]" would stop the list
# splitting at the line ends, so all three are hidden).
function(read_lines path out)
  file(READ "${path}" _text)
  string(REPLACE ";" "<semicolon>" _text "${_text}")
  string(REPLACE "[" "<lbracket>" _text "${_text}")
  string(REPLACE "]" "<rbracket>" _text "${_text}")
  string(REPLACE "\n" ";" _lines "${_text}")
  set(${out} "${_lines}" PARENT_SCOPE)
endfunction()

# The first capture of `regex` in every line of `path` that matches it.
function(catalogue_names path regex out)
  read_lines("${path}" _lines)
  list(FILTER _lines INCLUDE REGEX "${regex}")
  set(_names "")
  foreach(_line IN LISTS _lines)
    string(REGEX MATCH "${regex}" _m "${_line}")
    list(APPEND _names "${CMAKE_MATCH_1}")
  endforeach()
  set(${out} "${_names}" PARENT_SCOPE)
endfunction()

if(CHECK STREQUAL "catalogue")
  catalogue_names("${SOURCE_DIR}/docs/errors.md" "^\\| \\*\\*([^*]+)\\*\\*" _row_names)
  catalogue_names("${SOURCE_DIR}/tests/catalogue/test_bad_input_catalogue.cpp" "^TEST_CASE\\(\"([^\"]+)\"" _case_names)
  list(LENGTH _row_names _n_rows)
  list(LENGTH _case_names _n_cases)
  if(_n_rows EQUAL 0 OR _n_cases EQUAL 0)
    list(APPEND _failures "found ${_n_rows} catalogue rows and ${_n_cases} TEST_CASEs")
  endif()
  foreach(_name IN LISTS _row_names)
    if(NOT _name IN_LIST _case_names)
      list(APPEND _failures "docs/errors.md row \"${_name}\" has no TEST_CASE")
    endif()
  endforeach()
  foreach(_name IN LISTS _case_names)
    if(NOT _name IN_LIST _row_names)
      list(APPEND _failures "TEST_CASE \"${_name}\" has no row in docs/errors.md")
    endif()
  endforeach()
  message(STATUS "catalogue: ${_n_rows} rows, ${_n_cases} TEST_CASEs")

elseif(CHECK STREQUAL "citations")
  # The sections docs/math.md has: "## n." and "### n.m" headings.
  file(STRINGS "${SOURCE_DIR}/docs/math.md" _headings REGEX "^##+ [0-9]+(\\.[0-9]+)*[ .]")
  set(_sections "")
  foreach(_h IN LISTS _headings)
    string(REGEX MATCH "^##+ ([0-9]+(\\.[0-9]+)*)" _m "${_h}")
    list(APPEND _sections "${CMAKE_MATCH_1}")
  endforeach()
  set(_files "")
  foreach(_dir include tests examples bench fuzz tools scripts docs)
    file(GLOB_RECURSE _found "${SOURCE_DIR}/${_dir}/*.hpp" "${SOURCE_DIR}/${_dir}/*.cpp"
         "${SOURCE_DIR}/${_dir}/*.py" "${SOURCE_DIR}/${_dir}/*.md" "${SOURCE_DIR}/${_dir}/*.sh"
         "${SOURCE_DIR}/${_dir}/*.txt" "${SOURCE_DIR}/${_dir}/*.in")
    list(APPEND _files ${_found})
  endforeach()
  list(APPEND _files "${SOURCE_DIR}/README.md")
  set(_n_citations 0)
  foreach(_file IN LISTS _files)
    file(READ "${_file}" _text)
    file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_file}")
    string(REGEX MATCHALL "math\\.md §[0-9]+(\\.[0-9]+)?" _cites "${_text}")
    foreach(_cite IN LISTS _cites)
      math(EXPR _n_citations "${_n_citations} + 1")
      string(REGEX REPLACE "^math\\.md §" "" _section "${_cite}")
      if(NOT _section IN_LIST _sections)
        list(APPEND _failures "${_rel} cites docs/math.md §${_section}, which docs/math.md does not have")
      endif()
    endforeach()
    string(REGEX MATCHALL "SPEC [0-9]+" _old "${_text}")
    if(_old)
      list(APPEND _failures "${_rel} cites the out-of-repo ${_old}; cite docs/math.md §n")
    endif()
  endforeach()
  if(_n_citations EQUAL 0)
    list(APPEND _failures "no docs/math.md citation found at all")
  endif()
  message(STATUS "citations: ${_n_citations} to docs/math.md, sections ${_sections}")

elseif(CHECK STREQUAL "retrieval")
  read_lines("${SOURCE_DIR}/docs/retrieval/tables.md" _tables)
  foreach(_doc IN ITEMS README.md docs/retrieval.md)
    read_lines("${SOURCE_DIR}/${_doc}" _doc_lines)
    set(_inside OFF)
    set(_n_lines 0)
    foreach(_line IN LISTS _doc_lines)
      if(_line STREQUAL "<!-- retrieval tables -->")
        set(_inside ON)
      elseif(_line STREQUAL "<!-- /retrieval tables -->")
        set(_inside OFF)
      elseif(_inside AND _line MATCHES "^\\|")
        math(EXPR _n_lines "${_n_lines} + 1")
        if(NOT _line IN_LIST _tables)
          list(APPEND _failures "${_doc} table line not in docs/retrieval/tables.md: ${_line}")
        endif()
      endif()
    endforeach()
    if(_n_lines LESS 10)
      list(APPEND _failures "found ${_n_lines} table lines in the retrieval tables blocks of ${_doc}")
    endif()
    message(STATUS "retrieval: ${_n_lines} table lines of ${_doc}, all from docs/retrieval/tables.md")
  endforeach()

else()
  message(FATAL_ERROR "check_docs.cmake: CHECK must be catalogue, citations or retrieval, got \"${CHECK}\"")
endif()

if(_failures)
  list(JOIN _failures "\n  " _text)
  message(FATAL_ERROR "check_docs (${CHECK}):\n  ${_text}")
endif()
