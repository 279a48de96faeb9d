#include "kvcache/remote/transports.hpp"

#include "kvcache/nearest_name.hpp"
#include "kvcache/remote/memory_byte_store.hpp"

namespace kvcache::remote {

std::vector<std::string> transport_names(const Registry& registry) {
  std::vector<std::string> names{"memory"};
  for (const std::string& name : registry.names(ComponentKind::transport)) names.push_back(name);
  return names;
}

std::unique_ptr<ByteStore> make_transport(const RemoteSettings& settings,
                                          const Registry& registry) {
  const std::string& name = settings.transport.name;
  if (name == "memory") {
    if (settings.endpoints.size() != 1)
      throw Error(Code::invalid_argument,
                  "the memory transport takes one endpoint (remote.endpoints), the name of its "
                  "space; got " +
                      std::to_string(settings.endpoints.size()));
    return std::make_unique<MemoryByteStore>(MemorySpace::named(settings.endpoints.front()));
  }
  if (registry.find(ComponentKind::transport, name) == nullptr) {
    const std::vector<std::string> names = transport_names(registry);
    throw Error(Code::invalid_argument, "unknown transport '" + name + "'" +
                                            did_you_mean(name, names) +
                                            "; transports: " + name_list(names));
  }
  nlohmann::json options = settings.transport.options;
  options["endpoints"] = settings.endpoints;
  return registry.create_transport(name, options);
}

}  // namespace kvcache::remote
