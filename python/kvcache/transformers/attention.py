"""The attention implementation "kvcache" and its mask function, registered with transformers.

transformers calls a layer's `past_key_values.update(k, v, layer)` and then the attention
function with what update returned, but never passes the cache itself. KVCache's update hands
itself over to the attention function through a thread-local slot, which the attention function
checks by the identity of the key tensor, so a stale or foreign hand-over is never used.
"""

import math
import threading

from kvcache.errors import Unsupported

NAME = "kvcache"
_slot = threading.local()


def hand_over(cache, layer, key):
    """Called by KVCache's update: the next attention call of this thread is layer `layer`'s."""
    _slot.value = (cache, layer, key)


def _take(key, layer):
    held = getattr(_slot, "value", None)
    _slot.value = None
    if held is None or held[2] is not key:
        raise TypeError(
            "attention 'kvcache' runs over a kvcache.transformers.KVCache: pass one as "
            "past_key_values (use_cache=True); this call's keys did not come from one")
    cache, held_layer, _ = held
    if held_layer != layer:
        raise RuntimeError(f"attention 'kvcache': keys of layer {held_layer} reached layer {layer}")
    return cache


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query [batch, q_heads, q_len, head_dim], key and value
    this step's new states (the cache holds the rest); returns [batch, q_len, q_heads, head_dim]."""
    cache = _take(key, module.layer_idx)
    if dropout and module.training:
        raise Unsupported("attention 'kvcache' has no attention dropout (call model.eval())")
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise Unsupported(f"attention 'kvcache' does not support {name}")
    if getattr(module, "sinks", None) is not None:
        raise Unsupported("attention 'kvcache' does not support learned attention sinks")
    head_dim = query.shape[-1]
    if scaling is not None and not math.isclose(scaling, head_dim ** -0.5, rel_tol=1e-6):
        raise Unsupported(f"attention 'kvcache' scales by 1/sqrt(head_dim={head_dim}); "
                          f"this model asks for {scaling}")
    return cache.attend(module.layer_idx, query, key, value, attention_mask), None


def padding_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, **kwargs):
    """transformers' mask interface: kvcache's own mask (causal, a window, sinks) is applied in
    its kernels, so all the attention needs is which columns hold a token: the 2D padding mask,
    [batch, kv_length] bool, or None when there is no padding."""
    if kwargs.get("use_vmap"):
        raise Unsupported("attention 'kvcache' applies its configured mask; this model adds a "
                          "mask function of its own (or_mask_function / and_mask_function)")
    if kv_offset:
        raise Unsupported("attention 'kvcache': a mask with a key offset (a static sliding cache)")
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise Unsupported("attention 'kvcache' takes a 2D padding mask, not a prepared 4D one")
    return attention_mask.bool()


def register():
    """Registers "kvcache" as an attention implementation and its mask function (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, padding_mask)
