// Arrays from Python as the C++ API's DLTensors, zero-copy: any object nanobind takes as an
// ndarray (numpy through the buffer protocol or DLPack, anything with __dlpack__). An array of
// another dtype is a TypeError and one of another shape or layout a ValueError, each naming the
// layout expected; nothing is ever copied or converted behind the caller's back.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <nanobind/ndarray.h>

namespace kvcache::python {

// What the library reads (k, v, q) may be a read-only array (a memory-mapped .npy, say); what it
// writes (out) must be writable, which nanobind checks.
using InputArray = nanobind::ndarray<nanobind::ro, nanobind::device::cpu>;
using OutputArray = nanobind::ndarray<nanobind::device::cpu>;

// A view of `array` as a DLTensor (its shape and strides live in the ndarray, which the caller
// keeps alive while the view is used). `what` names it in errors, e.g. "k"; `shape` is what it
// must be, three axes named in `axes` ("tokens, kv_heads, head_dim"). Read as every backend reads
// rows (kvcache/sdk/row_tensor.hpp), in host memory.
DLTensor float_rows(const InputArray& array, const char* what,
                    std::initializer_list<std::int64_t> shape, const char* axes);
DLTensor float_rows(const OutputArray& array, const char* what,
                    std::initializer_list<std::int64_t> shape, const char* axes);

// A float32 numpy array of this shape that takes over `data`.
nanobind::object numpy_of(std::unique_ptr<float[]> data, std::initializer_list<std::size_t> shape);
// A new zeroed float32 numpy array of this shape, and its data.
struct NewArray {
  nanobind::object array;
  float* data = nullptr;
};
NewArray new_float32(std::initializer_list<std::size_t> shape);

// Copies of C++ vectors as 1-d numpy arrays.
nanobind::object to_numpy(const std::vector<std::int32_t>& values);
nanobind::object to_numpy(const std::vector<std::int64_t>& values);
nanobind::object to_numpy(const std::vector<float>& values);

// Token ids as int32: a 1-d C-contiguous int32 array (zero-copy) or any sequence of ints.
std::vector<std::int32_t> token_ids(const nanobind::handle& tokens);

}  // namespace kvcache::python
