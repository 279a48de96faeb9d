"""Steps through kvcache from Python: prefill and decode equal the reference attention over what
the cache holds; a batch equals its sequences alone; fork and prefix reuse the same K/V."""

import numpy as np
import pytest

import kvcache
from conftest import MODEL, rows


def run_step(cache, seqs, counts, rng, prefill=True):
    step = cache.begin_step(seqs, counts)
    outs = []
    for layer in range(MODEL["layers"]):
        n = step.tokens
        step.append(layer, rows(rng, n, 2), rows(rng, n, 2))
        q = rows(rng, n if prefill else len(step.sequences), 4)
        outs.append((q, step.prefill(layer, q) if prefill else step.decode(layer, q)))
    assert not step.finish()
    return outs


def expected(cache, seq, layer, q_rows):
    """The reference over the sequence's stored K/V, causal, for its last len(q_rows) tokens."""
    k, v = cache.gather(layer, seq)
    positions = cache.positions(seq)
    first = len(positions) - len(q_rows)
    return np.stack([
        kvcache.reference_attention(q, k, v, positions, [(0, int(positions[first + i]) + 1)])
        for i, q in enumerate(q_rows)])


def test_prefill_then_decode_equal_the_reference(cache, rng):
    seq = cache.add_sequence()
    for layer, (q, out) in enumerate(run_step(cache, seq, 9, rng)):
        np.testing.assert_allclose(out, expected(cache, seq, layer, q), atol=2e-3)
    for _ in range(3):
        for layer, (q, out) in enumerate(run_step(cache, seq, 1, rng, prefill=False)):
            np.testing.assert_allclose(out, expected(cache, seq, layer, q), atol=2e-3)
    assert cache.length(seq) == 12
    assert list(cache.positions(seq)) == list(range(12))


def test_a_batch_equals_its_sequences_alone(cache, rng):
    a, b = cache.add_sequence(), cache.add_sequence()
    step = cache.begin_step([a, b], [5, 3])
    k, v, q = rows(rng, 8, 2), rows(rng, 8, 2), rows(rng, 8, 4)
    for layer in range(2):
        step.append(layer, k, v)
        together = step.prefill(layer, q)
    step.finish()
    c, d = cache.add_sequence(), cache.add_sequence()
    for seq, sl in ((c, slice(0, 5)), (d, slice(5, 8))):
        alone = cache.begin_step(seq, sl.stop - sl.start)
        for layer in range(2):
            alone.append(layer, np.ascontiguousarray(k[sl]), np.ascontiguousarray(v[sl]))
            out = alone.prefill(layer, np.ascontiguousarray(q[sl]))
        alone.finish()
        np.testing.assert_allclose(out, together[sl], atol=1e-6)


def test_fork_and_prefix_reuse_the_same_rows(cache, rng):
    seq = cache.add_sequence()
    run_step(cache, seq, 32, rng)
    tokens = np.arange(32, dtype=np.int32)
    cache.publish_prefix(seq, tokens)
    reused = cache.add_sequence()
    assert cache.match_prefix(reused, tokens) == 32
    child = cache.fork(seq)
    for layer in range(2):
        k, v = cache.gather(layer, seq)
        for other in (reused, child):
            k2, v2 = cache.gather(layer, other)
            np.testing.assert_array_equal(k, k2)
            np.testing.assert_array_equal(v, v2)
    assert cache.match_prefix(cache.add_sequence(), list(range(32))) == 32  # a list works too


def test_views_of_the_store(cache, rng):
    seq = cache.add_sequence()
    run_step(cache, seq, 20, rng)
    stats = cache.stats()
    assert stats["sequences"] == 1 and stats["used_pages"] == 2
    table = cache.page_table([seq])
    assert table["indptr"].dtype == np.int32 and list(table["indptr"]) == [0, 2]
    assert list(table["last_page_len"]) == [4]
    assert cache.scores(seq).shape == (20,)
    assert cache.model.head_dim == 64 and cache.backend == "cpu-tbb"
    assert cache.sequences() == [seq]
    cache.release(seq)
    assert cache.sequences() == []


def test_float16_in_and_out_in_place(cache, rng):
    seq = cache.add_sequence()
    step = cache.begin_step(seq, 4)
    q = rows(rng, 4, 4, dtype=np.float16)
    out = np.zeros((4, 4, 64), np.float16)
    for layer in range(2):
        step.append(layer, rows(rng, 4, 2, dtype=np.float16), rows(rng, 4, 2, dtype=np.float16))
        assert step.prefill(layer, q, out) is out
    step.finish()
    want = expected(cache, seq, 1, q.astype(np.float32))
    np.testing.assert_allclose(out.astype(np.float32), want, atol=2e-2)


class OnlyDlpack:
    """An array that is known only through the DLPack protocol (as torch tensors are)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_any_dlpack_object_is_used_in_place(cache, rng):
    seq = cache.add_sequence()
    step = cache.begin_step(seq, 2)
    out = np.zeros((2, 4, 64), np.float32)
    for layer in range(2):
        step.append(layer, OnlyDlpack(rows(rng, 2, 2)), OnlyDlpack(rows(rng, 2, 2)))
        step.prefill(layer, OnlyDlpack(rows(rng, 2, 4)), OnlyDlpack(out))
    step.finish()
    assert np.abs(out).sum() > 0  # written through the DLPack view, into `out` itself


def test_torch_cpu_tensors_when_torch_is_installed(cache):
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    seq = cache.add_sequence()
    step = cache.begin_step(seq, 2)
    out = torch.zeros((2, 4, 64), dtype=torch.float32)
    for layer in range(2):
        kv = torch.ones((2, 2, 64), dtype=torch.float32)
        step.append(layer, kv, kv)
        step.prefill(layer, torch.ones((2, 4, 64), dtype=torch.float32), out)
    step.finish()
    assert torch.allclose(out, torch.ones_like(out))
