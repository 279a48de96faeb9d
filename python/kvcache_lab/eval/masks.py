"""What masks and eviction cost over a long stream (python -m kvcache_lab.eval --masks).

StreamingLLM's setting: one stream of --stream tokens (several streams from different parts of
Pride and Prejudice), fed in steps of --prefill tokens, every token from --first on scored. Rows:
dense causal attention; a sliding window without sinks; sinks + window as a mask (memory grows);
the same with `streaming` eviction (memory constant); heavy-hitter at the window's budget; int8
K/V with sinks and streaming. Per row: perplexity, its change against dense, the most pages the
cache held, and the perplexity of each 512-token bucket."""

import json
import time

import numpy as np

import kvcache
from kvcache_lab.eval.scoring import log_softmax, paired_delta, perplexity
from kvcache_lab.models import austen, fetch, gguf_llama, llama


def rows_for(window):
    sw = lambda sinks: {"name": "sink-window", "sinks": sinks, "window": window}
    streaming = lambda sinks: {"name": "streaming", "sinks": sinks, "window": window}
    rows = [("dense causal", {"mask": {"name": "causal"}}),
            (f"window {window}, no sinks", {"mask": {"name": "sliding-window", "window": window}})]
    for sinks in (1, 2, 4, 8):
        rows.append((f"{sinks} sinks + window (mask)", {"mask": sw(sinks)}))
    for sinks in (1, 4):
        rows.append((f"{sinks} sinks + window, streaming",
                     {"mask": sw(sinks), "eviction": streaming(sinks)}))
    rows.append((f"heavy-hitter, budget {window}",
                 {"mask": {"name": "causal"},
                  "eviction": {"name": "heavy-hitter", "budget": window, "sinks": 4,
                               "recent": window // 4}}))
    rows.append(("int8 K/V, 4 sinks, streaming",
                 {"mask": sw(4), "eviction": streaming(4),
                  "format": {"k": "int8-per-token", "v": "int8-per-token"}}))
    return rows


def run(streams, stream, first, window, prefill, bucket, out_json, only=None):
    path = fetch.smollm2_gguf()
    model = llama.Model(gguf_llama.load(path))
    ids = gguf_llama.tokenizer(path).encode(austen.book("prideprejudice")).ids
    step_between = max(stream, (len(ids) - stream) // max(1, streams - 1))
    texts = [ids[i * step_between:i * step_between + stream] for i in range(streams)]
    if any(len(t) < stream for t in texts):
        raise SystemExit(f"the text has {len(ids)} tokens, too few for {streams} x {stream}")
    results, base = [], None
    for name, sections in rows_for(window):
        if only and name not in only:
            continue
        sections.setdefault("format", {"k": "fp16", "v": "fp16"})
        cache = kvcache.Cache(**model.cache_config(
            cache={"capacity": "1GiB", "prefix_caching": False}, **sections))
        start, nll, peak = time.perf_counter(), [], 0
        for text in texts:
            seq = cache.add_sequence()
            for b in range(0, stream, prefill):
                hidden, _ = model.step_hidden(cache, [seq], [text[b:b + prefill]])
                peak = max(peak, cache.stats()["used_pages"])
                targets = np.arange(b + 1, min(b + prefill + 1, stream))  # next tokens
                keep = targets >= first
                if keep.any():
                    lp = log_softmax(model.logits(hidden[:len(targets)][keep]))
                    nll.append(-lp[np.arange(keep.sum()), np.asarray(text)[targets[keep]]])
            cache.release(seq)
        nll = np.concatenate(nll)
        if base is None:
            base = nll
        delta, se = paired_delta(nll, base)
        per_stream = nll.reshape(streams, -1)
        buckets = [perplexity(per_stream[:, i:i + bucket])
                   for i in range(0, per_stream.shape[1], bucket)]
        row = {"row": name, "config": sections, "perplexity": perplexity(nll), "delta_pct": delta,
               "delta_pct_se": se, "peak_pages": peak, "tokens_scored": int(len(nll)),
               "bucket_perplexity": buckets, "seconds": time.perf_counter() - start}
        results.append(row)
        print(f"{name:<34} {row['perplexity']:>8.3f} {delta:>+8.2f} ± {se:<5.2f} {peak:>6}",
              flush=True)
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"model": "SmolLM2-135M-Instruct.Q4_1", "text": "Pride and Prejudice",
                       "streams": streams, "stream": stream, "first_scored": first,
                       "window": window, "bucket": bucket, "rows": results}, f, indent=2)
    return results


HEADER = f"{'row':<34} {'ppl':>8} {'delta %':>16} {'pages':>6}"
