"""Timers of c(n, b): one cached pass over b sequences of n new tokens each.

A model is timed through its engine's own cache over rows (:meth:`EngineModel.open_rows
<hsd_runtime.models.engine.EngineModel.open_rows>`, the torch engine's ragged layout), as
:class:`.timing.PassTimer` times one sequence through its engine's cache, so a batch plan is
predicted from the passes it will run: b sequences with ``context_len`` random tokens cached
each, a pass of n new tokens per sequence at the same positions every time. The n-gram lookup at
batch b is b lookups, one per sequence. The sweep that visits their points, with every other
point's care, is :class:`.sweep.Sweep`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from hsd_runtime import engine_model, ngram_lookup
from hsd_runtime.models.engine import EngineRows

__all__ = ["BatchLookupTimer", "BatchPassTimer"]


class BatchPassTimer:
    """One model with ``batch`` sequences of ``context_len`` tokens cached: times passes of n new
    tokens per sequence, every pass after the same cached lengths (a pass at positions
    ``context_len..`` replaces the one before it), each returning every row's logits (as a
    verifier's pass does). The first pass of a shape is the caller's to leave untimed."""

    def __init__(self, model: Any, context_len: int, batch: int, seed: int = 0) -> None:
        engine = engine_model(model)
        self.device = engine.device
        self._vocab = engine.n_vocab
        self._gen = torch.Generator().manual_seed(seed)
        self._context_len = context_len
        self._batch = batch
        self._cache: EngineRows = engine.open_rows(self._vocab, batch)
        contexts = torch.randint(0, self._vocab, (batch, context_len), generator=self._gen).tolist()
        with torch.inference_mode():
            self._cache.feed_rows(contexts, [0] * batch, 1)
        self._new: dict[int, list[list[int]]] = {}

    @torch.inference_mode()
    def __call__(self, n: int) -> float:
        """ms of one pass of ``n`` new tokens for every sequence."""
        if n not in self._new:
            self._new[n] = torch.randint(0, self._vocab, (self._batch, n), generator=self._gen).tolist()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self._cache.feed_rows(self._new[n], [self._context_len] * self._batch, n)
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
