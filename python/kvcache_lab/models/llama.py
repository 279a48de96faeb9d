"""A Llama forward pass in numpy (float32) whose K/V live in a kvcache Cache and whose attention
kvcache computes: for every layer the step appends the new tokens' K and V and attends, batched
over sequences, one token at a time or a chunk of a prompt at once. `dense_logits` is the same
model recomputed from scratch with attention in float64, the yardstick of the exactness tests."""

import numpy as np

import kvcache


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, theta):
    """rotate_half RoPE of x [tokens, heads, head_dim] at the tokens' positions."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.asarray(positions, np.float64)[:, None] * inv[None, :]  # [tokens, d/2]
    cos = np.cos(angles).astype(np.float32)[:, None, :]
    sin = np.sin(angles).astype(np.float32)[:, None, :]
    first, second = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def visible_per_layer(cache):
    """Each layer's visible(t) under its own group's mask, as the cache reports its groups
    (config `layers`): the dense reference of a hybrid cache. Masks of other kinds are refused."""
    out = [None] * cache.model.layers
    for g in cache.groups():
        kind, window, sinks, chunk = g["kind"], g["window"], g["sinks"], g["chunk"]
        if kind == "causal":
            seen = lambda t: np.arange(t + 1)
        elif kind == "sliding_window":
            seen = lambda t, w=window: np.arange(max(0, t - w + 1), t + 1)
        elif kind == "sink_window":
            seen = lambda t, w=window, s=sinks: np.union1d(np.arange(min(s, t + 1)),
                                                           np.arange(max(0, t - w + 1), t + 1))
        elif kind == "chunked":
            seen = lambda t, n=chunk: np.arange(t - t % n, t + 1)
        else:
            raise ValueError(f"layer group {g['name']}: a {kind} mask has no dense reference here")
        for layer in g["layers"]:
            out[layer] = seen
    return out


class Model:
    """SmolLM2 (any Llama) over a Cache whose model shape matches the weights'.

    With `rowwise`, every projection multiplies one token's row at a time, so that a token's
    activations are bit for bit the same whether it comes alone (decode) or in a chunk (prefill,
    the dense recompute): BLAS sums a matrix product of many rows in another order than one of
    one row, and a quantized format turns such last-bit differences into different codes. The
    exactness tests use it; the experiments multiply whole chunks (faster)."""

    def __init__(self, weights, rowwise=False, kv_transform=None):
        self.w = weights
        self.c = weights.config
        self.rowwise = rowwise
        self.kv_transform = kv_transform  # (k, v) -> (k, v) before they are appended

    def linear(self, x, w):
        if not self.rowwise:
            return x @ w.T
        return np.concatenate([x[i:i + 1] @ w.T for i in range(len(x))])

    def cache_config(self, **sections):
        """The Cache keywords for this model: its shape and RoPE (rotate_half: neox), cpu-tbb,
        then `sections`."""
        c = self.c
        sections.setdefault("backend", ["cpu-tbb"])
        sections["model"] = {"layers": c.layers, "q_heads": c.q_heads, "kv_heads": c.kv_heads,
                             "head_dim": c.head_dim,
                             "rope": {"theta": c.rope_theta, "style": "neox"}}
        return sections

    def step(self, cache, sequences, tokens):
        """Runs one step: tokens[i] (ids) are appended to sequences[i]; returns the logits of
        every new token in the step's order, [sum(len(t)), vocab], and the step's report."""
        hidden, report = self.step_hidden(cache, sequences, tokens)
        return self.logits(hidden), report

    def logits(self, hidden):
        return self.linear(hidden, self.w.embedding)

    def step_hidden(self, cache, sequences, tokens):
        """As step(), the final normalized hidden states instead of the logits."""
        c = self.c
        counts = [len(t) for t in tokens]
        step = cache.begin_step(list(sequences), counts)
        if list(step.sequences) != list(sequences):
            raise RuntimeError(f"the step preempted some of its own sequences: {step.report}")
        ids = np.concatenate([np.asarray(t, np.int64) for t in tokens])
        # The newest positions, which every layer group holds (a windowed one frees older ones).
        positions = np.concatenate([cache.positions(s, layer=0)[-n:]
                                    for s, n in zip(sequences, counts)])
        decode = all(n == 1 for n in counts)
        x = self.w.embedding[ids]
        for layer, L in enumerate(self.w.layers):
            h = rms_norm(x, L.attn_norm, c.rms_eps)
            q = (self.linear(h, L.wq)).reshape(-1, c.q_heads, c.head_dim)
            k = (self.linear(h, L.wk)).reshape(-1, c.kv_heads, c.head_dim)
            v = np.ascontiguousarray((self.linear(h, L.wv)).reshape(-1, c.kv_heads, c.head_dim))
            q = np.ascontiguousarray(rope(q, positions, c.rope_theta))
            k = np.ascontiguousarray(rope(k, positions, c.rope_theta))
            if self.kv_transform is not None:  # e.g. a format's reference round trip
                k, v = self.kv_transform(k, v)
            step.append(layer, k, v)
            attended = step.decode(layer, q) if decode else step.prefill(layer, q)
            x = x + self.linear(attended.reshape(len(ids), -1), L.wo)
            h = rms_norm(x, L.ffn_norm, c.rms_eps)
            x = x + self.linear(silu(self.linear(h, L.w_gate)) * self.linear(h, L.w_up), L.w_down)
        report = step.finish()
        return rms_norm(x, self.w.output_norm, c.rms_eps), report

    def prefill_hidden(self, cache, seq, ids, chunk=256):
        """Appends `ids` to one sequence in steps of `chunk` tokens; the final normalized hidden
        state of each token, [len(ids), dim]."""
        return np.concatenate([self.step_hidden(cache, [seq], [ids[b:b + chunk]])[0]
                               for b in range(0, len(ids), chunk)])

    def dense_logits(self, ids, visible=None, cache_positions=False):
        """Logits of every token of `ids` from a full recompute, attention in float64: causal, or
        over visible(t), the ascending positions token t sees (a list of such functions: one per
        layer, as visible_per_layer gives for a hybrid cache). With cache_positions, positions
        as StreamingLLM numbers them within the cache: the keys a query sees rotated at their rank
        among them, the query at its own rank (the reference of docs/streaming.md)."""
        c = self.c
        ids = np.asarray(ids, np.int64)
        n, group = len(ids), c.q_heads // c.kv_heads
        visible = visible or (lambda t: np.arange(t + 1))
        per_layer = visible if isinstance(visible, (list, tuple)) else [visible] * c.layers
        x = self.w.embedding[ids]
        for L, visible in zip(self.w.layers, per_layer):
            h = rms_norm(x, L.attn_norm, c.rms_eps)
            q = (self.linear(h, L.wq)).reshape(n, c.q_heads, c.head_dim)
            k = (self.linear(h, L.wk)).reshape(n, c.kv_heads, c.head_dim)
            v = np.repeat((self.linear(h, L.wv)).reshape(n, c.kv_heads, c.head_dim)
                          .astype(np.float64), group, axis=1)
            attended = np.empty((n, c.q_heads, c.head_dim), np.float32)
            for t in range(n):
                seen = np.asarray(visible(t))
                at = np.arange(len(seen)) if cache_positions else seen
                qt = rope(q[t:t + 1], [np.searchsorted(seen, t) if cache_positions else t],
                          c.rope_theta)[0].astype(np.float64)
                kt = np.repeat(rope(k[seen], at, c.rope_theta).astype(np.float64), group, axis=1)
                logits = np.einsum("hd,khd->hk", qt, kt) / np.sqrt(c.head_dim)
                weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
                weights /= weights.sum(axis=-1, keepdims=True)
                attended[t] = np.einsum("hk,khd->hd", weights, v[seen])
            x = x + self.linear(attended.reshape(n, -1), L.wo)
            h = rms_norm(x, L.ffn_norm, c.rms_eps)
            x = x + self.linear(silu(self.linear(h, L.w_gate)) * self.linear(h, L.w_up), L.w_down)
        return self.linear(rms_norm(x, self.w.output_norm, c.rms_eps), self.w.embedding)

    def generate(self, cache, prompt_ids, max_tokens, stop=None, chunk=256):
        """Greedy completion of one prompt: the prompt in chunks of `chunk`, then token by token."""
        seq = cache.add_sequence()
        logits = self.logits(self.prefill_hidden(cache, seq, prompt_ids, chunk)[-1:])
        out = []
        for _ in range(max_tokens):
            token = int(np.argmax(logits[-1]))
            if token == stop:
                break
            out.append(token)
            logits, _ = self.step(cache, [seq], [[token]])
        cache.release(seq)
        return out
