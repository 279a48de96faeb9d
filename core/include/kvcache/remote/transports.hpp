// The transports a `remote:` section may name: `memory` (in core: in-process spaces, for tests
// and for several Caches of one process) and the transport components of the plugins loaded
// (docs/remote-tier.md, "Transports").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvcache/config.hpp"
#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/registry.hpp"
#include "kvcache/remote/byte_store.hpp"

namespace kvcache::remote {

KVCACHE_API std::vector<std::string> transport_names(const Registry& registry);
// The transport of `settings`, made with its options and endpoints. Throws Error for an unknown
// name (naming the nearest), endpoints it cannot use, or options its plugin refuses.
KVCACHE_API std::unique_ptr<ByteStore> make_transport(const RemoteSettings& settings,
                                                      const Registry& registry);

}  // namespace kvcache::remote
