// Rows of a host tensor [rows, heads, head_dim] in float32, float16 or bfloat16, read as float32.
#pragma once

#include <cstdint>
#include <string>

#include <dlpack/dlpack.h>

#include "kvcache/status.hpp"

namespace kvcache::cpu {

class InputRows {
 public:
  // Checks the tensor: host memory, 3-d [rows, heads, dim], row-major, a supported dtype.
  InputRows(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
            const char* name);

  // The row of (r, h) as float32: in place for float32 input, else converted into `scratch`.
  const float* row(std::uint64_t r, std::uint32_t h, float* scratch) const {
    const std::uint64_t index = (r * heads_ + h) * dim_;
    if (code_ == kDLFloat && bits_ == 32) return reinterpret_cast<const float*>(base_) + index;
    widen(reinterpret_cast<const std::uint16_t*>(base_) + index, scratch);
    return scratch;
  }

 private:
  // float16 or bfloat16 row to float32 (AVX-512 where present).
  void widen(const std::uint16_t* in, float* out) const;

  const std::byte* base_;
  std::uint32_t heads_;
  std::uint32_t dim_;
  std::uint8_t code_;
  std::uint8_t bits_;
};

// Checks that `t` is a writable host float32 tensor of exactly [rows, heads, dim], row-major.
float* output_rows(DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                   const char* name);

}  // namespace kvcache::cpu
