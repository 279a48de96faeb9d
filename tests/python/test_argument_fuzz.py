"""The binding's argument conversion, fuzzed with a fixed seed: arrays of random dtypes, shapes
and strides (views, transposes, negative steps, empty axes) and objects that are not arrays at
all, passed to every call that takes one. Each is accepted exactly when it is what the contract
asks (float32/float16, the shape, C-contiguous), and refused otherwise with TypeError or
ValueError that changes nothing: after the refusals the same step runs and its attention equals
the reference over what the cache holds."""

import numpy as np
import pytest

import kvcache
from conftest import MODEL

DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int32, np.uint16, np.bool_,
          np.complex64]
ACCEPTED = (np.float32, np.float16)
NOT_ARRAYS = [None, 3, 2.5, "rows", b"\x00" * 16, [[1.0, 2.0]], {"k": 1}, object()]


def random_array(rng, want):
    """An array near `want` (a shape): sometimes exactly it, often off by dtype, shape or layout."""
    dtype = DTYPES[rng.integers(len(DTYPES))] if rng.random() < 0.5 else np.float32
    shape = list(want)
    roll = rng.random()
    if roll < 0.25:
        shape[rng.integers(len(shape))] += int(rng.integers(-2, 3))
    elif roll < 0.35:
        shape = shape[:int(rng.integers(0, len(shape)))] + [1] * int(rng.integers(0, 2))
    shape = [max(0, s) for s in shape]
    base = (rng.standard_normal([s * 2 for s in shape]) * 4).astype(dtype)
    layout = rng.integers(5)
    if layout == 0:  # every other row: strided
        view = base[tuple(slice(0, 2 * s, 2) for s in shape)]
    elif layout == 1 and len(shape) >= 2:  # a transposed copy's view: Fortran order
        view = np.asfortranarray(base[tuple(slice(0, s) for s in shape)])
    elif layout == 2:  # negative steps
        view = base[tuple(slice(s - 1 if s else 0, None, -1) for s in shape)][
            tuple(slice(0, s) for s in shape)]
    else:
        view = np.ascontiguousarray(base[tuple(slice(0, s) for s in shape)])
    return view


def acceptable(a, want):
    return (isinstance(a, np.ndarray) and a.dtype in ACCEPTED and list(a.shape) == list(want)
            and a.flags.c_contiguous)


def writable(a):
    return isinstance(a, np.ndarray) and a.flags.writeable


def arguments(rng, want, n=6):
    """Random arguments for a parameter of shape `want`, ending with a read-only array."""
    for _ in range(n):
        if rng.random() < 0.15:
            yield NOT_ARRAYS[rng.integers(len(NOT_ARRAYS))]
        else:
            yield random_array(rng, want)
    read_only = np.zeros(want, dtype=np.float32)
    read_only.flags.writeable = False
    yield read_only


def first_accepted(call, candidates, ok):
    """Calls `call` on each candidate until one is accepted; every refused one must raise
    TypeError or ValueError. Returns (candidate, result) or None."""
    for a in candidates:
        if ok(a):
            return a, call(a)
        with pytest.raises((TypeError, ValueError)):
            call(a)
    return None


def good(rng, shape):
    return np.ascontiguousarray(rng.standard_normal(shape), dtype=np.float32)


def reference(cache, seq, layer, q):
    k, v = cache.gather(layer, seq)
    positions = cache.positions(seq)
    return kvcache.reference_attention(q.astype(np.float32), k, v, positions,
                                       [(0, int(positions[-1]) + 1)])


@pytest.mark.parametrize("seed", range(4))
def test_random_arguments_are_refused_cleanly_or_run_exactly(cache, seed):
    rng = np.random.default_rng(1000 + seed)
    kv, qh, d = MODEL["kv_heads"], MODEL["q_heads"], MODEL["head_dim"]
    seqs = [cache.add_sequence() for _ in range(2)]
    accepted = 0
    for step_index in range(6):
        decode = step_index > 0
        step = cache.begin_step(seqs, [1, 1] if decode else [int(rng.integers(1, 5)) for _ in seqs])
        n = step.tokens
        rows = len(seqs) if decode else n
        attend = step.decode if decode else step.prefill
        for layer in range(MODEL["layers"]):
            v = good(rng, (n, kv, d))
            if first_accepted(lambda k: step.append(layer, k, v), arguments(rng, (n, kv, d)),
                              lambda k: acceptable(k, (n, kv, d))) is None:
                step.append(layer, good(rng, (n, kv, d)), v)
            else:
                accepted += 1
            q = good(rng, (rows, qh, d))
            # q at random with out allocated, then out at random (written: never read-only).
            got = first_accepted(lambda x: (x, attend(layer, x)), arguments(rng, (rows, qh, d)),
                                 lambda x: acceptable(x, (rows, qh, d)))
            if got is None:
                got = first_accepted(
                    lambda o: (q, attend(layer, q, out=o)), arguments(rng, (rows, qh, d), n=3),
                    lambda o: acceptable(o, (rows, qh, d)) and writable(o))
            if got is None:
                got = (None, (q, attend(layer, q)))
            else:
                accepted += 1
            used_q, out = got[1]
            if decode:
                for row, seq in enumerate(seqs):
                    np.testing.assert_allclose(out[row].astype(np.float32),
                                               reference(cache, seq, layer, used_q[row]),
                                               atol=2e-3 if out.dtype == np.float32 else 2e-2)
        assert not step.finish()
    assert accepted > 0  # the generator does reach the accepting side


def test_random_token_ids_are_refused_cleanly(cache):
    rng = np.random.default_rng(2000)
    seq = cache.add_sequence()
    ints = np.arange(4, dtype=np.int32)
    ints.flags.writeable = False
    for a in list(arguments(rng, (4,), n=40)) + [[1, 2, 3], ints, [2**40], ["a"], [1.5], "1234"]:
        if (isinstance(a, np.ndarray) and a.dtype == np.int32 and a.ndim == 1
                and a.flags.c_contiguous) or (isinstance(a, list) and
                                              all(type(x) is int and x < 2**31 for x in a)):
            assert cache.match_prefix(seq, a) == 0  # accepted: nothing is published
        else:
            with pytest.raises(TypeError):
                cache.match_prefix(seq, a)
