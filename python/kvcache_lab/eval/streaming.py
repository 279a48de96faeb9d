"""Streaming past the trained context (python -m kvcache_lab.eval --streaming): what RoPE positions
within the cache do for SmolLM2-135M-Instruct.

One stream of --tokens tokens (by default 8x the model's trained context of 8,192: the first
quarter of it from each of four of Austen's novels, joined), fed in steps of --prefill tokens,
every token scored by the log-probability of the next, and grouped in buckets of --bucket tokens.
Every row but the last keeps memory constant (streaming eviction drops what its mask hides):
a window without sinks; 4 sinks + a window at the tokens' original positions; the same at
positions within the cache (StreamingLLM's); that with int8 and with int4 K/V; and dense causal
attention up to the trained context, the reference line.

With --text repeat the stream is instead one passage of --context tokens (the start of *Pride and
Prejudice*) repeated: the control that holds the text still, so that a change between spans is
the positions' doing. From the second copy on, every copy sees the same inputs (the sinks, the
window, and through the layers the previous copy's tail), so at positions within the cache they
score alike; the first copy started cold, which shows in its first buckets. The same-bucket
figure compares each bucket with the same bucket of the first copy, as the target reads."""

import json
import time

import numpy as np

import kvcache
from kvcache_lab.eval.scoring import log_softmax, perplexity
from kvcache_lab.models import austen, fetch, gguf_llama, llama

BOOKS = ("prideprejudice", "emma", "mansfieldpark", "sensesensibility")


def rows_for(sinks, window):
    sink_window = lambda positions: {"name": "sink-window", "sinks": sinks,
                                     "window": window - sinks, "positions": positions}
    evict = {"name": "streaming", "sinks": sinks, "window": window - sinks}
    cache_positions = {"mask": sink_window("cache"), "eviction": evict}
    w = window - sinks
    return [
        (f"window {window}, no sinks",
         {"mask": {"name": "sliding-window", "window": window},
          "eviction": {"name": "streaming", "sinks": 0, "window": window}}, None),
        (f"{sinks} sinks + {w}, original positions",
         {"mask": sink_window("original"), "eviction": evict}, None),
        (f"{sinks} sinks + {w}, cache positions", cache_positions, None),
        (f"{sinks} sinks + {w}, cache positions, int8 K/V",
         dict(cache_positions, format={"k": "int8-per-token", "v": "int8-per-token"}), None),
        (f"{sinks} sinks + {w}, cache positions, int4 K/V",
         dict(cache_positions, format={"k": "int4-group", "v": "int4-group"}), None),
        ("dense causal, to the trained context", {"mask": {"name": "causal"}}, "context"),
    ]


def stream_ids(tokenizer, tokens, text="books", context=8192):
    """The first tokens // len(BOOKS) tokens of each book, joined (one more for the last target);
    or, for text "repeat", the first `context` tokens of the first book, repeated."""
    if text == "repeat":
        passage = tokenizer.encode(austen.book(BOOKS[0])).ids[:context]
        return (passage * (tokens // context + 2))[:tokens + 1]
    share = -(-(tokens + 1) // len(BOOKS))
    ids = []
    for name in BOOKS:
        book = tokenizer.encode(austen.book(name)).ids
        if len(book) < share:
            raise SystemExit(f"{name} has {len(book)} tokens, fewer than {share}")
        ids += book[:share]
    return ids[:tokens + 1]


def same_bucket_change_pct(buckets, per_span):
    """Each bucket's perplexity against the same bucket of the first span, in %: (most below,
    most above)."""
    changes = [100 * (v / buckets[i % per_span] - 1) for i, v in enumerate(buckets)]
    return min(changes), max(changes)


def run(tokens, context, sinks, window, prefill, bucket, out_json, only=None, text="books"):
    path = fetch.smollm2_gguf()
    model = llama.Model(gguf_llama.load(path))
    ids = stream_ids(gguf_llama.tokenizer(path), tokens, text, context)
    results = []
    for name, sections, limit in rows_for(sinks, window):
        if only and name not in only:
            continue
        n = min(tokens, context) if limit == "context" else tokens
        sections.setdefault("format", {"k": "fp16", "v": "fp16"})
        cache = kvcache.Cache(**model.cache_config(
            cache={"capacity": "512MiB", "prefix_caching": False}, **sections))
        start, nll, peak = time.perf_counter(), [], 0
        seq = cache.add_sequence()
        for b in range(0, n, prefill):
            chunk = ids[b:min(b + prefill, n)]
            hidden, _ = model.step_hidden(cache, [seq], [chunk])
            peak = max(peak, cache.stats()["used_pages"])
            lp = log_softmax(model.logits(hidden))
            nll.append(-lp[np.arange(len(chunk)), np.asarray(ids[b + 1:b + 1 + len(chunk)])])
        cache.release(seq)
        nll = np.concatenate(nll)
        buckets = [perplexity(nll[i:i + bucket]) for i in range(0, len(nll), bucket)]
        spans = [perplexity(nll[i:i + context]) for i in range(0, len(nll), context)]
        first = spans[0]
        row = {"row": name, "config": sections, "perplexity": perplexity(nll),
               "peak_pages": peak, "tokens_scored": int(len(nll)), "bucket_perplexity": buckets,
               "span_perplexity": spans,
               "worst_bucket_vs_first_span_pct": 100 * (max(buckets) / first - 1),
               "same_bucket_vs_first_span_pct": same_bucket_change_pct(buckets, context // bucket),
               "seconds": time.perf_counter() - start}
        results.append(row)
        low, high = row["same_bucket_vs_first_span_pct"]
        print(f"{name:<40} {row['perplexity']:>8.3f} {first:>8.3f} {spans[-1]:>8.3f} "
              f"{row['worst_bucket_vs_first_span_pct']:>+8.1f} {low:>+7.1f} {high:>+7.1f} "
              f"{peak:>6} {row['seconds']:>6.0f}", flush=True)
    if out_json:
        with open(out_json, "w") as f:
            repeat = text == "repeat"
            what = f"the first {context} tokens of {BOOKS[0]}, repeated" if repeat else " + ".join(BOOKS)
            kind = "one passage repeated" if repeat else "four books"
            json.dump({"model": "SmolLM2-135M-Instruct.Q4_1", "text": what,
                       "title": f"Perplexity per {bucket}-token bucket (log scale), one stream "
                                f"of {tokens} tokens ({kind}), {sinks} sinks + window {window - sinks}",
                       "tokens": tokens, "context": context, "first_scored": 1,
                       "bucket": bucket, "rows": results}, f, indent=2)
    return results


# worst %: the worst bucket against the first span's perplexity; same-bucket % (low, high): each
# bucket against the same bucket of the first span.
HEADER = (f"{'row':<40} {'ppl':>8} {'span 1':>8} {'last':>8} {'worst %':>8} {'same-bucket %':>15} "
          f"{'pages':>6} {'s':>6}")
