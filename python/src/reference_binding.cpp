// The reference, as the conformance suites use it: a format's encode and decode of rows (what
// every backend must store, byte for byte) and attention over float32 K/V in plain loops.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "arrays.hpp"
#include "bindings.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/reference_attention.hpp"

namespace nb = nanobind;

namespace kvcache::python {
namespace {

using Floats = nb::ndarray<nb::device::cpu, const float, nb::c_contig>;

std::vector<float> rows_through(const Floats& x, const std::string& name,
                                const std::string& options_json) {
  if (x.ndim() != 2) throw nb::value_error("x must be [rows, head_dim] float32, C-contiguous");
  const FormatSpec spec = parse_format(name, nlohmann::json::parse(options_json));
  const auto rows = static_cast<std::uint32_t>(x.shape(0)),
             dim = static_cast<std::uint32_t>(x.shape(1));
  const std::uint32_t group = spec.groups_tokens() ? spec.group : 1;
  if (rows % group != 0)
    throw nb::value_error(
        (name + " encodes groups of " + std::to_string(group) + " rows: give a multiple of it")
            .c_str());
  const TileLayout layout = format_layout(spec, dim, std::max<std::uint32_t>(group, 16));
  const std::size_t meta_bytes =
      spec.groups_tokens() ? std::size_t{dim} * 4 : layout.slot_meta_bytes;
  std::vector<float> out(std::size_t{rows} * dim);
  std::vector<std::byte> codes(group * layout.slot_code_bytes), meta(meta_bytes);
  for (std::uint32_t r = 0; r < rows; r += group) {
    const std::span<const float> in(x.data() + std::size_t{r} * dim, std::size_t{group} * dim);
    if (spec.groups_tokens()) {
      reference::encode_group(spec, in, dim, codes.data(), meta.data());
    } else {
      reference::encode(spec, in, codes.data(), meta.data());
    }
    for (std::uint32_t g = 0; g < group; ++g)
      reference::decode(spec, codes.data() + g * layout.slot_code_bytes, meta.data(),
                        std::span<float>(out.data() + std::size_t{r + g} * dim, dim));
  }
  return out;
}

}  // namespace

void bind_reference(nb::module_& m) {
  m.def(
      "reference_roundtrip",
      [](const Floats& x, const std::string& format, const std::string& options_json) {
        std::vector<float> out = rows_through(x, format, options_json);
        std::unique_ptr<float[]> data(new float[out.size()]);
        std::memcpy(data.get(), out.data(), out.size() * sizeof(float));
        return numpy_of(std::move(data), {x.shape(0), x.shape(1)});
      },
      nb::arg("x").noconvert(), nb::arg("format"), nb::arg("options_json") = "{}",
      "Rows [rows, head_dim] through a built-in format's reference encode and decode, as every "
      "backend stores them");
  m.def(
      "reference_attention",
      [](const Floats& q, const Floats& k, const Floats& v,
         nb::ndarray<nb::device::cpu, const std::int64_t, nb::ndim<1>, nb::c_contig> positions,
         const std::vector<std::pair<Position, Position>>& ranges, float scale) {
        if (q.ndim() != 2 || k.ndim() != 3 || v.ndim() != 3 || k.shape(0) != v.shape(0) ||
            k.shape(1) != v.shape(1) || k.shape(2) != q.shape(1) || v.shape(2) != q.shape(1) ||
            positions.shape(0) != k.shape(0) || k.shape(1) == 0 || q.shape(0) % k.shape(1) != 0)
          throw nb::value_error(
              "q must be [q_heads, head_dim], k and v [tokens, kv_heads, head_dim] float32 and "
              "positions [tokens] int64, with q_heads a multiple of kv_heads");
        const reference::AttentionShape shape{static_cast<std::uint32_t>(q.shape(0)),
                                              static_cast<std::uint32_t>(k.shape(1)),
                                              static_cast<std::uint32_t>(q.shape(1))};
        std::vector<PositionRange> visible;
        for (const auto& [begin, end] : ranges) visible.push_back({begin, end});
        const std::size_t n = k.shape(0) * k.shape(1) * k.shape(2);
        NewArray out = new_float32({q.shape(0), q.shape(1)});
        reference::attention(
            shape, {q.data(), q.shape(0) * q.shape(1)}, {k.data(), n}, {v.data(), n},
            {positions.data(), positions.shape(0)}, visible,
            scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(q.shape(1))),
            {out.data, q.shape(0) * q.shape(1)});
        return out.array;
      },
      nb::arg("q").noconvert(), nb::arg("k").noconvert(), nb::arg("v").noconvert(),
      nb::arg("positions").noconvert(), nb::arg("ranges"), nb::arg("scale") = 0.0f,
      "Attention of one query token over float32 K/V, keys at `positions` visible when one of "
      "`ranges` [(begin, end)] holds them; out [q_heads, head_dim] (zeros when none is visible)");
}

}  // namespace kvcache::python
