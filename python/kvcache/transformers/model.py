"""What a transformers model's config says to kvcache: its shape, its RoPE and its attention mask,
or why kvcache cannot be its cache."""

import math

from kvcache.errors import ConfigError, Unsupported


def _text(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def shape(config):
    """The model section of a kvcache config: layers, q_heads, kv_heads, head_dim."""
    q_heads = config.num_attention_heads
    return {
        "layers": config.num_hidden_layers,
        "q_heads": q_heads,
        "kv_heads": _text(config, "num_key_value_heads", default=q_heads),
        "head_dim": _text(config, "head_dim", default=config.hidden_size // q_heads),
    }


def rope(config):
    """The model's RoPE as kvcache's model.rope, or None when it has none or one kvcache cannot
    state (then only masks that place queries within the cache are refused). transformers 5
    keeps it in config.rope_parameters."""
    params = getattr(config, "rope_parameters", None)
    if not params or "rope_theta" not in params:
        return None
    head_dim = shape(config)["head_dim"]
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    dims = int(head_dim * (factor or 1.0))
    kind = params.get("rope_type", "default")
    out = {"theta": float(params["rope_theta"]), "dims": dims - dims % 2, "style": "neox"}
    if kind == "linear":
        out["scaling"] = {"type": "linear", "factor": float(params["factor"])}
    elif kind == "llama3":
        out["scaling"] = {
            "type": "llama3", "factor": float(params["factor"]),
            "low_freq_factor": float(params["low_freq_factor"]),
            "high_freq_factor": float(params["high_freq_factor"]),
            "original_context": int(params["original_max_position_embeddings"])}
    elif kind != "default":
        return None
    return out


def refusal(config):
    """Why kvcache cannot be this model's cache, or None. Each reason names the config key."""
    name = type(config).__name__
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "add_cross_attention", False):
        return f"{name}: cross-attention (is_encoder_decoder / add_cross_attention) is not supported"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return (f"{name}: attention soft-capping (attn_logit_softcapping="
                f"{config.attn_logit_softcapping}) is not supported by kvcache's kernels")
    if getattr(config, "model_type", None) == "gpt_oss":
        return (f"{name}: learned attention sinks (a logit per head that every query's softmax "
                "adds) are not supported by kvcache's kernels")
    layer_types = getattr(config, "layer_types", None)
    if layer_types and set(layer_types) - {"full_attention", "sliding_attention"}:
        return f"{name}: attention kind {sorted(set(layer_types))} is not supported"
    head_dim = shape(config)["head_dim"]
    scalar = getattr(config, "query_pre_attn_scalar", None)
    if scalar is not None and not math.isclose(scalar, head_dim):
        return (f"{name}: query_pre_attn_scalar={scalar} scales attention by other than "
                f"1/sqrt(head_dim={head_dim})")
    return None


def window(config):
    """The sliding window every layer uses, or None for full attention."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return config.sliding_window if set(layer_types) == {"sliding_attention"} else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return getattr(config, "sliding_window", None)


def layer_groups(config):
    """A hybrid model's `layers` section: its sliding and its full layers as two groups, each
    naming its layers (config.layer_types); None when every layer attends alike."""
    layer_types = getattr(config, "layer_types", None)
    if not layer_types or len(set(layer_types)) == 1:
        return None
    of = lambda kind: [i for i, t in enumerate(layer_types) if t == kind]
    return {"groups": {
        "sliding": {"mask": {"name": "sliding-window", "window": int(config.sliding_window)},
                    "layers": of("sliding_attention")},
        "full": {"mask": {"name": "causal"}, "layers": of("full_attention")}}}


def sections(config, user):
    """The kvcache config sections for a model: the user's keywords over what the model says.
    An explicit model section that disagrees with the model raises ConfigError naming both."""
    model = dict(shape(config))
    r = rope(config)
    if r is not None:
        model["rope"] = r
    given = dict(user.get("model") or {})
    for key, value in given.items():
        if key in model and model[key] != value:
            raise ConfigError(
                f"model.{key}: the kvcache config says {value!r}, the transformers model "
                f"({type(config).__name__}) says {model[key]!r}",
                [f"<keywords>: error: model.{key} {value!r} != {model[key]!r}"])
    model.update(given)
    out = dict(user)
    out["model"] = model
    fmt = out.get("format")
    if isinstance(fmt, str):  # one format for K and V
        out["format"] = {"k": fmt, "v": fmt}
    mask = out.get("mask")
    if isinstance(mask, dict) and mask.get("positions") == "cache" and "rope" not in model:
        raise Unsupported(f"mask {mask.get('name')} with positions: cache turns queries by the "
                          f"model's RoPE, and {type(config).__name__} has none kvcache can state")
    groups = layer_groups(config)
    if groups is not None and "layers" not in out:
        if out.get("mask") is not None:
            raise ConfigError(
                f"mask: {type(config).__name__} mixes sliding and full layers, each with its "
                f"own mask; give a layers section instead of one mask",
                [f"<keywords>: error: mask {out['mask']!r} for a hybrid model"])
        out["layers"] = groups
        out["cache"] = dict(out.get("cache") or {})
        out["cache"].setdefault("prefix_caching", False)  # not built for layer groups yet
    w = window(config)
    if w is not None:
        mask = out.get("mask")
        if mask is None:
            out["mask"] = {"name": "sliding-window", "window": int(w)}
        elif not (isinstance(mask, dict) and mask.get("name") == "sliding-window"
                  and mask.get("window") == w):
            raise ConfigError(
                f"mask: the kvcache config says {mask!r}, the transformers model "
                f"({type(config).__name__}) attends over a sliding window of {w}",
                [f"<keywords>: error: mask {mask!r} != sliding-window {w}"])
    return out
