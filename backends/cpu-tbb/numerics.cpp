#include "numerics.hpp"

#include "kernels/block16.hpp"
#include "kernels/cpu_features.hpp"

namespace kvcache::cpu {

nlohmann::json attention_numerics() {
  nlohmann::json n = nlohmann::json::object();
  const VectorIsa isa = vector_isa();
  // Integer key passes dot int8 queries with the codes (VNNI on AVX-512; vpmaddwd without it on
  // AVX2): q rounded to int8 per 64 elements, scaled by its largest |element| / 127. Accumulated
  // scores keep the float logits, whose weights must match the reference.
  if (isa == VectorIsa::avx512 ? has_vnni() : isa == VectorIsa::avx2)
    n["query_rounding"] = {{"formats", {"int8-per-token", "int4-group"}},
                           {"bits", 8},
                           {"block", 64},
                           {"except_with_scores", true}};
  // The AVX-512 int4 value pass (VNNI and VBMI, head_dim 64 or 128) rounds softmax weights to
  // bytes: each off by at most `error` of 1/kLargestByteWeight of the block's largest weight.
  if (isa == VectorIsa::avx512 && has_vnni() && has_vbmi())
    n["value_weight_rounding"] = {{"formats", {"int4-group"}},
                                  {"head_dims", {64, 128}},
                                  {"levels", kLargestByteWeight},
                                  {"error", 0.52}};
  return n;
}

}  // namespace kvcache::cpu
