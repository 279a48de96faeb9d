"""SmolLM2's greedy completion with K/V stored in each format, against fp32 K/V: how many tokens
agree and the largest logit gap (`pytest -s` prints them; docs/transformers.md records them).
The bounds are loose: they catch a format that is broken, not one that is a little worse."""

import pytest
import torch

from conftest import Pair, generate, logit_gap

PROMPT = ("The Bennets lived at Longbourn, a few miles from Meryton. When Mr. Bingley, a young "
          "man of large fortune, took Netherfield Park, Mrs. Bennet hoped that")
BOUNDS = {"fp16": (0.9, 0.1), "bf16": (0.7, 1.0), "int8-per-token": (0.7, 1.0),
          "int4-group": (0.0, 4.0), "kivi-k": (0.3, 4.0)}


@pytest.fixture(scope="module")
def prompt_ids(smollm2):
    from transformers import AutoTokenizer
    from kvcache_lab.models import fetch
    path = fetch.smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return torch.tensor([tok(PROMPT).input_ids])


@pytest.mark.parametrize("fmt", sorted(BOUNDS))
def test_each_format_against_fp32(smollm2, prompt_ids, fmt):
    pair = Pair(None, ref=smollm2)
    kw = dict(max_new_tokens=24, do_sample=False)
    exact = generate(pair.kv, prompt_ids, pair.cache(), **kw)
    stored = {"name": "kivi-k", "group": 16} if fmt == "kivi-k" else fmt
    got = generate(pair.kv, prompt_ids, pair.cache(format={"k": stored, "v": "fp16"
                                                            if fmt == "kivi-k" else fmt}), **kw)
    n = prompt_ids.shape[1]
    agree = (got.sequences[0, n:] == exact.sequences[0, n:]).float().mean().item()
    # The gap while the continuations still agree (after they part, logits are of other texts).
    first = next((i for i, (a, b) in enumerate(zip(got.sequences[0, n:], exact.sequences[0, n:]))
                  if a != b), len(got.logits))
    gap = max((x - y).abs().max().item() for x, y in zip(got.logits[:first + 1],
                                                          exact.logits[:first + 1]))
    print(f"\nSmolLM2 {fmt}: greedy agreement {agree:.2f} over 24 tokens, largest logit gap "
          f"{gap:.3g} (to the first difference)")
    least, most = BOUNDS[fmt]
    assert agree >= least and gap <= most
