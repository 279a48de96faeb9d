"""The Cache, configured by a file, a YAML text or keywords (one per config section)."""

import json

from kvcache import _kvcache


def _config_text(config, sections):
    if config is not None and sections:
        raise TypeError("give a config (file or YAML text) or keyword sections, not both")
    if sections:  # JSON is YAML: each keyword a section, e.g. cache={"capacity": "64MiB"}
        return "\n".join(f"{key}: {json.dumps(value)}" for key, value in sections.items())
    return "" if config is None else str(config)


class Cache(_kvcache._Cache):
    """A KV cache: the first available backend of the config's list with its formats, mask and
    eviction policy. `Cache()` is the embedded default; `Cache("my.yaml")`, `Cache(yaml_text)` or
    `Cache(model={...}, backend=["cpu-tbb"], cache={...}, format={...}, mask={...},
    eviction={...})` state what differs from it. A bad config raises ConfigError with
    file:line:column diagnostics."""

    def __init__(self, config=None, **sections):
        super().__init__(_config_text(config, sections))

    def begin_step(self, sequences, new_tokens=1, stream=None, event=None):
        """Reserves new_tokens[i] tokens for sequences[i] (all or nothing, evicting per the
        policy; CacheFull carries the report when it cannot) and plans attention once for every
        layer. One sequence and one count may be given as plain ints.

        stream: the engine's CUDA or HIP stream (a torch.cuda.Stream, or its handle as an int)
        for every append and attention of the step, which then waits once, at finish(); event
        (a torch.cuda.Event or a handle): recorded by finish() instead of waiting. Only for a
        backend that takes engine streams (docs/engine-step.md#streams)."""
        if isinstance(sequences, int):
            sequences = [sequences]
        if isinstance(new_tokens, int):
            new_tokens = [new_tokens] * len(sequences)
        stream = getattr(stream, "cuda_stream", stream)
        event = getattr(event, "cuda_event", event)
        return super().begin_step(list(sequences), list(new_tokens), stream, event)


def reference_roundtrip(x, format, **options):
    """Rows [rows, head_dim] float32 through a built-in format's reference encode and decode:
    what every backend stores for them (kivi-k: a multiple of its group of rows)."""
    return _kvcache.reference_roundtrip(x, format, json.dumps(options))
