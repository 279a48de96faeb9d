"""python -m kvcache_lab.models.dump_kv OUT_DIR [--layers 0,14,29] [--tokens 2048]: SmolLM2's keys
and values of some layers over Pride and Prejudice, as `kvcache evaluate` reads them: one .npy
per layer, float32 [2, tokens, kv_heads, head_dim] (K then V, K after RoPE, as the cache holds
them), gathered from an fp32 cache."""

import argparse
import pathlib

import numpy as np

import kvcache
from kvcache_lab.models import austen, fetch, gguf_llama, llama


def dump(out, layers, tokens, model=None, tokenizer=None):
    """Writes out/layer<L>.npy for each layer; returns the files."""
    path = fetch.smollm2_gguf()
    model = model or llama.Model(gguf_llama.load(path))
    tokenizer = tokenizer or gguf_llama.tokenizer(path)
    ids = tokenizer.encode(austen.book("prideprejudice")).ids[:tokens]
    cache = kvcache.Cache(**model.cache_config(cache={"capacity": "512MiB"},
                                               format={"k": "fp32", "v": "fp32"}))
    seq = cache.add_sequence()
    model.prefill_hidden(cache, seq, ids)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for layer in layers:
        k, v = cache.gather(layer, seq)
        files.append(out / f"layer{layer}.npy")
        np.save(files[-1], np.stack([k, v]))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--layers", default="0,14,29")
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    for file in dump(args.out, [int(x) for x in args.layers.split(",")], args.tokens):
        print(file)


if __name__ == "__main__":
    main()
