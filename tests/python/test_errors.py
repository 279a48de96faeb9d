"""Wrong input from Python: typed exceptions that name what was expected, and nothing changes."""

import threading

import numpy as np
import pytest

import kvcache
from conftest import rows


def test_wrong_dtype_is_a_type_error_naming_the_layout(cache, rng):
    step = cache.begin_step(cache.add_sequence(), 3)
    with pytest.raises(TypeError, match=r"k must be \[3, 2, 64\] \(tokens, kv_heads, head_dim\), "
                                        r"row-major, float32, float16 or bfloat16; got DLPack"):
        step.append(0, rows(rng, 3, 2, dtype=np.float64), rows(rng, 3, 2))


def test_wrong_shape_or_strides_is_a_value_error_and_never_a_copy(cache, rng):
    step = cache.begin_step(cache.add_sequence(), 3)
    with pytest.raises(ValueError, match=r"k must be \[3, 2, 64\].*got \[3, 2, 32\]"):
        step.append(0, rows(rng, 3, 2, dim=32), rows(rng, 3, 2, dim=32))
    strided = rows(rng, 6, 2)[::2]
    with pytest.raises(ValueError, match="strided view"):
        step.append(0, strided, strided)
    with pytest.raises(TypeError):
        step.append(0, [[0.0]], [[0.0]])
    step.append(0, rows(rng, 3, 2), rows(rng, 3, 2))  # nothing changed: layer 0 still open


def test_calls_out_of_order_are_invalid_arguments(cache, rng):
    step = cache.begin_step(cache.add_sequence(), 1)
    with pytest.raises(kvcache.InvalidArgument, match="layer 0"):
        step.decode(0, rows(rng, 1, 4))
    assert issubclass(kvcache.InvalidArgument, ValueError)


def test_unknown_sequence_is_not_found(cache):
    with pytest.raises(kvcache.NotFound, match="no sequence 99"):
        cache.release(99)


def test_config_errors_carry_their_diagnostics():
    with pytest.raises(kvcache.ConfigError) as e:
        kvcache.Cache("cache: {page_sise: 32}\n")
    assert any(d.startswith("<yaml text>:1:") and "did you mean 'page_size'" in d
               for d in e.value.diagnostics), e.value.diagnostics


def test_layer_groups_are_checked_and_what_they_do_not_run_is_refused_by_name():
    model = {"layers": 12, "q_heads": 4, "kv_heads": 2, "head_dim": 64}
    local = {"mask": {"name": "sliding-window", "window": 128}}
    with pytest.raises(kvcache.ConfigError, match=r"layers 6-11 are in no group"):
        kvcache.Cache(model=model, layers={"groups": {"local": dict(local, layers="0-4"),
                                                      "global": {"layers": [5]}}})
    layers = {"groups": {"local": local, "global": {}}, "pattern": ["local x5", "global"]}
    hybrid = kvcache.Cache(model=model, backend=["cpu-tbb"], layers=layers)
    assert [g["name"] for g in hybrid.groups()] == ["local", "global"]
    with pytest.raises(kvcache.InvalidArgument, match=r"pass layer="):
        hybrid.length(hybrid.add_sequence())
    streaming = {"name": "streaming", "sinks": 4, "window": 64}
    dropping = kvcache.Cache(model=model, backend=["cpu-tbb"], layers=layers, eviction=streaming)
    assert [g["name"] for g in dropping.groups()] == ["local", "global"]
    # A dropped token leaves every group, so a group whose format cannot lose one is named.
    kivi = {"format": {"k": {"name": "kivi-k", "group": 8}, "v": "fp16"}}
    with pytest.raises(kvcache.InvalidArgument,
                       match=r"layers\.groups\.global\..*eviction 'streaming' drops tokens"):
        kvcache.Cache(model=model, backend=["cpu-tbb"], eviction=streaming,
                      layers={"groups": {"local": local, "global": kivi},
                              "pattern": ["local x5", "global"]})


def test_cache_full_carries_the_report_and_reserves_nothing():
    cache = kvcache.Cache(model={"layers": 1, "q_heads": 2, "kv_heads": 1, "head_dim": 16},
                          backend=["cpu-tbb"], cache={"page_size": 16, "capacity": "4KiB"})
    a = cache.add_sequence()
    with pytest.raises(kvcache.CacheFull) as e:
        cache.begin_step(a, 64)
    assert isinstance(e.value, MemoryError)
    assert isinstance(e.value.report, kvcache.EvictionReport)
    assert "pages" in str(e.value)
    assert cache.length(a) == 0


def test_threads_share_one_cache_safely(cache):
    """Four threads, each its own sequence, on one Cache. One step is open at a time per Cache:
    a thread's begin_step waits for another's step to finish, and calls between never collide
    (this deadlocked while the binding held a lock of its own around begin_step's wait)."""
    results = {}

    def work(i):
        rng = np.random.default_rng(i)
        seq = cache.add_sequence()
        for _ in range(20):
            cache.stats()  # other calls go on meanwhile
            step = cache.begin_step(seq, 1)
            for layer in range(2):
                step.append(layer, rows(rng, 1, 2), rows(rng, 1, 2))
                step.decode(layer, rows(rng, 1, 4))
            step.finish()
        results[i] = cache.length(seq)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: 20 for i in range(4)}


def test_an_engine_stream_is_refused_by_a_backend_that_takes_none(cache):
    """cpu-tbb runs on the host: a step on an engine's stream (a handle, or an object with
    cuda_stream as torch's streams have) is refused, naming it, and nothing is reserved."""
    seq = cache.add_sequence()

    class TorchLikeStream:
        cuda_stream = 0

    for stream in (0, TorchLikeStream()):
        with pytest.raises(kvcache.Unsupported, match="cpu-tbb.*takes no engine stream"):
            cache.begin_step(seq, 4, stream=stream)
    with pytest.raises(kvcache.InvalidArgument, match="engine's stream"):
        cache.begin_step(seq, 4, event=1)
    assert cache.length(seq) == 0
    step = cache.begin_step(seq, 4)
    assert step.tokens == 4
