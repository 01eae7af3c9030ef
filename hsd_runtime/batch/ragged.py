"""One model's KV cache over a batch of sequences of different lengths: one padded layout,
per-sequence lengths, 4-D attention masks; the only place a batched level rolls back.

Layout: per layer, keys and values ``[b, heads, capacity, head_dim]``; sequence i's cached tokens
fill slots ``0..L_i - 1`` of its row. A pass feeds n_i new tokens to each sequence, n = max n_i.
Row i's tokens take the last n_i query slots (left padding, so that every row's wanted logits are
the last rows of the pass) and are written at slots ``L_i..L_i + n_i - 1``; its padding writes at
``L_i + n_i..L_i + n - 1``, slots no query of that row attends to and the next pass overwrites.
Row i's j-th new token has position id ``L_i + j`` and attends to slots ``0..L_i + j``: its
own sequence and nothing else, whatever the other rows hold. Rolling a sequence back is setting
its L_i lower - nothing is cropped, copied or shifted - so ragged acceptance costs no KV traffic.

Callers never roll back themselves: as in :mod:`hsd_runtime.decoding.cache`, they ask for logits over whole
sequences, and each row keeps its longest cached prefix and feeds the rest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import nn
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from ..decoding.cache import common_prefix
from ..decoding.results import LevelStats
from ..models.torch_engine import cache_argument

__all__ = ["BatchedCache"]

CHUNK = 64  # the layout grows by whole chunks of slots


class _Layout:
    """What every layer of one pass needs: where each query slot writes, how many slots to return."""

    def __init__(self) -> None:
        self.capacity = 0
        self.write: torch.Tensor | None = None  # [b, 1, n, 1] slot of each query
        self.kv_len = 0


class _RaggedLayer(DynamicLayer):
    """One layer's keys and values in the padded layout, written at the slots of ``layout``."""

    def __init__(self, layout: _Layout) -> None:
        super().__init__()
        self.layout = layout

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, _ = key_states.shape
        self.keys = key_states.new_zeros(b, h, 0, key_states.shape[-1])
        self.values = value_states.new_zeros(b, h, 0, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.keys is not None and self.values is not None and self.layout.write is not None
        grow = self.layout.capacity - self.keys.shape[2]
        if grow > 0:
            self.keys = torch.cat([self.keys, self.keys.new_zeros(*self.keys.shape[:2], grow, self.keys.shape[3])], dim=2)
            self.values = torch.cat([self.values, self.values.new_zeros(*self.values.shape[:2], grow, self.values.shape[3])], dim=2)
        write = self.layout.write
        self.keys.scatter_(2, write.expand(-1, key_states.shape[1], -1, key_states.shape[3]), key_states)
        self.values.scatter_(2, write.expand(-1, value_states.shape[1], -1, value_states.shape[3]), value_states)
        kv = self.layout.kv_len
        return self.keys[:, :, :kv], self.values[:, :, :kv]

    def get_seq_length(self) -> int:
        return self.layout.kv_len

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.layout.kv_len, 0

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the ragged layout rolls back by sequence lengths, never by cropping")


class _RaggedKV(Cache):
    """A transformers cache whose layers (added as the model reaches them) share one layout."""

    def __init__(self, layout: _Layout) -> None:
        super().__init__(layers=[])
        self.layout = layout

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        while len(self.layers) <= layer_idx:
            self.layers.append(_RaggedLayer(self.layout))
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class BatchedCache:
    """A causal LM over ``batch`` sequences with one ragged KV layout, and its counters.

    Args:
        model: a transformers causal LM (or a truncated view of one).
        logits_width: logits are sliced to this many columns (the chain's shared vocabulary).
        stats: counters to update with each batched forward pass (one pass counts once).
        batch: the number of sequences (rows).
    """

    def __init__(self, model: nn.Module, logits_width: int, stats: LevelStats, batch: int) -> None:
        self.model = model
        self.width = logits_width
        self.stats = stats
        self.device = next(model.parameters()).device
        # the activations' dtype, for the additive mask (an int8 copy computes in fp32 like its embeddings)
        self.dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        self.reset(batch)

    @property
    def batch(self) -> int:
        return len(self._held)

    def reset(self, batch: int) -> None:
        """Forget every cached sequence; hold ``batch`` rows from now on."""
        self._layout = _Layout()
        self._cache = _RaggedKV(self._layout)
        self._held: list[list[int]] = [[] for _ in range(batch)]  # row i's cached tokens: slots 0..L_i - 1
        self._last: list[torch.Tensor | None] = [None] * batch  # [1, V] logits after row i's last cached token

    def _rollback(self, row: int, keep: int) -> None:
        """Drop row ``row``'s cached positions from ``keep`` on: its length is all there is to change."""
        if keep < len(self._held[row]):
            self._held[row] = self._held[row][:keep]
            self._last[row] = None

    @torch.inference_mode()
    def _forward(self, seqs: Sequence[list[int] | None], first: Sequence[int]) -> tuple[list[torch.Tensor | None], int]:
        """Per row, logits rows ``first[i]..len(seqs[i]) - 1`` (None for a row not asked), and the
        tokens fed, in one pass over every row (rows with nothing new are padding)."""
        new: list[list[int]] = []
        keep: list[int] = []
        kept: list[bool] = []  # the first row wanted is the one kept from the previous pass
        for i, seq in enumerate(seqs):
            held = self._held[i]
            if seq is None:
                new.append([])
                keep.append(0)
                kept.append(False)
                continue
            common = common_prefix(held, seq)
            if self._last[i] is not None and common == len(held) and first[i] == len(held) - 1:
                start = len(held)
                kept.append(True)
            else:
                start = min(common, first[i])
                kept.append(False)
            self._rollback(i, start)
            new.append(seq[start:])
            keep.append(len(seq) - first[i] - kept[-1])
        n = max(len(x) for x in new)
        rows: torch.Tensor | None = None
        if n:
            rows = self._run(new, max(keep), n)  # [b, max(keep), V]
        out: list[torch.Tensor | None] = []
        for i, seq in enumerate(seqs):
            if seq is None:
                out.append(None)
                continue
            parts: list[torch.Tensor] = []
            if kept[i]:
                kept_row = self._last[i]
                assert kept_row is not None
                parts.append(kept_row)
            if keep[i]:
                assert rows is not None
                parts.append(rows[i, rows.shape[1] - keep[i] :])
            logits = torch.cat(parts) if len(parts) > 1 else parts[0]  # [len(seq) - first, V]
            self._held[i] = list(seq)
            self._last[i] = logits[-1:]
            out.append(logits)
        return out, sum(len(x) for x in new)

    def _run(self, new: list[list[int]], keep: int, n: int) -> torch.Tensor:
        """One pass: row i feeds ``new[i]`` after its cached tokens; logits ``[b, keep, V]`` of the last query slots."""
        t0 = time.perf_counter()
        dev = self.device
        start = torch.tensor([len(h) for h in self._held], device=dev)  # [b] L_i
        fed = torch.tensor([len(x) for x in new], device=dev)  # [b] n_i
        q = torch.arange(n, device=dev)[None]  # [1, n] query slot
        j = q - (n - fed[:, None])  # [b, n] index among the row's new tokens; < 0 for padding
        real = j >= 0
        ids = torch.zeros(len(new), n, dtype=torch.long, device=dev)
        for i, tokens in enumerate(new):
            if tokens:
                ids[i, n - len(tokens) :] = torch.tensor(tokens, device=dev)
        last = (start[:, None] + j).clamp_min(0)  # [b, n] the last slot a query sees (its own), its position
        write = torch.where(real, start[:, None] + j, start[:, None] + fed[:, None] + q)  # [b, n] padding past the row's tokens
        kv = int(start.max()) + n
        self._layout.kv_len = kv
        self._layout.capacity = max(self._layout.capacity, -(-kv // CHUNK) * CHUNK)
        self._layout.write = write[:, None, :, None]
        allowed = torch.arange(kv, device=dev)[None, None] <= last[:, :, None]  # [b, n, kv]
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=dev).masked_fill_(~allowed, torch.finfo(self.dtype).min)
        out = self.model(
            input_ids=ids,
            position_ids=last,
            attention_mask=mask[:, None],
            use_cache=True,
            logits_to_keep=keep,
            **cache_argument(self.model, self._cache),
        )
        logits = out.logits[:, :, : self.width]  # [b, keep, V]
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
        self._forward_s += time.perf_counter() - t0
        return logits

    def logits(self, seqs: Sequence[list[int] | None], first: Sequence[int]) -> list[torch.Tensor | None]:
        """Per row i, logits ``[len(seqs[i]) - first[i], V]``; row r predicts the token after
        ``seqs[i][first[i] + r]``. A row given None is not asked (padding in the pass).

        Counted as one forward pass of the tokens not yet cached (none when every row wanted was
        kept from the previous pass).
        """
        t0 = time.perf_counter()
        self._forward_s = 0.0
        out, fed = self._forward(seqs, first)
        self.stats.add_pass(fed, time.perf_counter() - t0, self._forward_s)
        return out

    def prefill(self, prompts: Sequence[list[int]]) -> None:
        """Cache every prompt (one padded pass) and keep the logits that predict each first new token."""
        self.reset(len(prompts))
        self._forward_s = 0.0
        t0 = time.perf_counter()
        self._forward([list(p) for p in prompts], [len(p) - 1 for p in prompts])
        self.stats.prefill_tokens += sum(len(p) for p in prompts)
        self.stats.prefill_s += time.perf_counter() - t0
