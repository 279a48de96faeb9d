// Symbol visibility of libkvcache: everything is hidden unless marked KVCACHE_API.
#pragma once

#define KVCACHE_API __attribute__((visibility("default")))
