"""The remote tier from Python: two Caches naming one memory space share a prefix's pages (the
second reads what the first wrote, byte for byte), and its counters say what happened."""

import numpy as np

import kvcache
from conftest import MODEL, rows


def shared_cache(space):
    return kvcache.Cache(model=MODEL, backend=["cpu-tbb"],
                         cache={"page_size": 16, "capacity": "16MiB"},
                         remote={"transport": "memory", "endpoints": [space],
                                 "model": "python-test@1"})


def test_two_caches_share_a_prefix(rng):
    a, b = shared_cache("python-shared"), shared_cache("python-shared")
    tokens = list(range(100, 150))  # three full pages and two tokens
    seq = a.add_sequence()
    step = a.begin_step(seq, len(tokens))
    for layer in range(MODEL["layers"]):
        step.append(layer, rows(rng, len(tokens), 2), rows(rng, len(tokens), 2))
    assert not step.finish()
    a.publish_prefix(seq, tokens)
    assert a.flush_remote(timeout=10)
    assert a.remote_stats()["written_pages"] == 3

    assert b.lookup_prefix(tokens) == 48
    there = b.add_sequence()
    assert b.match_prefix(there, tokens) == 48
    assert b.remote_stats()["hit_pages"] == 3
    for layer in range(MODEL["layers"]):
        k_a, v_a = a.gather(layer, seq)
        k_b, v_b = b.gather(layer, there)
        np.testing.assert_array_equal(k_b, k_a[:48])
        np.testing.assert_array_equal(v_b, v_a[:48])


def test_without_a_remote_section_there_is_no_tier(cache):
    assert cache.remote_stats() is None
    assert cache.flush_remote()
    assert cache.lookup_prefix([1, 2, 3]) == 0
