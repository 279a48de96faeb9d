"""kvcache as the KV cache of Hugging Face transformers' models (docs/transformers.md).

    import kvcache.transformers                      # registers the attention "kvcache"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="kvcache")
    cache = kvcache.transformers.KVCache(model, format="int8-per-token")
    model.generate(ids, past_key_values=cache, ...)

The model's K/V go into kvcache's pages in the configured format, and attention runs in kvcache's
kernels over those pages; transformers never sees a copy of the cache.
"""

from kvcache.transformers.attention import register
from kvcache.transformers.cache import KVCache
from kvcache.transformers.model import refusal

register()

__all__ = ["KVCache", "refusal", "register"]
