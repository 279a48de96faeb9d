# cmake -DSOURCE_DIR=<repository> -DCLANG_FORMAT=<clang-format> -P format_check.cmake
# Fails when a C, C++ or CUDA source of the repository differs from what clang-format makes of it
# with the repository's .clang-format, and names each such file.
cmake_minimum_required(VERSION 3.25)
find_package(Git QUIET)
set(files "")
if(GIT_FOUND AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" ls-files -- "*.c" "*.h" "*.cpp" "*.hpp" "*.cu" "*.cuh"
                  WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE listed RESULT_VARIABLE code)
  string(REPLACE "\n" ";" files "${listed}")
else()  # a source tree without git: every such file but the build folders'
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/*.c" "${SOURCE_DIR}/*.h"
       "${SOURCE_DIR}/*.cpp" "${SOURCE_DIR}/*.hpp" "${SOURCE_DIR}/*.cu" "${SOURCE_DIR}/*.cuh")
  list(FILTER files EXCLUDE REGEX "^(build|\\.venv)[^/]*/")
endif()
list(FILTER files EXCLUDE REGEX "^$")
set(unformatted "")
foreach(file IN LISTS files)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror "${file}"
                  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE code OUTPUT_QUIET ERROR_QUIET)
  if(NOT code EQUAL 0)
    list(APPEND unformatted "${file}")
  endif()
endforeach()
list(LENGTH files checked)
if(unformatted)
  string(REPLACE ";" "\n  " listing "${unformatted}")
  message(FATAL_ERROR "not formatted (run clang-format -i on them):\n  ${listing}")
endif()
message(STATUS "${checked} files formatted as .clang-format says")
