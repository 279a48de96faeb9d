"""The transformers suite's pieces: random-weight models of several families, each as a pair
with the same weights (one on transformers' sdpa and DynamicCache, one on kvcache), and the
comparison of two generate() results."""

import copy

import pytest
import torch
from transformers import (AutoModelForCausalLM, DynamicCache, LlamaConfig, MistralConfig,
                          Phi3Config, Qwen2Config, Qwen3Config)

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


class Pair:
    """One model twice: `ref` on sdpa with DynamicCache, `kv` on kvcache."""

    def __init__(self, config, seed=0):
        torch.manual_seed(seed)
        self.ref = AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                    attn_implementation="sdpa").eval()
        self.kv = AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                   attn_implementation="kvcache").eval()
        self.kv.load_state_dict(self.ref.state_dict())
        self.config = config

    def cache(self, **config):
        config.setdefault("format", "fp32")
        config.setdefault("cache", {"page_size": 16, "capacity": "64MiB"})
        return kt.KVCache(self.kv, **config)

    def dynamic(self):
        return DynamicCache(config=self.ref.config)


@pytest.fixture(params=sorted(FAMILIES))
def pair(request):
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
