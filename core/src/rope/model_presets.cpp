#include "kvcache/model_presets.hpp"

namespace kvcache {

// From each model's config.json on the Hugging Face hub (rope_theta, rope_scaling,
// max_position_embeddings, sliding_window and the layers' types); every one rotates in
// rotate_half order (neox) over the whole head.
const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    const auto rope = [](double theta, RopeScaling scaling = {}) {
      return Rope{theta, 0, RopeStyle::neox, scaling};
    };
    const RopeScaling llama31{RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 8192.0};
    return std::vector<ModelPreset>{
        {"llama-3-8b", {32, 32, 8, 128}, rope(500000.0), 8192},
        {"llama-3-70b", {80, 64, 8, 128}, rope(500000.0), 8192},
        {"llama-3.1-8b", {32, 32, 8, 128}, rope(500000.0, llama31), 131072},
        {"llama-3.1-70b", {80, 64, 8, 128}, rope(500000.0, llama31), 131072},
        {"mistral-7b", {32, 32, 8, 128}, rope(1000000.0), 32768},  // v0.3
        {"qwen2.5-7b", {28, 28, 4, 128}, rope(1000000.0), 32768},
        {"smollm2-135m", {30, 9, 3, 64}, rope(100000.0), 8192},
        {"smollm2-360m", {32, 15, 5, 64}, rope(100000.0), 8192},
        // Local layers turn by theta 10,000 without scaling; layers 5, 11, ..., 59 are global.
        {"gemma-3-27b",
         {62, 32, 16, 128},
         rope(1000000.0, {RopeScaling::Kind::linear, 8.0}),
         131072,
         {5, 1024}},
        // Even layers slide over 128 tokens, odd ones are global; YaRN scaling is not stated.
        {"gpt-oss-20b", {24, 64, 8, 64}, rope(150000.0), 131072, {1, 128}},
    };
  }();
  return presets;
}

const ModelPreset* find_model_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace kvcache
