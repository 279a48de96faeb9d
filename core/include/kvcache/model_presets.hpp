// Published models by name: their attention shape, their RoPE and the context they were trained
// on. A config names one (`model: {preset: smollm2-135m}`) instead of stating each number; the
// tool's `plan --preset` reads the same table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/rope.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// A hybrid model's layers: runs of `local` sliding-window layers (the last `window` positions),
// each run followed by one global layer, repeated over the layers (Gemma 3: 5 of 1,024, then 1;
// GPT-OSS: 1 of 128, then 1). local == 0: every layer is global.
struct LocalLayers {
  std::uint32_t local = 0;
  std::uint32_t window = 0;
  bool global(std::uint32_t layer) const { return local == 0 || layer % (local + 1) == local; }
};

struct ModelPreset {
  std::string name;
  ModelShape shape;
  Rope rope;  // a hybrid model's global layers' (its local ones may turn by another theta)
  std::uint64_t context = 0;  // tokens the model was trained on
  LocalLayers layers = {};
};

KVCACHE_API const std::vector<ModelPreset>& model_presets();
// nullptr when no preset has that name.
KVCACHE_API const ModelPreset* find_model_preset(std::string_view name);

}  // namespace kvcache
