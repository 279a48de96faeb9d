#include "kernels/quantized_query.hpp"

namespace kvcache::cpu {

QuantizedQuery::QuantizedQuery(VectorIsa isa, std::uint32_t group, std::uint32_t dim,
                               bool int4_keys, std::pmr::memory_resource* memory)
    : storage_(memory) {
  const std::size_t parts = dim / 32, heads = group;
  const bool wide = isa == VectorIsa::avx2;
  // Floats first, then the codes (in the floats after them: a buffer of floats is aligned for
  // floats and for the codes, bytes or int16, whatever resource it comes from).
  const std::size_t floats = wide ? parts * 8 * (int4_keys ? 2 : 1) : heads * parts * 2;
  const std::size_t code_bytes = heads * dim * (wide ? 2 : 1);
  storage_.resize(floats + (code_bytes + sizeof(float) - 1) / sizeof(float));
  float* f = storage_.data();
  auto* after = reinterpret_cast<std::byte*>(f + floats);
  if (wide) {
    pair_steps = {f, parts * 8};
    if (int4_keys) pair_sums = {f + parts * 8, parts * 8};
    wide_codes = {reinterpret_cast<std::int16_t*>(after), heads * dim};
  } else {
    part_steps = {f, heads * parts};
    part_sums = {f + heads * parts, heads * parts};
    codes = {reinterpret_cast<std::int8_t*>(after), heads * dim};
  }
}

}  // namespace kvcache::cpu
