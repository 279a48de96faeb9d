// Tensors on disk for the tool: NumPy .npy (read) and .safetensors (read and write). Enough of
// both formats for K/V dumps: little-endian float32/float16/bfloat16 and integer codes, C order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kvcache::tool {

// Shapes read from files are bounded before anything is sized from them.
inline constexpr std::int64_t kMaxDimension = std::int64_t{1} << 31;
inline constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 34;

struct Tensor {
  std::string dtype;  // safetensors names: F32, F16, BF16, I8, U8, U16, I32
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;

  std::size_t elements() const;
  // Throws Error(invalid_argument) naming `file` when a dimension is negative or too large.
  void check_size(const std::filesystem::path& file) const;
  // The values as float32 (F32, F16 and BF16 only).
  std::vector<float> to_float(const std::string& what) const;
  static Tensor of_floats(std::vector<std::int64_t> shape, const std::vector<float>& values);
};

// "name" -> tensor. A .npy file gives one tensor, named after the file's stem.
// Errors name the file and what was expected; a missing file is Error(not_found).
std::map<std::string, Tensor> read_tensors(const std::filesystem::path& file);
void write_safetensors(const std::filesystem::path& file,
                       const std::map<std::string, Tensor>& tensors);

std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace kvcache::tool
