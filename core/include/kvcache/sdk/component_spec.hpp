// What a plugin exports of each component: made by kvcache::sdk::component<T>() (plugin.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "kvcache/capabilities.hpp"
#include "kvcache/plugin_abi.h"

namespace kvcache::sdk {

struct Availability {
  bool available = true;
  std::string reason;  // why not, when !available
};

using kvcache::Capabilities;

// One exported component; made by component<T>().
struct ComponentSpec {
  std::uint32_t kind = 0;
  std::string name;
  std::string version;
  Capabilities capabilities;
  int32_t (*availability)(kvc_error*) = nullptr;
  const void* table = nullptr;
};

}  // namespace kvcache::sdk
