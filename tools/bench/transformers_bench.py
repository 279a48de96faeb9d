"""kvcache as transformers' cache, measured against transformers' own caches on SmolLM2-135M-
Instruct in float32 (docs/transformers.md). Run with the environment of tools/transformers-env.sh:

    env=$(tools/transformers-env.sh | tail -1)
    PYTHONPATH=build/python $env/bin/python tools/bench/transformers_bench.py perplexity
    ... decode [--prompts 512 4096 8192] [--batches 1 8] | ttft [--redis]

perplexity: llama.cpp's protocol as kvcache_lab.eval runs it (Pride and Prejudice in the tokenizer of
kvcache_lab.models, chunks of 1,024 tokens prefilled in steps of 256, each chunk's second half
scored), but through transformers' model. decode: tokens/s of greedy decoding after a prompt,
with the peak KV bytes. ttft: a second request sharing a 2,048-token system prompt, with and
without prefix reuse, in one process or across two through Redis.
"""

import argparse
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache, QuantizedCache

import kvcache
import kvcache.transformers as kt
from kvcache_lab.eval.scoring import paired_delta, perplexity
from kvcache_lab.models import austen, fetch, gguf_llama


def load(attn):
    path = fetch.smollm2_gguf()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                dtype=torch.float32,
                                                attn_implementation=attn).eval()


def kv_cache(model, capacity="256MiB", **config):
    return kt.KVCache(model, cache={"capacity": capacity, "prefix_caching": False}, **config)


def kv_bytes(cache):
    """Bytes of K/V a cache holds now: kvcache's pages in use, or transformers' tensors."""
    if isinstance(cache, kt.KVCache):
        return cache.kv.stats()["used_pages"] * cache.kv.info()["page_bytes"]
    return sum(tensor_bytes(getattr(layer, name, None)) for layer in cache.layers
               for name in ("keys", "values", "_quantized_keys", "_quantized_values"))


def tensor_bytes(t):
    """Storage of a tensor; quanto's tensors subclass torch.Tensor but report their unpacked
    shape and dtype, so their parts (packed data, scale, shift) are counted instead."""
    if t is None:
        return 0
    parts = [getattr(t, name) for name in ("_data", "_scale", "_shift") if hasattr(t, name)]
    if parts:
        return sum(tensor_bytes(x) for x in parts)
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


# ---- perplexity ---------------------------------------------------------------------------
def rows_for_perplexity(kv_model, ref_model):
    """(name, model, cache maker) per row; the window row keeps 4 sinks + 252 recent tokens."""
    window = {"mask": {"name": "sink-window", "sinks": 4, "window": 252},
              "eviction": {"name": "streaming", "sinks": 4, "window": 252}}
    cfg = ref_model.config
    return [
        ("DynamicCache (sdpa), fp32", ref_model, lambda: DynamicCache(config=cfg)),
        ("kvcache fp32", kv_model, lambda: kv_cache(kv_model, format="fp32")),
        ("kvcache fp16", kv_model, lambda: kv_cache(kv_model, format="fp16")),
        ("kvcache int8-per-token", kv_model, lambda: kv_cache(kv_model, format="int8-per-token")),
        ("kvcache int4-group 32", kv_model, lambda: kv_cache(kv_model, format="int4-group")),
        ("kvcache kivi-k 4-bit (16), V fp16", kv_model, lambda: kv_cache(
            kv_model, format={"k": {"name": "kivi-k", "bits": 4, "group": 16}, "v": "fp16"})),
        ("kvcache fp16, 4 sinks + 252 window", kv_model,
         lambda: kv_cache(kv_model, format="fp16", **window)),
        ("QuantizedCache quanto 4-bit", ref_model,
         lambda: QuantizedCache("quanto", cfg, nbits=4, q_group_size=64, residual_length=128)),
        ("QuantizedCache quanto 2-bit", ref_model,
         lambda: QuantizedCache("quanto", cfg, nbits=2, q_group_size=64, residual_length=128)),
    ]


def chunk_nll(model, cache, chunk, step):
    """Negative log-likelihoods of a chunk's second half (targets first+1 .. end)."""
    logits = []
    with torch.no_grad():
        for at in range(0, len(chunk), step):
            piece = torch.tensor([chunk[at:at + step]])
            logits.append(model(piece, past_key_values=cache, use_cache=True).logits[0])
    logp = torch.log_softmax(torch.cat(logits).double(), dim=-1)
    first = len(chunk) // 2
    targets = torch.tensor(chunk[first + 1:])
    return (-logp[first:-1].gather(1, targets[:, None])[:, 0]).numpy(), kv_bytes(cache)


def run_perplexity(args):
    path = fetch.smollm2_gguf()
    ids = gguf_llama.tokenizer(path).encode(austen.book("prideprejudice")).ids
    pieces = [ids[i * args.ctx:(i + 1) * args.ctx] for i in range(args.chunks)]
    kv_model, ref_model = load("kvcache"), load("sdpa")
    results, base = [], None
    for name, model, make in rows_for_perplexity(kv_model, ref_model):
        if args.only and not any(word in name for word in args.only) and base is not None:
            continue
        start, nll, peak = time.time(), [], 0
        try:
            for chunk in pieces:
                n, b = chunk_nll(model, make(), chunk, args.prefill)
                nll.append(n)
                peak = max(peak, b)
        except Exception as e:  # a cache that does not run here: say why, go on
            results.append({"name": name, "error": f"{type(e).__name__}: {e}"})
            print(f"{name}: {e}", file=sys.stderr)
            continue
        nll = np.concatenate(nll)
        row = {"name": name, "perplexity": perplexity(nll), "kv_bytes_per_token":
               peak / args.ctx, "tokens": len(nll), "seconds": time.time() - start}
        if base is None:
            base = nll
        else:
            row["delta_pct"], row["se_pct"] = paired_delta(nll, base)
        results.append(row)
        print(json.dumps(row), file=sys.stderr)
    return {"chunks": args.chunks, "ctx": args.ctx, "rows": results}


# ---- decode speed -------------------------------------------------------------------------
class Timed:
    """A Step whose calls are timed (the kvcache side of a layer)."""

    def __init__(self, step, clock):
        self._step, self._clock = step, clock

    def __getattr__(self, name):
        attr = getattr(self._step, name)
        if name not in ("append", "decode", "prefill", "finish"):
            return attr

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                self._clock[0] += time.perf_counter() - t
        return timed


def decode_rate(model, cache, prompt, tokens, clocks=None):
    """Greedy decode of `tokens` tokens after prefilling `prompt` in pieces of 512: tokens/s of
    the decode alone, and the peak KV bytes."""
    with torch.no_grad():
        for at in range(0, prompt.shape[1], 512):
            out = model(prompt[:, at:at + 512], past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(tokens):
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
        seconds = time.perf_counter() - start
    return prompt.shape[0] * tokens / seconds, kv_bytes(cache), seconds


def run_decode(args):
    kv_model, ref_model = load("kvcache"), load("sdpa")
    torch.manual_seed(0)
    rows = []
    for length in args.prompts:
        for batch in args.batches:
            prompt = torch.randint(3, 49000, (batch, length))
            cases = [("DynamicCache + sdpa, fp32", ref_model,
                      lambda: DynamicCache(config=ref_model.config))]
            # The pool of fp16 pages that the batch needs, and a quarter more: a pool is taken
            # from the host whole, so one sized for the largest case would not fit twice.
            need = batch * (length + args.tokens) * ref_model.config.num_hidden_layers * \
                ref_model.config.num_key_value_heads * ref_model.config.head_dim * 2 * 2
            capacity = f"{need * 1.25 / 2**20 + 64:.0f}MiB"
            for fmt in ("fp16", "int8-per-token", "int4-group"):
                cases.append((f"kvcache {fmt}", kv_model,
                              lambda fmt=fmt: kv_cache(kv_model, capacity=capacity, format=fmt)))
            for name, model, make in cases:
                rate, peak, _ = decode_rate(model, make(), prompt, args.tokens)
                gc.collect()  # the last case's pool goes back before the next one is taken
                row = {"prompt": length, "batch": batch, "cache": name,
                       "tokens_per_s": rate, "peak_kv_bytes": peak}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    return {"tokens": args.tokens, "rows": rows, "share": decode_share(kv_model, args.tokens)}


def decode_share(model, tokens):
    """At batch 1 after 512 tokens: the share of a decode step spent in kvcache's calls (append,
    attention), in the glue around them (kvcache.transformers' Python and DLPack), and the rest
    of the model."""
    cache = kv_cache(model, format="fp16")
    inner, outer = [0.0], [0.0]
    attend = cache.attend

    def timed_attend(layer, *a):
        t = time.perf_counter()
        if layer == 0:
            begin = cache._begin

            def wrapped(*b):
                begin(*b)
                cache.step = Timed(cache.step, inner)
            cache._begin = wrapped
        try:
            return attend(layer, *a)
        finally:
            cache.__dict__.pop("_begin", None)
            outer[0] += time.perf_counter() - t
    cache.attend = timed_attend
    prompt = torch.randint(3, 49000, (1, 512))
    with torch.no_grad():
        model(prompt, past_key_values=cache, use_cache=True)
    inner[0] = outer[0] = 0.0
    nxt = torch.tensor([[5]])
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(tokens):
            model(nxt, past_key_values=cache, use_cache=True)
    seconds = time.perf_counter() - start
    return {"step_ms": 1e3 * seconds / tokens, "kvcache_share": inner[0] / seconds,
            "glue_share": (outer[0] - inner[0]) / seconds,
            "model_share": 1 - outer[0] / seconds}


# ---- time to first token ------------------------------------------------------------------
def first_token(model, cache, ids, reuse):
    start = time.perf_counter()
    matched = cache.match_prefix(ids) if reuse else 0
    with torch.no_grad():
        model.generate(ids, past_key_values=cache, max_new_tokens=1, do_sample=False)
    return time.perf_counter() - start, matched


def ttft_prompts():
    torch.manual_seed(1)
    system = torch.randint(3, 49000, (1, 2048))
    first = torch.cat([system, torch.randint(3, 49000, (1, 40))], dim=1)
    second = torch.cat([system, torch.randint(3, 49000, (1, 40))], dim=1)
    return first, second


def run_ttft(args):
    model = load("kvcache")
    first, second = ttft_prompts()
    out = {}
    for reuse in (False, True):
        cache = kt.KVCache(model, format="fp16", cache={"capacity": "1GiB"})
        with torch.no_grad():
            model.generate(first, past_key_values=cache, max_new_tokens=1, do_sample=False)
        cache.publish_prefix(first)
        seconds, matched = first_token(model, kt.KVCache.beside(cache), second, reuse)
        out["local_reuse" if reuse else "local_none"] = {"seconds": seconds, "matched": matched}
    if args.redis:
        out.update(ttft_redis(args))
    return out


def ttft_redis(args):
    """Two processes through a Redis started here on a free loopback port: the first writes the
    system prompt's pages, the second reads them (and, for the baseline, a third computes all)."""
    server = shutil.which("redis-server")
    if server is None:
        return {"redis": "redis-server is not installed"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp()
    redis = subprocess.Popen([server, "--port", str(port), "--save", "", "--dir", workdir],
                             stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        results = {}
        for role in ("write", "read", "none"):
            proc = subprocess.run([sys.executable, __file__, "ttft-process", role, str(port)],
                                  capture_output=True, text=True, check=True)
            results[role] = json.loads(proc.stdout.strip().splitlines()[-1])
        return {"redis_reuse": results["read"], "redis_none": results["none"]}
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def ttft_process(role, port):
    remote = {"transport": "resp", "endpoints": [f"127.0.0.1:{port}"], "model": "smollm2@bench"}
    model = load("kvcache")
    first, second = ttft_prompts()
    cache = kt.KVCache(model, format="fp16", cache={"capacity": "1GiB"},
                       **({"remote": remote} if role != "none" else {}))
    if role == "write":
        with torch.no_grad():
            model.generate(first, past_key_values=cache, max_new_tokens=1, do_sample=False)
        cache.publish_prefix(first)
        assert cache.kv.flush_remote(timeout=30)
        print(json.dumps({"written": cache.kv.remote_stats()["written_pages"]}))
        return
    seconds, matched = first_token(model, cache, second, role == "read")
    print(json.dumps({"seconds": seconds, "matched": matched}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ttft-process":
        return ttft_process(sys.argv[2], int(sys.argv[3]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["perplexity", "decode", "ttft"])
    p.add_argument("--chunks", type=int, default=16)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--prefill", type=int, default=256)
    p.add_argument("--prompts", type=int, nargs="+", default=[512, 4096, 8192])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--redis", action="store_true")
    p.add_argument("--only", nargs="*", help="perplexity: the rows whose names hold one of these "
                   "words (the first row, the base, always runs)")
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    result = {"perplexity": run_perplexity, "decode": run_decode, "ttft": run_ttft}[args.what](args)
    result["date"] = time.strftime("%Y-%m-%d")
    text = json.dumps(result, indent=1)
    if args.json:
        open(args.json, "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
