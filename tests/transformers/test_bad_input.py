"""What kvcache.transformers refuses, and how: a model it cannot serve at KVCache(model), a
config that disagrees with the model, a wrong dtype, a cache too small, a bad crop, and a
generate() interrupted part way, after which the cache goes on as if it had not run."""

import pytest
import torch
from transformers import BartConfig, Gemma2Config, Gemma3TextConfig, GPT2Config, GptOssConfig

import kvcache
import kvcache.transformers as kt
from conftest import COMMON, FAMILIES, Pair, generate, logit_gap, prompt


@pytest.mark.parametrize("config, reason", [
    (Gemma2Config(**COMMON), "attention soft-capping"),
    (Gemma3TextConfig(**{**COMMON, "num_hidden_layers": 6}, head_dim=32), "query_pre_attn_scalar=256"),
    (BartConfig(vocab_size=64, d_model=32), "cross-attention"),
    (GptOssConfig(**{**COMMON, "num_local_experts": 2}), "learned attention sinks"),
])
def test_a_model_it_cannot_serve_is_refused_with_the_reason(config, reason):
    assert reason in kt.refusal(config)
    with pytest.raises(kvcache.Unsupported, match=reason):
        kt.KVCache(config)


def test_a_mask_that_needs_rope_on_a_model_without_it():
    config = GPT2Config(vocab_size=64, n_embd=64, n_layer=2, n_head=2)
    with pytest.raises(kvcache.Unsupported, match="has none kvcache can state"):
        kt.KVCache(config, mask={"name": "sink-window", "sinks": 4, "window": 8,
                                 "positions": "cache"})


def test_a_config_that_disagrees_with_the_model_names_both():
    with pytest.raises(kvcache.ConfigError, match="says 4, the transformers model .* says 2"):
        kt.KVCache(FAMILIES["llama"], model={"kv_heads": 4})
    with pytest.raises(kvcache.ConfigError, match="sliding window of 12"):
        kt.KVCache(FAMILIES["mistral"], mask={"name": "causal"})


def test_a_wrong_dtype_is_a_type_error():
    pair = Pair(FAMILIES["llama"])
    pair.kv.double()
    with pytest.raises(TypeError, match="torch.float64"):
        generate(pair.kv, prompt(5), pair.cache(), max_new_tokens=2, do_sample=False)


def test_a_batch_larger_than_the_cache_is_cache_full():
    pair = Pair(FAMILIES["llama"])
    cache = pair.cache(cache={"page_size": 16, "capacity": "96KiB"})
    with pytest.raises(kvcache.CacheFull) as e:
        generate(pair.kv, prompt(100, batch=4), cache, max_new_tokens=2, do_sample=False)
    assert e.value.report is not None


def test_crop_keeps_transformers_contract_and_changes_nothing_when_refused():
    pair = Pair(FAMILIES["llama"])
    cache = pair.cache()
    generate(pair.kv, prompt(20), cache, max_new_tokens=5, do_sample=False)
    held, length = cache.get_seq_length(), cache.kv.length(cache.rows[0])
    with pytest.raises(ValueError, match="positive count is not supported"):
        cache.crop(3)
    with pytest.raises(ValueError, match="the cache holds 24 tokens"):
        cache.crop(-25)
    assert (cache.get_seq_length(), cache.kv.length(cache.rows[0])) == (held, length)
    cache.crop(-4)
    assert (cache.get_seq_length(), cache.kv.length(cache.rows[0])) == (20, 20)


def test_an_interrupted_generate_leaves_the_cache_usable():
    pair = Pair(FAMILIES["llama"])
    ids = prompt(12)
    cache = pair.cache()
    first = generate(pair.kv, ids, cache, max_new_tokens=4, do_sample=False)
    held = cache.get_seq_length()
    mlp = pair.kv.model.layers[1].mlp

    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    pair.kv.model.layers[1].mlp.forward = fail  # after layer 0 appended and attended
    with pytest.raises(RuntimeError, match="interrupted"):
        generate(pair.kv, first.sequences, cache, max_new_tokens=4, do_sample=False)
    del mlp.forward
    assert cache.get_seq_length() == held
    kw = dict(max_new_tokens=4, do_sample=False)
    a = generate(pair.kv, first.sequences, cache, **kw)  # undoes the half-written step first
    b = generate(pair.ref, first.sequences, pair.dynamic(), **kw)
    assert torch.equal(a.sequences, b.sequences)
    assert logit_gap(a, b) < 1e-4
    assert cache.kv.length(cache.rows[0]) == cache.get_seq_length()
