// Rows of a host tensor [rows, heads, head_dim] in float32, float16 or bfloat16, read as float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "kvcache/sdk/row_tensor.hpp"
#include "kvcache/status.hpp"

namespace kvcache::cpu {

class InputRows {
 public:
  // Checks the tensor: host memory, and rows as kvcache/sdk/row_tensor.hpp reads them.
  InputRows(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
            const char* name);

  // Asks for the row of (r, h) to be brought into cache while other work goes on.
  void prefetch(std::uint64_t r, std::uint32_t h) const {
    const std::uint32_t bytes = type_ == RowType::float32 ? 4 : 2;
    const std::byte* p = base_ + (r * heads_ + h) * dim_ * bytes;
    for (std::uint32_t offset = 0; offset < dim_ * bytes; offset += 64)
      __builtin_prefetch(p + offset, 0, 2);
  }

  // The row of (r, h) as float32: in place for float32 input, else converted into `scratch`.
  const float* row(std::uint64_t r, std::uint32_t h, float* scratch) const {
    const std::uint64_t index = (r * heads_ + h) * dim_;
    if (type_ == RowType::float32) return reinterpret_cast<const float*>(base_) + index;
    widen(reinterpret_cast<const std::uint16_t*>(base_) + index, scratch);
    return scratch;
  }

 private:
  // float16 or bfloat16 row to float32 (AVX-512 or AVX2 where present).
  void widen(const std::uint16_t* in, float* out) const;

  const std::byte* base_;
  std::uint32_t heads_;
  std::uint32_t dim_;
  RowType type_;
};

// A row buffer on a cache-line boundary: widened rows are read back at once by the encoders, and
// misaligned 64-byte vectors would defeat store-to-load forwarding.
class RowBuffer {
 public:
  explicit RowBuffer(std::size_t floats) : storage_(floats + 16) {}
  float* data() {
    void* p = storage_.data();
    std::size_t space = storage_.size() * sizeof(float);
    return static_cast<float*>(std::align(64, (storage_.size() - 16) * sizeof(float), p, space));
  }

 private:
  std::vector<float> storage_;
};

// Error(invalid_argument) unless `t` is in host memory (pageable or pinned): what cpu-tbb reads
// and writes directly.
void check_host(const DLTensor& t, const char* name);

// Checks that `t` is a writable host float32 tensor of exactly [rows, heads, dim], row-major.
float* output_rows(DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                   const char* name);

}  // namespace kvcache::cpu
