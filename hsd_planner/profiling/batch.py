"""c(n, b): the latency of one cached pass over b sequences of n new tokens each.

Measured with the batched runtime's own ragged layout (:class:`hsd_runtime.batch.ragged.BatchedCache`,
its 4-D mask built every pass), so a batch plan is predicted from the passes it will run: b
sequences with ``context_len`` random tokens cached each, a pass of n new tokens per sequence,
rolled back again. The n-gram lookup at batch b is b lookups, one per sequence.

Rounds interleave as the plain sweep's do (:mod:`.timing`): each round visits every (model,
context, batch size) group in a new seeded order and, within a group, every n in its own; a
group's b contexts are prefilled once per round (a b x context cache per group would not fit in
memory all at once for the larger batch sizes). Each sample is committed as it is taken, so an
interrupted profile resumes where it stopped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from hsd_runtime import head_rows, ngram_lookup
from hsd_runtime.batch.ragged import BatchedCache
from hsd_runtime.decoding.results import LevelStats

from ..store import Engine
from ..store.measurements import save_latency, stored_latency
from ..store.records import LatencyKey, LatencyPoint
from .timing import summarize

if TYPE_CHECKING:
    from .config import ProfileConfig, ProfiledModel, ProfileOutcome

__all__ = ["BatchLookupTimer", "BatchPassTimer", "batch_points", "measure_batches"]


class BatchPassTimer:
    """One model with ``batch`` sequences of ``context_len`` tokens cached: times passes of n new
    tokens per sequence, every pass after the same cached lengths.

    Two sets of new tokens alternate, so that each pass replaces the other's: the cache rolls the
    last pass back and feeds n tokens per sequence, as the runtime does after a rejection (the
    same set twice would be served from the cache without a pass)."""

    def __init__(self, model: nn.Module, context_len: int, batch: int, seed: int = 0) -> None:
        self.device = next(model.parameters()).device
        vocab = head_rows(model)
        self._gen = torch.Generator().manual_seed(seed)
        self._vocab = vocab
        self._cache = BatchedCache(model, vocab, LevelStats(model="timer"), batch)
        self._contexts = torch.randint(0, vocab, (batch, context_len), generator=self._gen).tolist()
        self._cache.prefill(self._contexts)
        self._new: dict[int, list[list[list[int]]]] = {}

    def __call__(self, n: int) -> float:
        """ms of one pass of ``n`` new tokens for every sequence."""
        if n not in self._new:
            sets = torch.randint(0, self._vocab, (2, len(self._contexts), n), generator=self._gen)
            sets[1, :, 0] = (sets[0, :, 0] + 1) % self._vocab  # the sets differ in their first token
            self._new[n] = [[c + x for c, x in zip(self._contexts, s.tolist())] for s in sets]
        seqs = self._new[n][0]
        self._new[n].reverse()
        first = [len(c) for c in self._contexts]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self._cache.logits(seqs, first)  # feeds n tokens per sequence (the other set's are rolled back first)
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


def batch_points(config: ProfileConfig, candidates: list[ProfiledModel], contexts: list[int]) -> list[tuple[ProfiledModel, int, int]]:
    """Every (candidate, context, batch size) group a batch profile measures, b > 1 (a kind that
    runs one sequence at a time, block-draft heads and steered drafters, has none)."""
    batched = [c for c in candidates if c.kind.batched]
    return [(c, ctx, b) for c in batched for ctx in contexts for b in sorted(set(config.batch_sizes)) if b > 1]


def measure_batches(
    engine: Engine,
    config: ProfileConfig,
    out: ProfileOutcome,
    candidates: list[ProfiledModel],
    contexts: list[int],
    step: Callable[[int], None],
) -> None:
    """Measure c(n, b) for every candidate, context, n of the latency grid and batch size b > 1
    the database lacks (``config.force``: all), ``config.repeats`` samples each."""
    groups = batch_points(config, candidates, contexts)
    grid = sorted(set(config.latency_grid))
    samples: dict[tuple[int, int, int, int], list[float]] = {}
    keys: dict[tuple[int, int, int, int], LatencyKey] = {}
    for cand, ctx, b in groups:
        for n in grid:
            point = (cand.row_id, ctx, b, n)
            dtype = cand.spec.run_dtype(config.dtype)
            keys[point] = LatencyKey(cand.row_id, out.hardware_id, dtype, n, ctx, batch_size=b)
            stored = None if config.force else stored_latency(engine, [keys[point]]).get(keys[point])
            samples[point] = [] if stored is None else list(stored.samples_ms)
            have = min(len(samples[point]), config.repeats)
            out.skipped += have == config.repeats
            step(have)
    warmed: set[tuple[int, int, int, int]] = set()
    for r in range(1, config.repeats + 1):
        order = list(groups)
        random.Random(config.seed * 1_000_003 + 7919 * r).shuffle(order)
        for cand, ctx, b in order:
            todo = [n for n in grid if len(samples[(cand.row_id, ctx, b, n)]) < r]
            if not todo:
                continue
            timer: Callable[[int], float]
            if cand.loaded is None:
                timer = BatchLookupTimer(cand.spec.ngram_order, ctx, b, config.seed)
            else:
                timer = BatchPassTimer(cand.loaded.model, ctx, b, config.seed)
            random.Random(config.seed + r + ctx + b).shuffle(todo)
            for n in todo:
                point = (cand.row_id, ctx, b, n)
                if point not in warmed:  # the first pass of a shape builds its kernels
                    timer(n)
                    warmed.add(point)
                samples[point].append(timer(n))
                med, p10, p90 = summarize(samples[point])
                save_latency(engine, keys[point], LatencyPoint(n, ctx, med, None, tuple(samples[point]), p10, p90))
                step(1)
                if len(samples[point]) == config.repeats:
                    out.measured += 1
            del timer
