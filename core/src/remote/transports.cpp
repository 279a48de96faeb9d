#include "kvcache/remote/transports.hpp"

#include "kvcache/nearest_name.hpp"
#include "kvcache/remote/memory_byte_store.hpp"

namespace kvcache::remote {

std::vector<std::string> transport_names() {
  return {"memory"};
}

std::unique_ptr<ByteStore> make_transport(const RemoteSettings& settings) {
  const std::string& name = settings.transport.name;
  if (name == "memory") {
    if (settings.endpoints.size() != 1)
      throw Error(Code::invalid_argument,
                  "the memory transport takes one endpoint (remote.endpoints), the name of its "
                  "space; got " +
                      std::to_string(settings.endpoints.size()));
    return std::make_unique<MemoryByteStore>(MemorySpace::named(settings.endpoints.front()));
  }
  throw Error(Code::invalid_argument, "unknown transport '" + name + "'" +
                                          did_you_mean(name, transport_names()) +
                                          "; transports: " + name_list(transport_names()));
}

}  // namespace kvcache::remote
