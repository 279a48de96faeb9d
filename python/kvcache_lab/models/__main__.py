"""python -m kvcache_lab.models [PROMPT] [--format F] [--tokens N]: SmolLM2-135M-Instruct answers one
chat turn greedily, its K/V in a kvcache Cache (cpu-tbb) stored in format F."""

import argparse
import time

import kvcache
from kvcache_lab.models import fetch, gguf_llama, llama


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?", default="What is the capital of France?")
    parser.add_argument("--format", default="fp16", help="storage format of K and V")
    parser.add_argument("--tokens", type=int, default=64, help="most tokens to generate")
    args = parser.parse_args()
    path = fetch.smollm2_gguf()
    model = llama.Model(gguf_llama.load(path))
    tok = gguf_llama.tokenizer(path)
    cache = kvcache.Cache(**model.cache_config(cache={"capacity": "256MiB"},
                                               format={"k": args.format, "v": args.format}))
    chat = f"<|im_start|>user\n{args.prompt}<|im_end|>\n<|im_start|>assistant\n"
    start = time.perf_counter()
    out = model.generate(cache, tok.encode(chat).ids, args.tokens, stop=model.c.eos)
    seconds = time.perf_counter() - start
    print(tok.decode(out))
    print(f"[{len(out)} tokens in {seconds:.1f} s, K/V in {args.format} on {cache.backend}]")


if __name__ == "__main__":
    main()
