"""python -m kvcache_lab.eval.llamacpp: the outside check. The same GGUF, the same tokens and the
same protocol as formats.py (chunks of --ctx, the second half of each scored), through llama.cpp
itself with its f16, q8_0 and q4_0 K/V. Needs llama-cpp-python, built from source in an
environment of its own (not CI's, not .venv's):

    python3 -m venv /tmp/lcpp && /tmp/lcpp/bin/pip install numpy gguf tokenizers
    CMAKE_BUILD_PARALLEL_LEVEL=2 /tmp/lcpp/bin/pip install --no-binary llama-cpp-python llama-cpp-python
    PYTHONPATH=build/python /tmp/lcpp/bin/python -m kvcache_lab.eval.llamacpp

llama.cpp's matrix products quantize activations, so its perplexity is not ours exactly; a wrong
RoPE or tokenizer on either side would be off by far more than a few percent."""

import argparse

import numpy as np

from kvcache_lab.eval.scoring import log_softmax, paired_delta, perplexity
from kvcache_lab.models import austen, fetch, gguf_llama

KV_TYPES = (("f16", 1), ("q8_0", 8), ("q4_0", 2))  # ggml type ids


def run(chunks, ctx):
    import llama_cpp

    path = fetch.smollm2_gguf()
    ids = gguf_llama.tokenizer(path).encode(austen.book("prideprejudice")).ids
    rows, base = [], None
    for name, ggml_type in KV_TYPES:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=ctx, n_batch=ctx, n_ubatch=ctx,
                              logits_all=True, type_k=ggml_type, type_v=ggml_type,
                              flash_attn=True, verbose=False)
        nll = []
        for i in range(chunks):
            chunk = ids[i * ctx:(i + 1) * ctx]
            llm.reset()
            llm.eval(chunk)
            first = ctx // 2
            lp = log_softmax(np.asarray(llm.scores[:ctx])[first:-1])
            nll.append(-lp[np.arange(ctx - 1 - first), np.asarray(chunk[first + 1:])])
        nll = np.concatenate(nll)
        base = nll if base is None else base
        delta, se = paired_delta(nll, base)
        rows.append({"kv": name, "perplexity": perplexity(nll), "delta_pct": delta,
                     "delta_pct_se": se, "tokens_scored": int(len(nll))})
        print(f"llama.cpp {name:<5} K/V: perplexity {rows[-1]['perplexity']:.3f}, "
              f"{delta:+.2f} ± {se:.2f} % against f16 ({len(nll)} tokens)", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=1024)
    args = parser.parse_args()
    run(args.chunks, args.ctx)


if __name__ == "__main__":
    main()
