// Rows of a host tensor [rows, heads, head_dim] in float32, float16 or bfloat16, read and written
// as float32: the K/V an engine appends, its queries, and the outputs of attention and gather.
#pragma once

#include <cstddef>
#include <cstdint>

#include <dlpack/dlpack.h>

namespace scalar {

class TensorRows {
 public:
  // Error(invalid_argument) naming `name` unless t is host memory of exactly [rows, heads, dim],
  // row-major, in one of the three dtypes.
  TensorRows(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
             const char* name);

  void read(std::uint64_t row, std::uint32_t head, float* out) const;
  void write(std::uint64_t row, std::uint32_t head, const float* in) const;

 private:
  std::byte* element(std::uint64_t row, std::uint32_t head) const {
    return base_ + (row * heads_ + head) * dim_ * (dtype_.bits / 8);
  }

  std::byte* base_;
  std::uint32_t heads_;
  std::uint32_t dim_;
  DLDataType dtype_;
};

}  // namespace scalar
