# Build-wide settings: build type, warnings, output folders, ccache, GPU toolchain detection.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CheckLanguage)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_C_STANDARD 11)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
# Plugins export only their entry function; the core exports only what KVCACHE_API marks.
set(CMAKE_CXX_VISIBILITY_PRESET hidden)
set(CMAKE_C_VISIBILITY_PRESET hidden)
set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)

# libkvcache and the in-tree plugins share one folder: "the directory of libkvcache" is a
# discovery location, so a build tree works exactly like an install.
set(KVCACHE_OUTPUT_DIR "${PROJECT_BINARY_DIR}/lib")
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY "${KVCACHE_OUTPUT_DIR}")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
# Plugins install next to libkvcache, in the folder that discovery searches relative to it.
set(KVCACHE_INSTALL_PLUGIN_DIR "${CMAKE_INSTALL_LIBDIR}/kvcache/plugins")
set(KVCACHE_INSTALL_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/kvcache")

add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra;-Wpedantic>"
                    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
# Kernels silence GCC-only diagnostics by name; clang (the sanitizer and fuzz builds) ignores them.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Wno-unknown-warning-option>")
endif()

# The presets turn this on: a warning fails the build (C and C++; nvcc and hipcc output stays
# advisory, their toolchains differ by machine).
option(KVCACHE_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
if(KVCACHE_WARNINGS_AS_ERRORS)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Werror>")
endif()

# Sanitizers for the whole build (the sanitize and tsan presets): "address,undefined" or "thread".
# A finding ends the program (no recover), so a test that trips one fails.
set(KVCACHE_SANITIZE "" CACHE STRING "sanitizers to build with, e.g. address,undefined")
if(KVCACHE_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${KVCACHE_SANITIZE};-fno-sanitize-recover=all;-fno-omit-frame-pointer>")
  add_link_options("-fsanitize=${KVCACHE_SANITIZE}")
  # GCC's flow warnings misfire on instrumented code (std::regex, std::function at -O1); the
  # default build keeps them.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Wno-maybe-uninitialized>")
  endif()
endif()

# libFuzzer (clang, the fuzz preset): every object gets coverage instrumentation, and the fuzz
# targets of tests/fuzz link libFuzzer's main. Without it those targets replay their corpus.
option(KVCACHE_FUZZ "Build the libFuzzer targets (clang)" OFF)
if(KVCACHE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVCACHE_FUZZ needs clang (libFuzzer); use the fuzz preset")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
endif()

option(KVCACHE_BUILD_TESTS "Build the GoogleTest suites" ON)

# GPU backends default to ON exactly when their toolchain is present.
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
set(_kvcache_cuda_found OFF)
if(CMAKE_CUDA_COMPILER)
  set(_kvcache_cuda_found ON)
endif()
option(KVCACHE_WITH_CUDA "Build the CUDA backend plugin" ${_kvcache_cuda_found})

find_program(KVCACHE_HIPCC hipcc)
set(_kvcache_hip_found OFF)
if(KVCACHE_HIPCC)
  set(_kvcache_hip_found ON)
endif()
option(KVCACHE_WITH_HIP "Build the ROCm/HIP backend plugin" ${_kvcache_hip_found})

message(STATUS "kvcache: build type ${CMAKE_BUILD_TYPE}; ccache: ${CCACHE_PROGRAM}")
message(STATUS "kvcache: KVCACHE_WITH_CUDA=${KVCACHE_WITH_CUDA} (nvcc found: ${_kvcache_cuda_found})")
message(STATUS "kvcache: KVCACHE_WITH_HIP=${KVCACHE_WITH_HIP} (hipcc found: ${_kvcache_hip_found})")
