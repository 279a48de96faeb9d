// `kvcache bench`'s quant_error: the mean relative error of the config's K format against
// float32, over 256 normal rows stored and gathered back through its backend.
#pragma once

#include <memory>

#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"

namespace kvcache::tool {

double quantization_error(const Config& config, std::shared_ptr<const Registry> registry);

}  // namespace kvcache::tool
