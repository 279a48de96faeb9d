// The transports a `remote:` section may name. In core: `memory` (in-process spaces, for tests
// and for several Caches of one process).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvcache/config.hpp"
#include "kvcache/export.hpp"
#include "kvcache/remote/byte_store.hpp"

namespace kvcache::remote {

KVCACHE_API std::vector<std::string> transport_names();
// The transport of `settings`, connected to its endpoints. Throws Error(invalid_argument) for an
// unknown name (naming the nearest) or endpoints it cannot use.
KVCACHE_API std::unique_ptr<ByteStore> make_transport(const RemoteSettings& settings);

}  // namespace kvcache::remote
