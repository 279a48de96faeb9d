// Helpers for fuzz targets whose code under test reads files or lines.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace kvcache::fuzz {

// The input as a file with this extension, rewritten on every call (one per process, so that
// parallel fuzzing jobs do not share it) and removed when the process ends.
inline std::filesystem::path as_file(const std::uint8_t* data, std::size_t size,
                                     const std::string& extension) {
  struct TempFile {
    std::filesystem::path path;
    ~TempFile() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  };
  static TempFile last;
  std::error_code ignored;
  if (!last.path.empty()) std::filesystem::remove(last.path, ignored);
  last.path = std::filesystem::temp_directory_path() /
              ("kvcache-fuzz-" + std::to_string(::getpid()) + extension);
  std::ofstream(last.path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return last.path;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kvcache::fuzz
