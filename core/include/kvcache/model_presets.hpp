// Published models by name: their attention shape, their RoPE and the context they were trained
// on. A config names one (`model: {preset: smollm2-135m}`) instead of stating each number; the
// tool's `plan --preset` reads the same table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvcache/export.hpp"
#include "kvcache/rope.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

struct ModelPreset {
  std::string name;
  ModelShape shape;
  Rope rope;
  std::uint64_t context = 0;  // tokens the model was trained on
};

KVCACHE_API const std::vector<ModelPreset>& model_presets();
// nullptr when no preset has that name.
KVCACHE_API const ModelPreset* find_model_preset(std::string_view name);

}  // namespace kvcache
