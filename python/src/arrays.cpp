#include "arrays.hpp"

#include <cstring>

#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace kvcache::python {
namespace {

std::string shape_text(std::initializer_list<std::int64_t> shape) {
  std::string text = "[";
  for (const std::int64_t n : shape) text += (text.size() > 1 ? ", " : "") + std::to_string(n);
  return text + "]";
}

template <class Array>
std::string shape_text(const Array& a) {
  std::string text = "[";
  for (std::size_t i = 0; i < a.ndim(); ++i)
    text += (i > 0 ? ", " : "") + std::to_string(a.shape(i));
  return text + "]";
}

// Takes a copy of a C++ vector into a new numpy array of its element type.
template <class T>
nb::object copy_to_numpy(const std::vector<T>& values) {
  T* data = new T[values.size()];
  std::memcpy(data, values.data(), values.size() * sizeof(T));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, {values.size()}, owner));
}

template <class Array>
DLTensor rows_of(const Array& a, const char* what, std::initializer_list<std::int64_t> shape,
                 const char* axes) {
  const std::string expected = std::string(what) + " must be " + shape_text(shape) + " (" + axes +
                               ") float32, float16 or bfloat16, C-contiguous";
  const nb::dlpack::dtype t = a.dtype();
  const bool floats =
      t.lanes == 1 &&
      ((t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) &&
        (t.bits == 32 || t.bits == 16)) ||
       (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16));
  if (!floats) throw nb::type_error((expected + "; got another dtype").c_str());
  bool same = a.ndim() == shape.size();
  std::size_t axis = 0;
  for (const std::int64_t n : shape) same = same && static_cast<std::int64_t>(a.shape(axis++)) == n;
  if (!same) throw nb::value_error((expected + "; got " + shape_text(a)).c_str());
  std::int64_t step = 1;  // row-major strides, in elements
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) > 1 && a.stride(i) != step)
      throw nb::value_error(
          (expected + "; got a strided view (copy it, e.g. numpy.ascontiguousarray)").c_str());
    step *= static_cast<std::int64_t>(a.shape(i));
  }
  DLTensor tensor{};
  tensor.data = const_cast<void*>(a.data());
  tensor.device = {kDLCPU, 0};
  tensor.ndim = static_cast<std::int32_t>(a.ndim());
  tensor.dtype = {t.code, t.bits, t.lanes};
  tensor.shape = const_cast<std::int64_t*>(a.shape_ptr());
  tensor.strides = nullptr;  // checked row-major above
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
