"""Module-level views: plugins, formats, config checks, and the reference."""

import numpy as np
import pytest

import kvcache


def test_plugins_and_formats_list_what_is_installed():
    found = {(p["kind"], p["name"]) for p in kvcache.plugins()}
    assert {("backend", "cpu-tbb"), ("mask", "causal"), ("eviction", "lru")} <= found
    assert {"fp16", "int8-per-token", "int4-group", "kivi-k"} <= set(kvcache.formats())


def test_check_config_returns_every_problem():
    assert not [p for p in kvcache.check_config("cache: {page_size: 32}\n") if ": error:" in p]
    problems = kvcache.check_config("format: {k: int8-per-tokn}\n")
    assert any("did you mean 'int8-per-token'" in p for p in problems), problems


def test_reference_roundtrip_is_exact_for_fp32_and_bounded_for_int8():
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_array_equal(kvcache.reference_roundtrip(x, "fp32"), x)
    y = kvcache.reference_roundtrip(x, "int8-per-token")
    step = np.abs(x).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(y - x) <= step / 2 + 1e-6)
    g = kvcache.reference_roundtrip(x, "int4-group", group=64)
    assert g.shape == x.shape and not np.array_equal(g, x)
    with pytest.raises(ValueError, match="groups of 8"):
        kvcache.reference_roundtrip(x[:5], "kivi-k", group=8)


def test_reference_attention_is_softmax_over_the_visible_keys():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 16)).astype(np.float32)
    k = rng.standard_normal((5, 1, 16)).astype(np.float32)
    v = rng.standard_normal((5, 1, 16)).astype(np.float32)
    out = kvcache.reference_attention(q, k, v, np.arange(5, dtype=np.int64), [(1, 4)])
    logits = q @ k[1:4, 0].T / 4.0
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out, w @ v[1:4, 0], rtol=1e-5, atol=1e-6)
