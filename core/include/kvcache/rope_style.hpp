// Which elements of a head rotate together, as a query's rotations name it (query_rotation.hpp):
// plugin-safe, where the rest of RoPE (rope.hpp) is the host's.
#pragma once

#include <cstdint>

namespace kvcache {

// Which elements of a head rotate together.
enum class RopeStyle : std::uint32_t {
  neox = 0,  // element i with i + dims / 2 (rotate_half: Llama, Mistral, Qwen in Hugging Face)
  gptj = 1,  // element 2i with 2i + 1 (GPT-J, llama.cpp's own order)
};

}  // namespace kvcache
