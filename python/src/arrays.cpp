#include "arrays.hpp"

#include <cstring>

#include <nanobind/stl/vector.h>

#include "kvcache/sdk/row_tensor.hpp"

namespace nb = nanobind;

namespace kvcache::python {
namespace {

// Takes a copy of a C++ vector into a new numpy array of its element type.
template <class T>
nb::object copy_to_numpy(const std::vector<T>& values) {
  T* data = new T[values.size()];
  std::memcpy(data, values.data(), values.size() * sizeof(T));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, {values.size()}, owner));
}

// Checked by the reader every backend uses (kvcache/sdk/row_tensor.hpp): a wrong element type is
// a TypeError, a wrong shape or a strided view a ValueError, and nothing is ever copied.
template <class Array>
DLTensor rows_of(const Array& a, const char* what, std::initializer_list<std::int64_t> shape,
                 const char* axes) {
  const auto* want = shape.begin();
  std::int64_t strides[3] = {};
  for (std::size_t i = 0; i < a.ndim() && i < 3; ++i) strides[i] = a.stride(i);
  const nb::dlpack::dtype t = a.dtype();
  DLTensor tensor{};
  tensor.data = const_cast<void*>(a.data());
  tensor.device = {kDLCPU, 0};
  tensor.ndim = static_cast<std::int32_t>(a.ndim());
  tensor.dtype = {t.code, t.bits, t.lanes};
  tensor.shape = const_cast<std::int64_t*>(a.shape_ptr());
  tensor.strides = a.ndim() == 3 ? strides : nullptr;  // the shape is checked first
  const RowShape rows{static_cast<std::uint64_t>(want[0]), static_cast<std::uint32_t>(want[1]),
                      static_cast<std::uint32_t>(want[2])};
  if (const auto problem = row_problem(tensor, rows, what, axes)) {
    if (problem->kind == RowProblem::Kind::dtype) throw nb::type_error(problem->message.c_str());
    throw nb::value_error(problem->message.c_str());
  }
  tensor.strides = nullptr;  // checked row-major
  return tensor;
}

}  // namespace

DLTensor float_rows(const InputArray& a, const char* what,
                    std::initializer_list<std::int64_t> shape, const char* axes) {
  return rows_of(a, what, shape, axes);
}
DLTensor float_rows(const OutputArray& a, const char* what,
                    std::initializer_list<std::int64_t> shape, const char* axes) {
  return rows_of(a, what, shape, axes);
}

nb::object numpy_of(std::unique_ptr<float[]> data, std::initializer_list<std::size_t> shape) {
  float* raw = data.release();
  nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float>(raw, shape, owner));
}

NewArray new_float32(std::initializer_list<std::size_t> shape) {
  std::size_t n = 1;
  for (const std::size_t s : shape) n *= s;
  std::unique_ptr<float[]> data(new float[n]());
  float* raw = data.get();
  return {numpy_of(std::move(data), shape), raw};
}

nb::object to_numpy(const std::vector<std::int32_t>& values) {
  return copy_to_numpy(values);
}
nb::object to_numpy(const std::vector<std::int64_t>& values) {
  return copy_to_numpy(values);
}
nb::object to_numpy(const std::vector<float>& values) {
  return copy_to_numpy(values);
}

std::vector<std::int32_t> token_ids(const nb::handle& tokens) {
  constexpr const char* expected =
      "token ids must be a 1-d C-contiguous int32 array or a list of ints";
  nb::ndarray<nb::device::cpu, const std::int32_t, nb::ndim<1>, nb::c_contig> array;
  if (nb::try_cast(tokens, array, false))  // no conversion: exactly int32
    return {array.data(), array.data() + array.shape(0)};
  nb::ndarray<nb::ro> other;
  std::vector<std::int32_t> ids;
  if (nb::try_cast(tokens, other, false) || !nb::try_cast(tokens, ids))
    throw nb::type_error(expected);
  return ids;
}

}  // namespace kvcache::python
