// C ABI value types read back into their C++ twins (host side): the SDK's conversions.
#pragma once

#include "kvcache/sdk/detail/c_types.hpp"

namespace kvcache::plugin {

using sdk::detail::from_c;

}  // namespace kvcache::plugin
