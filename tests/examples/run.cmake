# cmake -DMODE=<build|check|scalar|broken> -DBUILD_DIR=<kvcache build> -DEXAMPLES=<examples/>
#       -DWORK_DIR=<scratch> -P run.cmake
#
# The third-party kit as an outside author meets it, from a temporary install prefix:
#   build   installs kvcache into WORK_DIR/prefix and builds every folder of examples/ against it
#           alone (find_package(kvcache)), and a program with pkg-config;
#   check   the installed tool lists the examples' plugins beside its own, and a copy of the
#           prefix elsewhere loads its own (relocatable); engine_loop and
#           lfu_demo run; the nf4 format runs end to end (config check, bench, evaluate) and
#           passes `kvcache conformance --format nf4` on cpu-tbb;
#   scalar  `kvcache conformance --plugin <scalar-backend>` passes every case;
#   broken  a copy of scalar-backend with an off-by-one in its visible slots fails the runner,
#           which names the case and its first mismatch.
cmake_minimum_required(VERSION 3.25)
set(prefix "${WORK_DIR}/prefix")
set(tool "${prefix}/bin/kvcache")

# run(<command>...): fails the test unless the command exits 0; its stdout in `output`.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

# build_example(<source folder> <build folder>): configured and built against the prefix only.
function(build_example source binary)
  set(launcher "")
  find_program(CCACHE ccache)
  if(CCACHE)
    set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE}")
  endif()
  run("${CMAKE_COMMAND}" -S "${source}" -B "${binary}" -G Ninja "-DCMAKE_PREFIX_PATH=${prefix}"
      -DCMAKE_BUILD_TYPE=Release ${launcher})
  run("${CMAKE_COMMAND}" --build "${binary}")
endfunction()

set(examples engine_loop mask format eviction scalar-backend)

if(MODE STREQUAL "build")
  file(REMOVE_RECURSE "${WORK_DIR}")
  run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
  foreach(example IN LISTS examples)
    build_example("${EXAMPLES}/${example}" "${WORK_DIR}/${example}")
  endforeach()
  # An engine built with pkg-config alone, from the same prefix.
  set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
  run(pkg-config --cflags --libs kvcache)
  string(STRIP "${output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(c++ "${EXAMPLES}/engine_loop/engine_loop.cpp" ${flags} -o "${WORK_DIR}/engine_loop_pc")
  message(STATUS "built ${examples} and engine_loop with pkg-config against ${prefix}")

elseif(MODE STREQUAL "check")
  string(JOIN ":" plugin_path "${WORK_DIR}/mask" "${WORK_DIR}/format" "${WORK_DIR}/eviction"
         "${WORK_DIR}/scalar-backend")
  set(ENV{KVCACHE_PLUGIN_PATH} "${plugin_path}")
  run("${tool}" plugins --json)
  string(JSON count LENGTH "${output}" components)
  set(found "")
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${output}" components ${i} name)
    string(JSON file GET "${output}" components ${i} file)
    string(JSON available GET "${output}" components ${i} available)
    list(APPEND found "${name}")
    if(name MATCHES "^(recent-half|nf4|lfu|scalar)$" AND NOT available)
      message(FATAL_ERROR "${name} is not available:\n${output}")
    endif()
    if(name STREQUAL "causal" AND NOT file MATCHES "^${prefix}/lib/kvcache/plugins/")
      message(FATAL_ERROR "causal should come from the installed plugin folder, not ${file}")
    endif()
  endforeach()
  foreach(expected recent-half nf4 lfu scalar causal sink-window cpu-tbb)
    if(NOT expected IN_LIST found)
      message(FATAL_ERROR "'${expected}' not listed by the installed tool:\n${output}")
    endif()
  endforeach()
  string(JSON rejected LENGTH "${output}" rejected)
  if(NOT rejected EQUAL 0)
    message(FATAL_ERROR "unexpected rejected plugins:\n${output}")
  endif()
  message(STATUS "installed kvcache lists: ${found}")

  # Relocatable: the prefix moved elsewhere still finds its library and plugins.
  set(moved "${WORK_DIR}/moved")
  file(REMOVE_RECURSE "${moved}")
  file(COPY "${prefix}/" DESTINATION "${moved}")
  set(ENV{KVCACHE_PLUGIN_PATH} "")
  run("${moved}/bin/kvcache" plugins --json)
  if(NOT output MATCHES "\"file\": \"${moved}/lib/kvcache/plugins/kvcache-masks.so\"")
    message(FATAL_ERROR "the moved prefix should load its own plugins:\n${output}")
  endif()
  file(REMOVE_RECURSE "${moved}")
  set(ENV{KVCACHE_PLUGIN_PATH} "${plugin_path}")

  foreach(engine "${WORK_DIR}/engine_loop/engine_loop" "${WORK_DIR}/engine_loop_pc")
    run("${engine}")
    if(NOT output MATCHES "64 tokens cached, x\\[0\\] = -?[0-9]+\\.[0-9]+")
      message(FATAL_ERROR "${engine} printed:\n${output}")
    endif()
  endforeach()
  run("${WORK_DIR}/eviction/lfu_demo")
  if(NOT output STREQUAL "preempted: rarely, lately\n")
    message(FATAL_ERROR "lfu should preempt the sequence used least often only:\n${output}")
  endif()

  # The storage format from outside, through the installed tool.
  file(WRITE "${WORK_DIR}/nf4.yaml"
       "model: {layers: 2, q_heads: 8, kv_heads: 2, head_dim: 64}\n"
       "backend: [cpu-tbb]\n"
       "cache: {page_size: 16, capacity: 64MiB}\n"
       "format: {k: nf4, v: {name: nf4, group: 64}}\n")
  run("${tool}" config check "${WORK_DIR}/nf4.yaml")
  if(NOT output MATCHES "name: nf4")
    message(FATAL_ERROR "config check did not resolve the nf4 format:\n${output}")
  endif()
  run("${tool}" bench attention --format nf4:group=64 --tokens 512 --json)
  string(JSON gbps GET "${output}" gbps)
  if(NOT gbps GREATER 0)
    message(FATAL_ERROR "bench attention with nf4 read nothing:\n${output}")
  endif()
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  run("${Python3_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/write_kv_npy.py" "${WORK_DIR}/kv.npy")
  run("${tool}" evaluate --kv "${WORK_DIR}/kv.npy" --formats nf4,int4-group --json)
  if(NOT output MATCHES "\"nf4\"")
    message(FATAL_ERROR "evaluate did not rank nf4:\n${output}")
  endif()
  run("${tool}" conformance --backend cpu-tbb --format nf4 --json)
  string(JSON passed GET "${output}" summary passed)
  string(JSON failed GET "${output}" summary failed)
  if(NOT passed GREATER 0 OR NOT failed EQUAL 0)
    message(FATAL_ERROR "kvcache conformance with nf4 on cpu-tbb: ${passed} passed, ${failed} failed")
  endif()
  message(STATUS "kvcache conformance --backend cpu-tbb --format nf4: ${passed} passed")

elseif(MODE STREQUAL "scalar")
  run("${tool}" conformance --plugin "${WORK_DIR}/scalar-backend/kvcache-scalar-backend.so"
      --backend scalar)
  message(STATUS "${output}")
  if(NOT output MATCHES " 0 failed\n$")
    message(FATAL_ERROR "the scalar backend must pass every case")
  endif()

elseif(MODE STREQUAL "broken")
  set(copy "${WORK_DIR}/broken-source")
  file(REMOVE_RECURSE "${copy}")
  file(COPY "${EXAMPLES}/scalar-backend/" DESTINATION "${copy}")
  file(READ "${copy}/scalar_attention.cpp" source)
  string(REPLACE "slot = span.begin;" "slot = span.begin + 1;" broken "${source}")
  if(broken STREQUAL source)
    message(FATAL_ERROR "scalar_attention.cpp no longer has the loop this test breaks")
  endif()
  file(WRITE "${copy}/scalar_attention.cpp" "${broken}")
  build_example("${copy}" "${WORK_DIR}/broken")
  execute_process(
    COMMAND "${tool}" conformance --plugin "${WORK_DIR}/broken/kvcache-scalar-backend.so"
            --backend scalar --format fp16 --filter "*DecodeRaggedBatch*:*StoredBytes*"
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}")
  if(code EQUAL 0)
    message(FATAL_ERROR "the runner passed a backend that skips each query's first key")
  endif()
  if(NOT out MATCHES "failed, each with its first mismatch:\n  Backends/AttentionConformance\\.DecodeRaggedBatch/scalar_fp16"
     OR NOT out MATCHES "evaluates to"
     OR NOT out MATCHES "scalar +StoreConformance\\.StoredBytesEqualTheReference +[1-9][0-9]* +0 +0")
    message(FATAL_ERROR "the runner should fail DecodeRaggedBatch, naming its first mismatch, "
                        "and pass the store cases:\n${out}${err}")
  endif()
else()
  message(FATAL_ERROR "MODE must be build, check, scalar or broken, not '${MODE}'")
endif()
