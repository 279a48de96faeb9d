"""Log-probabilities and the figures computed from them."""

import math

import numpy as np


def log_softmax(logits):
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def paired_delta(nll, base_nll):
    """Perplexity change against the base in %, and its standard error from the paired
    per-token differences."""
    diff = np.asarray(nll) - np.asarray(base_nll)
    ratio = math.exp(diff.mean())
    return 100 * (ratio - 1), 100 * ratio * diff.std(ddof=1) / math.sqrt(len(diff))


def perplexity(nll):
    return float(math.exp(np.mean(nll)))
