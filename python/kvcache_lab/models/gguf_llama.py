"""A Llama model's weights and tokenizer from its GGUF file.

llama.cpp's converter permutes the rows of Q and K within each head so that its RoPE rotates
adjacent pairs; we undo it, so that RoPE rotates the two halves of each head (rotate_half, as
Hugging Face does). Getting this wrong gives a model that talks nonsense without any error."""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Config:
    layers: int
    dim: int
    ffn: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_theta: float
    rms_eps: float
    context: int
    bos: int
    eos: int


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: np.ndarray  # [q_heads * head_dim, dim], rows in rotate_half order
    wk: np.ndarray  # [kv_heads * head_dim, dim]
    wv: np.ndarray
    wo: np.ndarray  # [dim, q_heads * head_dim]
    ffn_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray


@dataclass
class Weights:
    config: Config
    embedding: np.ndarray  # [vocab, dim]; also the output projection (tied)
    layers: list = field(default_factory=list)
    output_norm: np.ndarray = None


def _field(reader, key):
    return reader.fields[key].contents()


def unpermute(w, heads):
    """llama.cpp's Q/K row order (adjacent RoPE pairs) back to rotate_half order, per head."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load(path):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: a '{arch}' model, not llama")
    q_heads = int(_field(reader, "llama.attention.head_count"))
    dim = int(_field(reader, "llama.embedding_length"))
    config = Config(
        layers=int(_field(reader, "llama.block_count")), dim=dim,
        ffn=int(_field(reader, "llama.feed_forward_length")), q_heads=q_heads,
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")), head_dim=dim // q_heads,
        vocab=int(_field(reader, "llama.vocab_size")),
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        context=int(_field(reader, "llama.context_length")),
        bos=int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos=int(_field(reader, "tokenizer.ggml.eos_token_id")))
    tensors = {}
    for t in reader.tensors:
        tensors[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
            [int(n) for n in reversed(t.shape)])
    weights = Weights(config, tensors["token_embd.weight"],
                      output_norm=tensors["output_norm.weight"])
    for i in range(config.layers):
        b = f"blk.{i}."
        weights.layers.append(Layer(
            tensors[b + "attn_norm.weight"],
            unpermute(tensors[b + "attn_q.weight"], config.q_heads),
            unpermute(tensors[b + "attn_k.weight"], config.kv_heads),
            tensors[b + "attn_v.weight"], tensors[b + "attn_output.weight"],
            tensors[b + "ffn_norm.weight"], tensors[b + "ffn_gate.weight"],
            tensors[b + "ffn_up.weight"], tensors[b + "ffn_down.weight"]))
    return weights


def tokenizer(path):
    """The GGUF's byte-level BPE as a `tokenizers` Tokenizer, with SmolLM's pre-tokenizer: each
    digit alone, then GPT-2's regex; no BOS added."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(path))
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre != "smollm":
        raise ValueError(f"{path}: pre-tokenizer '{pre}', not smollm")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    bpe = models.BPE({t: i for i, t in enumerate(tokens)}, merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    types = _field(reader, "tokenizer.ggml.token_type")
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(tokens, types)
                            if int(ty) == 3])  # control tokens: <|im_start|>, ...
    return tok
