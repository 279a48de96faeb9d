"""kvcache: paged, quantized KV caches for LLM inference.

    cache = kvcache.Cache(model={"layers": 2, "q_heads": 4, "kv_heads": 2, "head_dim": 64},
                          cache={"capacity": "64MiB"})
    seq = cache.add_sequence()
    step = cache.begin_step(seq, 8)          # reserve, positions, mask and plan, once
    for layer in range(2):
        step.append(layer, k, v)             # [8, kv_heads, head_dim]
        out = step.prefill(layer, q)         # [8, q_heads, head_dim] -> out, float32
    report = step.finish()                   # what the eviction policy removed

Arrays are numpy arrays or anything with __dlpack__ on the host, float32, float16 or bfloat16,
C-contiguous; they are used in place, never copied or converted.
"""

from kvcache._kvcache import (
    EvictionReport,
    ModelShape,
    Step,
    check_config,
    formats,
    plugins,
    reference_attention,
)
from kvcache.cache import Cache, reference_roundtrip
from kvcache.errors import (
    CacheFull,
    ConfigError,
    Error,
    EvictionError,
    InvalidArgument,
    NotFound,
    OutOfMemory,
    Unavailable,
    Unsupported,
)

__all__ = [
    "Cache", "Step", "EvictionReport", "ModelShape", "plugins", "formats", "check_config",
    "reference_roundtrip", "reference_attention", "Error", "InvalidArgument", "NotFound",
    "OutOfMemory", "Unsupported", "Unavailable", "ConfigError", "EvictionError", "CacheFull",
]
