#include "tensor_rows.hpp"

#include <cstring>
#include <string>

#include "kvcache/numeric.hpp"
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
  const std::string expected = std::string(name) + " must be [" + std::to_string(rows) + ", " +
                               std::to_string(heads) + ", " + std::to_string(dim) +
                               "] row-major float32, float16 or bfloat16 in host memory";
  const bool host = t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
  const bool shaped = t.ndim == 3 && t.shape[0] == static_cast<std::int64_t>(rows) &&
                      t.shape[1] == heads && t.shape[2] == dim;
  const bool dense = t.strides == nullptr || (shaped && t.strides[2] == 1 && t.strides[1] == dim &&
                                              t.strides[0] == std::int64_t{heads} * dim);
  const bool typed = t.dtype.lanes == 1 && ((t.dtype.code == kDLFloat && t.dtype.bits == 32) ||
                                            (t.dtype.code == kDLFloat && t.dtype.bits == 16) ||
                                            (t.dtype.code == kDLBfloat && t.dtype.bits == 16));
  if (!host || !shaped || !dense || !typed || (rows > 0 && t.data == nullptr))
    throw Error(Code::invalid_argument, expected);
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
