// A DLPack tensor that carries its own shape and strides: a DLTensor points at shape arrays its
// caller must keep alive, which a temporary's do not outlive. A Tensor views memory it does not
// own and converts to the DLTensor the Cache takes; copies point at their own shape.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include <dlpack/dlpack.h>

#include "kvcache/status.hpp"

namespace kvcache {

class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  // Row-major (compact) tensor of `shape` at `data`.
  Tensor(void* data, DLDataType dtype, DLDevice device, std::initializer_list<std::int64_t> shape)
      : dl_{data, device, static_cast<std::int32_t>(shape.size()), dtype, nullptr, nullptr, 0} {
    if (shape.size() == 0 || shape.size() > kMaxRank)
      throw Error(Code::invalid_argument, "a Tensor has 1 to 4 dimensions");
    std::copy(shape.begin(), shape.end(), shape_.begin());
    dl_.shape = shape_.data();
  }
  // float32 in host memory; the const overload is for inputs (DLPack has no const tensor).
  static Tensor host(float* data, std::initializer_list<std::int64_t> shape) {
    return {data, {kDLFloat, 32, 1}, {kDLCPU, 0}, shape};
  }
  static Tensor host(const float* data, std::initializer_list<std::int64_t> shape) {
    return host(const_cast<float*>(data), shape);
  }

  Tensor(const Tensor& other) : shape_(other.shape_), dl_(other.dl_) { dl_.shape = shape_.data(); }
  Tensor& operator=(const Tensor& other) {
    shape_ = other.shape_;
    dl_ = other.dl_;
    dl_.shape = shape_.data();
    return *this;
  }

  const DLTensor& dl() const { return dl_; }
  DLTensor& dl() { return dl_; }
  operator const DLTensor&() const { return dl_; }  // NOLINT: a Tensor is used as a DLTensor
  operator DLTensor&() { return dl_; }              // NOLINT

 private:
  std::array<std::int64_t, kMaxRank> shape_{};
  DLTensor dl_;
};

}  // namespace kvcache
