// The resp plugin: one transport component.
#include "kvcache/sdk/plugin.hpp"
#include "resp_transport.hpp"

KVCACHE_PLUGIN("resp", "0.1.0",
               kvcache::sdk::component<kvcache::resp::RespTransport>("resp", "0.1.0"))
