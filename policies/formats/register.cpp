// The formats plugin: the built-in storage formats as quantizer components.
#include "builtin_quantizer.hpp"
#include "kvcache/sdk/plugin.hpp"

using kvcache::FormatKind;
using kvcache::reference::Builtin;
using kvcache::sdk::component;

KVCACHE_PLUGIN("formats", "0.1.0", component<Builtin<FormatKind::fp32>>("fp32", "1.0.0"),
               component<Builtin<FormatKind::fp16>>("fp16", "1.0.0"),
               component<Builtin<FormatKind::bf16>>("bf16", "1.0.0"),
               component<Builtin<FormatKind::fp8_e4m3>>("fp8-e4m3", "1.0.0"),
               component<Builtin<FormatKind::int8_per_token>>("int8-per-token", "1.0.0"),
               component<Builtin<FormatKind::int4_group>>("int4-group", "1.0.0"),
               component<Builtin<FormatKind::kivi_k>>("kivi-k", "1.0.0"))
