#include "tensor_rows.hpp"

#include <cstring>
#include <string>

#include "kvcache/numeric.hpp"
#include "kvcache/sdk/row_tensor.hpp"
#include "kvcache/status.hpp"

namespace scalar {

using kvcache::Code;
using kvcache::Error;

TensorRows::TensorRows(const DLTensor& t, std::uint64_t rows, std::uint32_t heads,
                       std::uint32_t dim, const char* name)
    : base_(static_cast<std::byte*>(t.data) + t.byte_offset),
      heads_(heads),
      dim_(dim),
      dtype_(t.dtype) {
  (void)kvcache::read_rows(t, {rows, heads, dim}, name);
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw Error(Code::invalid_argument, std::string(name) + " must be in host memory");
}

void TensorRows::read(std::uint64_t row, std::uint32_t head, float* out) const {
  const std::byte* p = element(row, head);
  if (dtype_.bits == 32) {
    std::memcpy(out, p, std::size_t{dim_} * sizeof(float));
    return;
  }
  for (std::uint32_t i = 0; i < dim_; ++i) {
    std::uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = dtype_.code == kDLFloat ? kvcache::float_from_fp16(h) : kvcache::float_from_bf16(h);
  }
}

void TensorRows::write(std::uint64_t row, std::uint32_t head, const float* in) const {
  std::byte* p = element(row, head);
  if (dtype_.bits == 32) {
    std::memcpy(p, in, std::size_t{dim_} * sizeof(float));
    return;
  }
  for (std::uint32_t i = 0; i < dim_; ++i) {
    const std::uint16_t h =
        dtype_.code == kDLFloat ? kvcache::fp16_from_float(in[i]) : kvcache::bf16_from_float(in[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

}  // namespace scalar
