// The numeric contract of cpu-tbb's attention with the kernels this process uses (its
// capabilities' numerics, docs/plugin-abi.md "Numerics"): where results differ from float
// arithmetic, by how much, and why. The conformance suite derives its bounds from it.
#pragma once

#include <nlohmann/json.hpp>

namespace kvcache::cpu {

nlohmann::json attention_numerics();

}  // namespace kvcache::cpu
