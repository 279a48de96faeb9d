# Third-party packages, all from Debian 12 (see README for the apt line).
include_guard(GLOBAL)
set(Boost_NO_WARN_NEW_VERSIONS ON)
find_package(Boost 1.74 REQUIRED)                 # Boost.DLL is header-only
find_package(spdlog REQUIRED)                     # shared: host and plugins share one registry
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dlpack REQUIRED)
find_package(TBB REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of the shared tier's keys
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)    # XXH3-128 of its values (header only)
find_package(GTest REQUIRED)                      # the conformance cases, in the tool and ctest
