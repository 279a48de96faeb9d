// The rows a step carries (k and v to append, q to attend, out to write): a DLTensor of
// [rows, heads, head_dim] float32, float16 or bfloat16, row-major. One reader checks them for the
// paging kit's plan, every backend and Python, so that a wrong tensor is told the same
// everywhere. Where the rows live (host or device) is the caller's to check: it differs by backend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <dlpack/dlpack.h>

#include "kvcache/status.hpp"

namespace kvcache {

enum class RowType : std::uint8_t { float32, float16, bfloat16 };

struct RowShape {
  std::uint64_t rows = 0;
  std::uint32_t heads = 0;
  std::uint32_t dim = 0;
};

// What is wrong with a row tensor: its element type (Python raises TypeError for it), or its
// shape, strides or data (ValueError), and the sentence that says so.
struct RowProblem {
  enum class Kind : std::uint8_t { dtype, shape, strides, data } kind;
  std::string message;
};

namespace detail {

inline std::string row_shape_text(const std::int64_t* shape, int ndim) {
  std::string text = "[";
  for (int i = 0; i < ndim; ++i) text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

inline std::optional<RowType> row_type(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLFloat && t.bits == 32) return RowType::float32;
  if (t.code == kDLFloat && t.bits == 16) return RowType::float16;
  if (t.code == kDLBfloat && t.bits == 16) return RowType::bfloat16;
  return std::nullopt;
}

}  // namespace detail

// Null when `t` holds `shape`'s rows; else what is wrong, as "<name> must be [rows, heads, dim]
// (<axes>), row-major, float32, float16 or bfloat16; got ...". `axes` names the three axes for a
// reader who may not know them (Python's "tokens, kv_heads, head_dim"); empty: left out. An axis
// of extent 1 may have any stride (DLPack producers differ there).
inline std::optional<RowProblem> row_problem(const DLTensor& t, RowShape shape, const char* name,
                                             const char* axes = "") {
  const std::int64_t want[3] = {static_cast<std::int64_t>(shape.rows), shape.heads, shape.dim};
  const auto problem = [&](RowProblem::Kind kind, const std::string& got) {
    std::string message = std::string(name) + " must be " + detail::row_shape_text(want, 3);
    if (*axes != '\0') message += std::string(" (") + axes + ")";
    message += ", row-major, float32, float16 or bfloat16; got " + got;
    return RowProblem{kind, std::move(message)};
  };
  if (!detail::row_type(t.dtype))
    return problem(RowProblem::Kind::dtype, "DLPack type code " + std::to_string(t.dtype.code) +
                                                ", " + std::to_string(t.dtype.bits) + " bits, " +
                                                std::to_string(t.dtype.lanes) + " lanes");
  if (t.ndim != 3 || t.shape[0] != want[0] || t.shape[1] != want[1] || t.shape[2] != want[2])
    return problem(RowProblem::Kind::shape, detail::row_shape_text(t.shape, t.ndim));
  if (t.strides != nullptr) {
    std::int64_t step = 1;  // row-major strides, in elements
    for (int i = 2; i >= 0; --i) {
      if (t.shape[i] > 1 && t.strides[i] != step)
        return problem(RowProblem::Kind::strides,
                       "a strided view (copy it into contiguous memory first)");
      step *= t.shape[i];
    }
  }
  if (t.data == nullptr && shape.rows > 0) return problem(RowProblem::Kind::data, "no data");
  return std::nullopt;
}

// The element type of `t` once it holds `shape`'s rows; Error(invalid_argument) with the
// problem's sentence otherwise.
inline RowType read_rows(const DLTensor& t, RowShape shape, const char* name) {
  if (auto p = row_problem(t, shape, name)) throw Error(Code::invalid_argument, p->message);
  return *detail::row_type(t.dtype);
}

}  // namespace kvcache
