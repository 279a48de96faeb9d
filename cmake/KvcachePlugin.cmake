# kvcache_add_plugin(<name> SOURCES ... [LINK ...] [OUTPUT_DIR dir] [EXPORTS symbol...] [INSTALL])
#
# Builds a kvcache plugin: a MODULE library named kvcache-<name>.so with hidden visibility that
# exports only `kvcache_plugin_entry` (and the C symbols EXPORTS names: a test's hooks). Used in-tree and by third parties (installed with the SDK).
# INSTALL puts it in <libdir>/kvcache/plugins, where kvcache looks relative to libkvcache.
include_guard(GLOBAL)

function(kvcache_add_plugin name)
  cmake_parse_arguments(ARG "INSTALL" "OUTPUT_DIR" "SOURCES;LINK;EXPORTS" ${ARGN})
  set(target kvcache-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME kvcache-${name}
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIR}")
  endif()
  # The host's headers refuse to compile here (kvcache/host_only.hpp).
  target_compile_definitions(${target} PRIVATE KVCACHE_PLUGIN_BUILD)
  if(TARGET kvcache::sdk)
    target_link_libraries(${target} PRIVATE kvcache::sdk)
  endif()
  if(ARG_LINK)
    target_link_libraries(${target} PRIVATE ${ARG_LINK})
  endif()
  if(ARG_INSTALL)
    include(GNUInstallDirs)
    install(TARGETS ${target} LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}/kvcache/plugins")
  endif()
  # Hidden visibility still leaves typeinfo, vtables and weak template instances of the standard
  # library dynamic; the version script keeps the entry alone, so no two plugins bind each other's.
  list(PREPEND ARG_EXPORTS kvcache_plugin_entry)
  list(JOIN ARG_EXPORTS "; " exported)
  set(map "${CMAKE_CURRENT_BINARY_DIR}/${target}.map")
  file(CONFIGURE OUTPUT "${map}" CONTENT "{ global: ${exported}; local: *; };\n")
  target_link_options(${target} PRIVATE "-Wl,--version-script=${map}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${map}")
  # A plugin that forgot a symbol must fail at link time, not at dlopen in the field. (Not under
  # clang's sanitizers: their runtime is linked into the executable, not into each library.)
  if(NOT (KVCACHE_SANITIZE AND CMAKE_CXX_COMPILER_ID MATCHES "Clang"))
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
endfunction()
