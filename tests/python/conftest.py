"""Shared pieces of the Python suite: a small cache on cpu-tbb and random rows."""

import numpy as np
import pytest

import kvcache

MODEL = {"layers": 2, "q_heads": 4, "kv_heads": 2, "head_dim": 64}


@pytest.fixture
def cache():
    return kvcache.Cache(model=MODEL, backend=["cpu-tbb"],
                         cache={"page_size": 16, "capacity": "16MiB"})


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def rows(rng, n, heads, dim=64, dtype=np.float32):
    return rng.standard_normal((n, heads, dim)).astype(dtype)
