"""KVCache: a transformers Cache whose layers live in a kvcache Cache.

One transformers batch row is one kvcache sequence. A forward pass is one kvcache Step: layer 0's
attention begins it (reserving each row's real new tokens: padding is never stored), every layer
appends its K/V and attends over its pages, and the last layer finishes it. transformers sees
the columns it expects (padding included); kvcache holds the tokens.
"""

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import kvcache
from kvcache.errors import EvictionError, Unsupported
from kvcache.transformers import attention as _attention
from kvcache.transformers.model import refusal, sections

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class KVLayer(CacheLayerMixin):
    """One layer's view of a KVCache: update hands the new states to the attention function;
    what changes whole rows (crop, reorder, repeat, select, reset) is done once, by layer 0."""

    is_sliding = False
    is_croppable = True
    is_compileable = False
    supports_early_init = False

    def __init__(self, owner, index):
        super().__init__()
        self.owner, self.index = owner, index

    def lazy_initialization(self, key_states, value_states):
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        _attention.hand_over(self.owner, self.index, key_states)
        return key_states, value_states

    def get_mask_sizes(self, query_length):
        return self.owner.columns + query_length, 0

    def get_seq_length(self):
        return self.owner.columns

    def get_max_length(self):
        return -1

    def reset(self):
        if self.index == 0:
            self.owner.clear()

    def reorder_cache(self, beam_idx):
        if self.index == 0:
            self.owner.reorder(beam_idx)

    def crop(self, tokens_to_remove):
        if self.index == 0:
            self.owner.roll_back(tokens_to_remove)

    def batch_repeat_interleave(self, repeats):
        if self.index == 0:
            self.owner.repeat(repeats)

    def batch_select_indices(self, indices):
        if self.index == 0:
            self.owner.select(indices)


class KVCache(Cache):
    """A transformers Cache in kvcache's pages. `config` is any keyword of kvcache.Cache (model,
    backend, cache, format, mask, eviction, remote, plugins); `format="int8-per-token"` names
    one format for K and V. The model's shape and RoPE come from its config. Raises Unsupported
    with the reason for a model kvcache cannot serve (kvcache.transformers.refusal)."""

    def __init__(self, model, /, **config):
        model_config = getattr(model, "config", model)
        why = refusal(model_config)
        if why is not None:
            raise Unsupported(why)
        self.sections = sections(model_config, config)
        self._open(kvcache.Cache(**self.sections))

    @classmethod
    def beside(cls, other):
        """A new, empty KVCache in the same kvcache Cache as `other` (its pages, its prefix index
        and its remote tier): another request of the same engine, which match_prefix can serve
        from what `other` published."""
        new = cls.__new__(cls)
        new.sections = other.sections
        new._open(other.kv)
        return new

    def _open(self, kv):
        self.kv = kv
        layers = self.sections["model"]["layers"]
        Cache.__init__(self, layers=[KVLayer(self, i) for i in range(layers)])
        self.last_layer = layers - 1
        # A layer whose group keeps every token (a hybrid cache's sliding layers free theirs):
        # what crop() counts the held tokens by, as Cache.truncate does.
        full = [g for g in kv.groups() if not g["frees_pages"]] or kv.groups()
        self.full_layer = full[0]["layers"][0]
        self.rows = []      # kvcache sequence of each batch row
        self.real = None    # [batch, columns] bool: which columns hold a token
        self.step = None    # the open kvcache Step of a forward pass
        self.new = None     # [batch, q_len] bool: the step's real new tokens
        self.report = None  # the last step's EvictionReport
        self.broken = None  # why the cache cannot be used, after a failure that left it so

    # ---- what transformers reads ---------------------------------------------------------
    @property
    def columns(self):
        return 0 if self.real is None else self.real.shape[1]

    def __repr__(self):
        return f"KVCache(rows={len(self.rows)}, columns={self.columns}, backend={self.kv.backend})"

    # ---- one forward pass: a kvcache step ------------------------------------------------
    def attend(self, layer, query, key, value, padding):
        self._usable()
        batch, q_heads, q_len, head_dim = query.shape
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.device.type != "cpu":
                raise TypeError(f"kvcache.transformers: {name} is on {t.device}; backend "
                                f"{self.kv.backend} reads host memory (cpu tensors)")
            if t.dtype not in _DTYPES or t.dtype != query.dtype:
                raise TypeError(f"kvcache.transformers: {name} is {t.dtype}; kvcache takes "
                                "float32, float16 or bfloat16, the same for query, key and value")
        if layer == 0:
            self._begin(batch, q_len, padding)
        elif self.step is None:
            raise RuntimeError(f"kvcache.transformers: layer {layer} ran before layer 0")
        new = self.new
        k = key.transpose(1, 2)[new]  # [tokens, kv_heads, head_dim], the real rows in row order
        v = value.transpose(1, 2)[new]
        self.step.append(layer, k, v)
        q = query.transpose(1, 2)[new]
        out = torch.empty_like(q)
        if q.shape[0] == len(self.step.sequences):
            self.step.decode(layer, q, out)
        else:
            self.step.prefill(layer, q, out)
        result = query.new_zeros(batch, q_len, q_heads, head_dim)
        result[new] = out
        if layer == self.last_layer:
            self._finish()
        return result

    def _begin(self, batch, q_len, padding):
        if self.step is not None:  # a forward pass that raised part way: its step is undone
            self.step = None
        if padding is None:
            new = torch.ones(batch, q_len, dtype=torch.bool)
        else:
            if padding.shape != (batch, self.columns + q_len):
                raise ValueError(f"kvcache.transformers: attention mask {tuple(padding.shape)} for "
                                 f"{batch} rows of {self.columns} cached + {q_len} new columns")
            new = padding[:, -q_len:].to("cpu", torch.bool)
        if not self.rows:
            self.rows = [self.kv.add_sequence() for _ in range(batch)]
            self.real = torch.zeros(batch, 0, dtype=torch.bool)
        elif len(self.rows) != batch:
            raise ValueError(f"kvcache.transformers: a batch of {batch} rows on a cache of "
                             f"{len(self.rows)}")
        counts = new.sum(dim=1).tolist()
        members = [self.rows[i] for i in range(batch) if counts[i] > 0]
        step = self.kv.begin_step(members, [c for c in counts if c > 0])
        if list(step.sequences) != members:
            lost = sorted(set(members) - set(step.sequences))
            raise EvictionError(f"kvcache.transformers: the eviction policy preempted sequences "
                                f"{lost} of this batch; their rows cannot go on", step.report)
        self.step, self.new = step, new

    def _finish(self):
        step, self.step = self.step, None
        self.report = step.finish()
        self.real = torch.cat([self.real, self.new], dim=1)
        if self.report.preempted:
            gone = [i for i, s in enumerate(self.rows) if s in set(self.report.preempted)]
            self.broken = f"rows {gone} were preempted by the eviction policy"
            raise EvictionError(f"kvcache.transformers: {self.broken}", self.report)

    # ---- rows: rollback, beams, prefixes -------------------------------------------------
    def roll_back(self, tokens_to_remove):
        """crop(-n): drops the last n columns; a positive count is refused (transformers 5)."""
        self._usable()
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): a positive count is not supported; give "
                             "a negative one, the number of tokens to remove")
        n = -tokens_to_remove
        if n == 0:
            return
        if n > self.columns:
            raise ValueError(f"crop({tokens_to_remove}): the cache holds {self.columns} tokens")
        dropped = self.real[:, -n:].sum(dim=1).tolist()
        held = [self.kv.length(s, layer=self.full_layer) for s in self.rows]
        if any(d > h for d, h in zip(dropped, held)):
            raise ValueError(f"crop({tokens_to_remove}): the eviction policy has already dropped "
                             "some of these tokens")
        for i, (s, d, h) in enumerate(zip(self.rows, dropped, held)):
            try:
                self.kv.truncate(s, h - d)
            except Exception as e:
                if i > 0:  # rows before it were cut: the rows no longer agree
                    self.broken = f"crop failed part way: {e}"
                raise
        self.real = self.real[:, :-n]

    def reorder(self, beam_idx):
        """Row j becomes a copy of row beam_idx[j]: its pages shared (fork, copy-on-write)."""
        self._usable()
        if not self.rows:
            return
        order = beam_idx.tolist()
        rows, used = [], set()
        for src in order:
            rows.append(self.rows[src] if src not in used else self.kv.fork(self.rows[src]))
            used.add(src)
        for i, s in enumerate(self.rows):
            if i not in used:
                self.kv.release(s)
        self.rows = rows
        self.real = self.real[beam_idx.to("cpu")]

    def repeat(self, repeats):
        self._usable()
        if not self.rows:
            return
        self.rows = [r if j == 0 else self.kv.fork(r) for r in self.rows for j in range(repeats)]
        self.real = self.real.repeat_interleave(repeats, dim=0)

    def select(self, indices):
        self._usable()
        if not self.rows:
            return
        keep = torch.arange(len(self.rows))[indices].tolist()
        for i, s in enumerate(self.rows):
            if i not in keep:
                self.kv.release(s)
        self.rows = [self.rows[i] for i in keep]
        self.real = self.real[keep]

    def clear(self):
        for s in self.rows:
            self.kv.release(s)
        self.rows, self.real, self.step, self.broken = [], None, None, None

    def match_prefix(self, input_ids):
        """Before generate() on an empty cache: attaches to each row the longest cached run of
        full pages of its prompt (locally, or through the remote tier) and returns the tokens
        reused, the same for every row (the least of them); generate() then runs the rest.
        At least the last token is left to run."""
        self._usable()
        if self.rows:
            raise ValueError("match_prefix needs an empty cache (reset() it first)")
        ids = torch.as_tensor(input_ids).reshape(-1, torch.as_tensor(input_ids).shape[-1])
        rows = [self.kv.add_sequence() for _ in range(ids.shape[0])]
        matched = [self.kv.match_prefix(s, ids[i].to(torch.int32).numpy())
                   for i, s in enumerate(rows)]
        common = min(min(matched), ids.shape[1] - 1)
        for s, m in zip(rows, matched):
            if m > common:
                self.kv.truncate(s, common)
        self.rows = rows
        self.real = torch.ones(len(rows), common, dtype=torch.bool)
        return common

    def publish_prefix(self, input_ids):
        """Offers each row's full pages for reuse by later requests (match_prefix), keyed by its
        token ids: input_ids [batch, n], the row's first n tokens. Rows with padding are refused
        (their columns are not their tokens)."""
        self._usable()
        ids = torch.as_tensor(input_ids).reshape(len(self.rows), -1)
        if ids.shape[1] > self.columns:
            raise ValueError(f"publish_prefix: {ids.shape[1]} tokens, the cache holds "
                             f"{self.columns}")
        if not bool(self.real[:, : ids.shape[1]].all()):
            raise Unsupported("publish_prefix: a row with padding cannot serve as a prefix")
        for i, s in enumerate(self.rows):
            self.kv.publish_prefix(s, ids[i].to(torch.int32).numpy())

    def _usable(self):
        if self.broken is not None:
            raise RuntimeError(f"kvcache.transformers: this cache cannot be used any more "
                               f"({self.broken}); make a new one")
