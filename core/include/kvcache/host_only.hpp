// Included by the headers of what only libkvcache defines: the Cache and its steps, the config,
// the registry, RoPE's tables, the model presets, the reference attention, the remote tier. No
// plugin links libkvcache (docs/architecture.md, "Who may call what"), so such a header in a
// plugin is a mistake, told at compile time: kvcache_add_plugin defines KVCACHE_PLUGIN_BUILD.
#pragma once

#ifdef KVCACHE_PLUGIN_BUILD
#error \
    "a kvcache host header in a plugin: a plugin sees plugin_abi.h, the SDK, the interfaces (attention, cache_store, mask, quantizer, eviction, backend, formats) and the paging library"
#endif
