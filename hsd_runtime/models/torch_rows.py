"""The torch engine over b rows: one model's KV cache over b sequences of different lengths in one
padded layout, fed by one pass with a 4-D attention mask (:class:`RowsCache`).

Layout: per layer, keys and values ``[b, heads, capacity, head_dim]``; row i's cached tokens
fill slots ``0..L_i - 1``. A pass feeds n_i new tokens to each row, n = max n_i. Row i's tokens
take the last n_i query slots (left padding, so that every row's wanted logits are the last rows of
the pass) and are written at slots ``L_i..L_i + n_i - 1``; its padding writes at
``L_i + n_i..L_i + n - 1``, slots no query of that row attends to and the next pass overwrites.
Row i's j-th new token has position id ``L_i + j`` and attends to slots ``0..L_i + j``: its own
sequence and nothing else, whatever the other rows hold. Rolling a row back is feeding it at a
lower L_i next time - nothing is cropped, copied or shifted - so ragged acceptance costs no KV
traffic. The bookkeeping of which row holds what is :class:`~hsd_runtime.decoding.cache.CachedModel`'s.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from .output import activation_dtype, additive_mask, cache_argument

__all__ = ["RowsCache"]

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


class RowsCache:
    """A transformers causal LM's KV cache over ``rows`` sequences in one ragged layout (an
    :class:`~hsd_runtime.models.engine.EngineCache` of more than one row).

    Args:
        model: a transformers causal LM (or a truncated, trimmed or quantized view of one).
        width: logits are sliced to this many columns.
        rows: the number of sequences.
    """

    def __init__(self, model: nn.Module, width: int, rows: int) -> None:
        self.model = model
        self.width = width
        self.rows = rows
        self.device = next(model.parameters()).device
        # the activations' dtype, for the additive mask (an int8 copy computes in fp32 like its embeddings)
        self.dtype = activation_dtype(model)
        self.clear()

    def clear(self) -> None:
        self._layout = _Layout()
        self._cache = _RaggedKV(self._layout)

    @torch.inference_mode()
    def feed_rows(self, tokens: list[list[int]], starts: list[int], keep: int) -> torch.Tensor:
        """One pass: row i feeds ``tokens[i]`` at positions ``starts[i]..`` (its cached slots before
        ``starts[i]`` stay, the ones after are overwritten or never read); logits ``[b, keep, V]``
        of the last ``keep`` query slots. A row with no tokens is padding."""
        dev = self.device
        n = max(len(x) for x in tokens)
        start = torch.tensor(starts, device=dev)  # [b] L_i
        fed = torch.tensor([len(x) for x in tokens], device=dev)  # [b] n_i
        q = torch.arange(n, device=dev)[None]  # [1, n] query slot
        j = q - (n - fed[:, None])  # [b, n] index among the row's new tokens; < 0 for padding
        real = j >= 0
        ids = torch.zeros(len(tokens), n, dtype=torch.long, device=dev)
        for i, row in enumerate(tokens):
            if row:
                ids[i, n - len(row) :] = torch.tensor(row, device=dev)
        last = (start[:, None] + j).clamp_min(0)  # [b, n] the last slot a query sees (its own), its position
        write = torch.where(real, start[:, None] + j, start[:, None] + fed[:, None] + q)  # [b, n] padding past the row's tokens
        kv = max(starts) + n
        self._layout.kv_len = kv
        self._layout.capacity = max(self._layout.capacity, -(-kv // CHUNK) * CHUNK)
        self._layout.write = write[:, None, :, None]
        allowed = torch.arange(kv, device=dev)[None, None] <= last[:, :, None]  # [b, n, kv]
        mask = additive_mask(allowed, self.dtype)
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
        return logits
