"""Timers of c(n, b): one cached pass over b sequences of n new tokens each.

A model is timed through the runtime's own cache over rows (:class:`hsd_runtime.CachedModel`,
:meth:`~hsd_runtime.CachedModel.prefill_rows` and :meth:`~hsd_runtime.CachedModel.logits_rows`),
so a batch plan is predicted from the passes it will run: b sequences with ``context_len``
random tokens cached each, a pass of n new tokens per sequence, rolled back again. The n-gram
lookup at batch b is b lookups, one per sequence. The sweep that visits their points, with every
other point's care, is :class:`.sweep.Sweep`.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from hsd_runtime import head_rows, ngram_lookup
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats

__all__ = ["BatchLookupTimer", "BatchPassTimer"]


class BatchPassTimer:
    """One model with ``batch`` sequences of ``context_len`` tokens cached: times passes of n new
    tokens per sequence, every pass after the same cached lengths.

    Two sets of new tokens alternate, so that each pass replaces the other's: the cache rolls the
    last pass back and feeds n tokens per sequence, as the runtime does after a rejection (the
    same set twice would be served from the cache without a pass). The first pass of a shape is
    the caller's to leave untimed."""

    def __init__(self, model: nn.Module, context_len: int, batch: int, seed: int = 0) -> None:
        self.device = next(model.parameters()).device
        vocab = head_rows(model)
        self._gen = torch.Generator().manual_seed(seed)
        self._vocab = vocab
        self._cache = CachedModel(model, vocab, LevelStats(model="timer"))
        self._contexts = torch.randint(0, vocab, (batch, context_len), generator=self._gen).tolist()
        self._cache.prefill_rows(self._contexts)
        self._new: dict[int, list[list[list[int]]]] = {}

    def __call__(self, n: int) -> float:
        """ms of one pass of ``n`` new tokens for every sequence."""
        if n not in self._new:
            sets = torch.randint(0, self._vocab, (2, len(self._contexts), n), generator=self._gen)
            sets[1, :, 0] = (sets[0, :, 0] + 1) % self._vocab  # the sets differ in their first token
            self._new[n] = [[c + x for c, x in zip(self._contexts, s.tolist())] for s in sets]
        seqs: list[list[int] | None] = list(self._new[n][0])
        self._new[n].reverse()
        first = [len(c) for c in self._contexts]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self._cache.logits_rows(seqs, first)  # feeds n tokens per sequence (the other set's are rolled back first)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return 1000.0 * (time.perf_counter() - t0)


class BatchLookupTimer:
    """The n-gram drafter over ``batch`` random contexts of ``context_len`` tokens, one lookup each."""

    def __init__(self, order: int, context_len: int, batch: int, seed: int = 0) -> None:
        self.order = order
        rng = np.random.default_rng(seed)
        self.contexts = [rng.integers(0, 1000, context_len).tolist() for _ in range(batch)]

    def __call__(self, n: int) -> float:
        """ms of one proposal of up to ``n`` tokens for every sequence."""
        t0 = time.perf_counter()
        for context in self.contexts:
            ngram_lookup(context, self.order, n)
        return 1000.0 * (time.perf_counter() - t0)
