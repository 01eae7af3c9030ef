"""One model's KV cache over one token sequence: the only place a level rolls back.

Callers never crop caches themselves. They ask for logits over a whole sequence; the cache keeps
the longest prefix it already holds, crops the rest (a rejection below, or a commit above that
replaced a token) and feeds only the new tokens in one forward pass.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from .stats import LevelStats

__all__ = ["CachedModel"]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedModel:
    """A causal LM with a rolling KV cache and its counters.

    Args:
        model: a transformers causal LM (or a truncated view of one).
        logits_width: logits are sliced to this many columns (the chain's shared vocabulary).
        stats: counters to update with each forward pass.
    """

    def __init__(self, model: nn.Module, logits_width: int, stats: LevelStats) -> None:
        self.model = model
        self.width = logits_width
        self.stats = stats
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self) -> None:
        """Forget the cached sequence (a new prompt)."""
        from transformers import DynamicCache

        self._cache = DynamicCache()
        self._cached: list[int] = []
        self._last: torch.Tensor | None = None  # [1, V] logits after the last cached token
        self._forward_s = 0.0  # time inside the model since the last logits()/prefill() call

    def _rollback(self, keep: int) -> None:
        """Drop every cached position from ``keep`` on."""
        if keep == 0:
            self.reset()
        elif keep < len(self._cached):
            # a negative count removes that many positions in every transformers version
            self._cache.crop(keep - len(self._cached))
            self._cached = self._cached[:keep]
            self._last = None

    @torch.inference_mode()
    def _forward(self, seq: list[int], first: int) -> tuple[torch.Tensor, int]:
        """Logits rows ``first..len(seq)-1`` and the number of tokens fed to get them."""
        common = _common_prefix(self._cached, seq)
        held = len(self._cached)
        if self._last is not None and common == held and first == held - 1:
            # the first row wanted is the one kept from the previous pass: feed only what is new
            new = seq[held:]
            rows = [self._last]
            if new:
                rows.append(self._run(new, len(new)))
        else:
            start = min(common, first)
            self._rollback(start)
            new = seq[start:]
            rows = [self._run(new, len(seq) - first)]
        self._cached = list(seq)
        logits = torch.cat(rows) if len(rows) > 1 else rows[0]  # [len(seq) - first, V]
        self._last = logits[-1:]
        return logits, len(new)

    def _run(self, new: list[int], keep: int) -> torch.Tensor:
        t0 = time.perf_counter()
        ids = torch.tensor([new], device=self.device)  # [1, new tokens]
        out = self.model(input_ids=ids, past_key_values=self._cache, use_cache=True, logits_to_keep=keep)
        logits = out.logits[0, :, : self.width]  # [keep, V]
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
        self._forward_s += time.perf_counter() - t0
        return logits

    def logits(self, seq: list[int], first: int) -> torch.Tensor:
        """Logits ``[len(seq) - first, V]``; row i predicts the token after ``seq[first + i]``.

        Counted as one decode forward pass of the tokens not yet cached (none when the rows
        wanted were all kept from the previous pass, e.g. the prompt's last position).
        """
        t0 = time.perf_counter()
        self._forward_s = 0.0
        logits, fed = self._forward(seq, first)  # each model pass synchronizes a CUDA device itself
        if fed:
            self.stats.forward_passes += 1
            self.stats.tokens_fed += fed
        elapsed = time.perf_counter() - t0
        self.stats.time_s += elapsed
        self.stats.forward_s += self._forward_s
        self.stats.cache_s += elapsed - self._forward_s
        return logits

    def prefill(self, prompt: list[int]) -> None:
        """Cache the whole prompt and keep the logits that predict the first new token."""
        self.reset()
        t0 = time.perf_counter()
        self._forward(prompt, len(prompt) - 1)
        self.stats.prefill_tokens += len(prompt)
        self.stats.prefill_s += time.perf_counter() - t0
