"""generate() of transformers on kvcache in every decoding strategy, against the same model on
sdpa with DynamicCache, in float32 with K/V in fp32: the same tokens, and logits within 1e-4 at
every step. Each family of conftest.FAMILIES runs each strategy."""

import torch

import copy

import pytest
from transformers import DynamicCache

from conftest import FAMILIES, HYBRID, Pair, generate, logit_gap, prompt

BAR = 1e-4


def same(a, b, rows=None):
    assert torch.equal(a.sequences, b.sequences), (a.sequences, b.sequences)
    gap = logit_gap(a, b, rows)
    assert gap < BAR, f"logits differ by {gap}"
    return gap


def test_greedy(pair):
    ids = prompt(20)
    same(generate(pair.kv, ids, pair.cache(), max_new_tokens=12, do_sample=False),
         generate(pair.ref, ids, pair.dynamic(), max_new_tokens=12, do_sample=False))


def test_sampling_with_a_fixed_seed(pair):
    ids = prompt(9, seed=2)
    kw = dict(max_new_tokens=12, do_sample=True, temperature=0.9, top_k=50)
    same(generate(pair.kv, ids, pair.cache(), seed=5, **kw),
         generate(pair.ref, ids, pair.dynamic(), seed=5, **kw))


def left_padded():
    """Two prompts of 17 and 6 tokens as one left-padded batch: the ids and the mask."""
    long, short = prompt(17, seed=3)[0], prompt(6, seed=4)[0]
    ids = torch.zeros(2, 17, dtype=torch.long)
    mask = torch.zeros(2, 17, dtype=torch.long)
    ids[0], mask[0] = long, 1
    ids[1, -6:], mask[1, -6:] = short, 1
    return ids, mask, short


def test_a_left_padded_batch(pair):
    ids, mask, short = left_padded()
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False)
    cache = pair.cache()
    a = generate(pair.kv, ids, cache, **kw)
    same(a, generate(pair.ref, ids, pair.dynamic(), **kw))
    # Padding is never stored: the short row holds its own tokens only.
    assert cache.kv.length(cache.rows[1]) == 6 + 9
    # Each row equals its prompt alone.
    alone = generate(pair.ref, short[None], pair.dynamic(), max_new_tokens=10, do_sample=False)
    assert torch.equal(a.sequences[1, -10:], alone.sequences[0, -10:])


def test_beam_search(pair):
    ids = prompt(11, seed=5)
    kw = dict(max_new_tokens=8, num_beams=4, do_sample=False, num_return_sequences=2)
    cache = pair.cache()
    same(generate(pair.kv, ids, cache, **kw), generate(pair.ref, ids, pair.dynamic(), **kw))
    assert len(cache.rows) == 4  # the beams, their shared pages forked copy-on-write


def test_assisted_generation_rolls_back_rejected_drafts(pair, monkeypatch):
    settings = {k: v for k, v in pair.config.to_dict().items() if k != "layer_types"}
    draft_config = pair.config.__class__(**{**settings, "num_hidden_layers": 1})
    draft = Pair(draft_config, seed=9).ref
    ids = prompt(10, seed=6)
    crops = []
    cache = pair.cache()
    real = cache.roll_back
    monkeypatch.setattr(cache, "roll_back", lambda n: (crops.append(n), real(n)))
    kw = dict(max_new_tokens=16, do_sample=False, assistant_model=draft)
    a = generate(pair.kv, ids, cache, **kw)
    b = generate(pair.ref, ids, pair.dynamic(), **kw)
    assert torch.equal(a.sequences, b.sequences)
    greedy = generate(pair.ref, ids, pair.dynamic(), max_new_tokens=16, do_sample=False)
    assert torch.equal(a.sequences, greedy.sequences)
    assert any(n < 0 for n in crops), f"no draft was rejected (crops {crops})"


def test_a_conversation_over_several_generate_calls(pair):
    ids = prompt(12, seed=7)
    cache, dynamic = pair.cache(), pair.dynamic()
    kw = dict(max_new_tokens=6, do_sample=False)
    a, b = generate(pair.kv, ids, cache, **kw), generate(pair.ref, ids, dynamic, **kw)
    same(a, b)
    turn = torch.cat([a.sequences, prompt(5, seed=8)], dim=1)
    same(generate(pair.kv, turn, cache, **kw), generate(pair.ref, turn, dynamic, **kw))
    assert cache.get_seq_length() == turn.shape[1] + 5


def test_a_shared_prefix_is_matched_across_requests(pair):
    system = prompt(40, seed=9)
    first = torch.cat([system, prompt(5, seed=10)], dim=1)
    second = torch.cat([system, prompt(7, seed=11)], dim=1)
    c1 = pair.cache()
    generate(pair.kv, first, c1, max_new_tokens=3, do_sample=False)
    c1.publish_prefix(first)
    c2 = type(c1).beside(c1)
    assert c2.match_prefix(second) == 32  # two whole pages of the system prompt
    kw = dict(max_new_tokens=6, do_sample=False)
    same(generate(pair.kv, second, c2, **kw), generate(pair.ref, second, pair.dynamic(), **kw))


def test_a_shared_prefix_through_the_remote_tier():
    pair = Pair(FAMILIES["llama"])
    remote = {"transport": "memory", "endpoints": ["transformers-test"], "model": "tiny@1"}
    system = prompt(40, seed=12)
    c1 = pair.cache(remote=remote)
    generate(pair.kv, system, c1, max_new_tokens=1, do_sample=False)
    c1.publish_prefix(system)
    assert c1.kv.flush_remote(timeout=10)
    c2 = pair.cache(remote=remote)  # another Cache: only the tier is shared
    second = torch.cat([system, prompt(4, seed=13)], dim=1)
    assert c2.match_prefix(second) == 32
    assert c2.kv.remote_stats()["hit_pages"] == 2
    kw = dict(max_new_tokens=5, do_sample=False)
    same(generate(pair.kv, second, c2, **kw), generate(pair.ref, second, pair.dynamic(), **kw))


def test_fp16_stays_within_its_rounding():
    pair = Pair(FAMILIES["llama"])
    ids = prompt(24, seed=14)
    kw = dict(max_new_tokens=16, do_sample=False)
    a = generate(pair.kv, ids, pair.cache(format="fp16"), **kw)
    b = generate(pair.ref, ids, pair.dynamic(), **kw)
    gap = logit_gap(a, b)
    print(f"\nfp16 on a random model: largest logit gap {gap:.3g}")
    assert gap < 0.05


def test_an_eviction_policy_with_a_matching_mask():
    """StreamingLLM through transformers: kvcache's sink-window mask and streaming eviction
    against transformers' own attention over the same visible tokens (a 4D mask of sinks plus
    the window), so the cache stays within its pages while the tokens agree."""
    pair = Pair(FAMILIES["llama"])
    sinks, window = 4, 16
    ids = prompt(30, seed=15)
    cache = pair.cache(mask={"name": "sink-window", "sinks": sinks, "window": window},
                       eviction={"name": "streaming", "sinks": sinks, "window": window})
    a = generate(pair.kv, ids, cache, max_new_tokens=20, do_sample=False)
    assert cache.kv.length(cache.rows[0]) <= sinks + window + 16  # at most a page beyond
    # The reference: sdpa on the whole sequence with the same visibility, one token at a time.
    seq = a.sequences
    with torch.no_grad():
        n = seq.shape[1]
        q = torch.arange(n)[:, None]
        k = torch.arange(n)[None, :]
        visible = (k <= q) & ((k < sinks) | (q - k < window))
        mask = torch.where(visible, 0.0, float("-inf"))[None, None]
        logits = pair.ref(seq, attention_mask=mask).logits[0]
    for step, x in enumerate(a.logits):
        at = 30 + step - 1
        assert (x[0] - logits[at]).abs().max().item() < BAR, f"step {step}"



@pytest.mark.parametrize("name", sorted(HYBRID))
def test_a_hybrid_model_in_each_strategy(name):
    """A sliding group and a full one (kvcache's layer groups) against transformers' own hybrid
    DynamicCache: greedy, sampling, a left-padded batch and beam search."""
    pair = Pair(HYBRID[name])
    cache = pair.cache()
    assert [g["name"] for g in cache.kv.groups()] == ["sliding", "full"]
    ids = prompt(20)
    greedy = dict(max_new_tokens=12, do_sample=False)
    same(generate(pair.kv, ids, cache, **greedy), generate(pair.ref, ids, pair.dynamic(), **greedy))
    sliding = cache.kv.groups()[0]["layers"][0]
    assert cache.kv.length(cache.rows[0], layer=sliding) <= 8 + 16  # the window and its page
    # The windows matter: the same weights with every layer seeing all its keys differ.
    wide = copy.deepcopy(pair.ref)
    wide.config.sliding_window = 4096
    assert logit_gap(generate(wide, ids, DynamicCache(config=wide.config), **greedy),
                     generate(pair.ref, ids, pair.dynamic(), **greedy)) > 1e-3
    sampled = dict(max_new_tokens=12, do_sample=True, temperature=0.9, top_k=50)
    same(generate(pair.kv, ids, pair.cache(), seed=5, **sampled),
         generate(pair.ref, ids, pair.dynamic(), seed=5, **sampled))
    padded, mask, _ = left_padded()
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False)
    same(generate(pair.kv, padded, pair.cache(), **kw),
         generate(pair.ref, padded, pair.dynamic(), **kw))
    beams = dict(max_new_tokens=8, num_beams=4, do_sample=False, num_return_sequences=2)
    same(generate(pair.kv, ids, pair.cache(), **beams),
         generate(pair.ref, ids, pair.dynamic(), **beams))
