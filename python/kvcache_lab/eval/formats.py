"""What each storage format costs SmolLM2-135M-Instruct's perplexity (python -m kvcache_lab.eval).

llama.cpp's protocol: Pride and Prejudice tokenized, cut into chunks of --ctx tokens, each chunk
a fresh sequence prefilled through kvcache, the second half of each chunk scored. Per format: the
bytes a token takes in the cache (every layer, K and V, scales), perplexity, its change against
fp32 with a paired standard error, the mean KL divergence from fp32's next-token distribution,
and how often the top token agrees with fp32's. With --fake, each format again by fake
quantization (K and V through the format's reference encode and decode, then fp32 kernels), so
that what the kernels add (rounded queries) shows apart from the format's own loss.
--smoke: fp32, fp16, int8 and int4 on two chunks (what CI runs)."""

import json
import time

import numpy as np

import kvcache
from kvcache_lab.eval.scoring import log_softmax, paired_delta, perplexity
from kvcache_lab.models import austen, fetch, gguf_llama, llama

# name, K format, V format (a format: a name or {name, options...})
FORMATS = [
    ("fp32", "fp32", "fp32"),
    ("fp16", "fp16", "fp16"),
    ("bf16", "bf16", "bf16"),
    ("fp8-e4m3", "fp8-e4m3", "fp8-e4m3"),
    ("int8-per-token", "int8-per-token", "int8-per-token"),
    ("int4-group 32", "int4-group", "int4-group"),
    ("int4-group 64", {"name": "int4-group", "group": 64}, {"name": "int4-group", "group": 64}),
    ("K int4, V fp16", "int4-group", "fp16"),
    ("K fp16, V int4", "fp16", "int4-group"),
    ("kivi-k 4-bit, V fp16", {"name": "kivi-k", "bits": 4, "group": 16}, "fp16"),
    ("kivi-k 2-bit, V fp16", {"name": "kivi-k", "bits": 2, "group": 16}, "fp16"),
]
SMOKE = ("fp32", "fp16", "int8-per-token", "int4-group 32")


def score(model, cache, chunk, prefill):
    """Log-probabilities [n_scored, vocab] of a chunk's second half, and the targets."""
    seq = cache.add_sequence()
    hidden = model.prefill_hidden(cache, seq, chunk, prefill)
    cache.release(seq)
    first = len(chunk) // 2
    h = hidden[first:-1]  # predicts tokens first+1 .. end
    return log_softmax(model.logits(h)), np.asarray(chunk[first + 1:])


def roundtrip(spec):
    """K or V rows [tokens, heads, dim] through a format's reference encode and decode."""
    name, options = (spec, {}) if isinstance(spec, str) else (
        spec["name"], {k: v for k, v in spec.items() if k != "name"})

    def apply(x):
        rows = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
        return kvcache.reference_roundtrip(rows, name, **options).reshape(x.shape)
    return apply


def run(formats, chunks, ctx, prefill, fake, out_json):
    path = fetch.smollm2_gguf()
    weights = gguf_llama.load(path)
    tok = gguf_llama.tokenizer(path)
    ids = tok.encode(austen.book("prideprejudice")).ids
    if len(ids) < chunks * ctx:
        raise SystemExit(f"the text has {len(ids)} tokens, fewer than {chunks} x {ctx}")
    pieces = [ids[i * ctx:(i + 1) * ctx] for i in range(chunks)]
    rows, reference = [], None
    for name, k, v in formats:
        kinds = [("kvcache", None)]
        if fake and name != "fp32" and "kivi" not in name:  # kivi-k's groups span tokens
            kinds.append(("fake", (roundtrip(k), roundtrip(v))))
        for kind, transform in kinds:
            model = llama.Model(weights)
            fmt = {"k": k, "v": v}
            if transform is not None:  # the format's loss, through fp32 kernels
                rk, rv = transform
                model = llama.Model(weights, kv_transform=lambda a, b, rk=rk, rv=rv: (rk(a), rv(b)))
                fmt = {"k": "fp32", "v": "fp32"}
            cache = kvcache.Cache(**model.cache_config(cache={"capacity": "512MiB",
                                                               "prefix_caching": False},
                                                        format=fmt))
            start = time.perf_counter()
            nll, logprobs = [], []
            for chunk in pieces:
                lp, targets = score(model, cache, chunk, prefill)
                nll.append(-lp[np.arange(len(targets)), targets])
                logprobs.append(lp)
            nll = np.concatenate(nll)
            info = cache.info()
            if kind == "kvcache":  # a fake row's cache holds fp32: the format's bytes are these
                bytes_per_token = info["page_bytes"] / info["page_size"]
            row = {"format": name, "kind": kind, "k": k, "v": v,
                   "bytes_per_token": bytes_per_token,
                   "tokens_scored": int(len(nll)), "perplexity": perplexity(nll),
                   "seconds": time.perf_counter() - start}
            if reference is None:
                reference = (nll, logprobs)
            base_nll, base_lp = reference
            row["delta_pct"], row["delta_pct_se"] = paired_delta(nll, base_nll)
            kl, agree = [], []
            for p, q in zip(base_lp, logprobs):
                kl.append((np.exp(p) * (p - q)).sum(axis=1))
                agree.append(p.argmax(axis=1) == q.argmax(axis=1))
            row["mean_kl"] = float(np.concatenate(kl).mean())
            row["top1_agreement"] = float(np.concatenate(agree).mean())
            rows.append(row)
            print(format_row(row), flush=True)
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"model": "SmolLM2-135M-Instruct.Q4_1", "text": "Pride and Prejudice",
                       "ctx": ctx, "chunks": chunks, "rows": rows}, f, indent=2)
    return rows


HEADER = (f"{'format':<22} {'kind':<8} {'B/token':>8} {'ppl':>8} {'delta %':>14} "
          f"{'mean KL':>9} {'top-1':>7}")


def format_row(r):
    delta = f"{r['delta_pct']:+.2f} ± {r['delta_pct_se']:.2f}"
    return (f"{r['format']:<22} {r['kind']:<8} {r['bytes_per_token']:>8.0f} "
            f"{r['perplexity']:>8.3f} {delta:>14} {r['mean_kl']:>9.5f} "
            f"{r['top1_agreement']:>7.4f}")
