"""Latency measurements without storage: timers for one cached forward pass or one n-gram
proposal, and the interleaved sweep that visits every latency point of a profile.

A shared machine drifts: a slow minute that lands on a burst of one model's points bends its
curve. The sweep therefore takes one sample per point per round, visiting all points (every
model, width and context) in a new seeded random order each round, so drift spreads over every
point alike; the median of a point's samples is its latency, p10/p90 its spread.
"""

from __future__ import annotations

import random
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from hsd_runtime import SamplingConfig, engine_model, ngram_lookup
from hsd_runtime.decoding.ngram import Table, stateful_table
from hsd_runtime.learned.bpd import BpdDrafter
from hsd_runtime.models.engine import EngineCache
from hsd_runtime.terms.spec import MOD_NGRAM_ORDER

__all__ = ["SPREAD_LIMIT", "HeadsTimer", "LookupTimer", "PassTimer", "inversions", "spread", "summarize", "sweep_order", "time_forward"]

P = TypeVar("P", bound=Hashable)  # a latency point

# a point whose p90 / p10 exceeds this is noisy: the sweep gives it more rounds
SPREAD_LIMIT = 1.25
# positions a timer's cache holds past its context at first, on an engine that allocates its cells
# up front: the profile's default grid (a wider pass reopens it, larger)
ROOM = 64


def summarize(samples_ms: Sequence[float]) -> tuple[float, float, float]:
    """(median, p10, p90) of samples in ms."""
    ms = np.asarray(samples_ms, dtype=float)
    return float(np.median(ms)), float(np.percentile(ms, 10)), float(np.percentile(ms, 90))


def spread(samples_ms: Sequence[float]) -> float:
    """p90 / p10 of the samples (1.0 for fewer than three)."""
    if len(samples_ms) < 3:
        return 1.0
    _, p10, p90 = summarize(samples_ms)
    return p90 / p10 if p10 > 0 else float("inf")


def inversions(curve: Mapping[int, Sequence[float]]) -> list[tuple[int, int]]:
    """Neighbouring pass sizes ``(n, m)``, ``n < m``, where ``n`` tokens took longer than ``m``
    beyond both points' noise (the p10 of ``n`` above the p90 of ``m``).

    ``curve`` maps tokens per pass to the samples of one model at one context; points with fewer
    than three samples have no noise estimate and are not compared. A pass over more tokens does
    more work, so an inversion is usually a slow spell landing on one point; the sweep measures
    such points again, and what survives that is kept (some kernels really are slower at n = 1).

    >>> inversions({1: [30, 31, 32], 2: [20, 21, 22], 4: [40, 41, 42], 8: [39, 41, 43]})
    [(1, 2)]
    """
    grid = sorted(n for n, samples in curve.items() if len(samples) >= 3)
    return [(n, m) for n, m in zip(grid, grid[1:]) if summarize(curve[n])[1] > summarize(curve[m])[2]]


class PassTimer:
    """One model with ``context_len`` tokens cached: times single passes of n new tokens.

    The context is prefilled once; every pass feeds n tokens and crops them off again, so each
    sees the same cache length, and returns the logits of all n rows (as a verifier's pass does).
    Every engine is timed through its own cache (:class:`~hsd_runtime.models.engine.EngineCache`),
    the passes decoding runs. The first pass of each n is a warm-up and is not timed. A steered
    model (``steer=``) is timed steered: its passes add vectors set once from random taps, and
    ``n`` = 0 times the projection alone (taps to vectors), which decoding runs once per proposal,
    not once per pass.
    """

    def __init__(self, model: Any, context_len: int, seed: int = 0) -> None:
        self.model = model
        self._model = engine_model(model)
        self.device = self._model.device
        self._vocab = self._model.n_vocab
        self._context_len = context_len
        self._new: dict[int, list[int]] = {}
        self._steerer: Any = getattr(model, "steerer", None)
        self._gen = torch.Generator().manual_seed(seed)
        self._context = torch.randint(0, self._vocab, (context_len,), generator=self._gen).tolist()
        if self._steerer is not None:
            card = self._steerer.card
            self._taps = torch.randn(1, len(card.taps) * card.verifier_hidden, generator=self._gen).to(self.device)
            with torch.inference_mode():
                self._steerer.steer(self._taps)  # the passes add these vectors; n = 0 times computing them
        self._open(ROOM)

    def _open(self, room: int) -> None:
        """(Re)open the cache with room for passes of up to ``room`` tokens after the context, and
        prefill the context: a cache that allocates its cells up front (llama.cpp, static) would
        otherwise hold keys and values for thousands of positions no pass reaches."""
        self._room = room
        self._kv: EngineCache = self._model.open_cache(self._vocab, self._context_len + room)
        self._kv.feed(self._context, 0, 1)

    @torch.inference_mode()
    def _pass(self, n: int) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        if n == 0:  # the projection of a steered model's proposal
            self._steerer.steer(self._taps)
        else:
            self._kv.feed(self._new[n], self._context_len, n)  # every row's logits, as a verifier asks
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        if n:
            self._kv.crop(self._context_len, self._context_len + n)
        return elapsed

    def __call__(self, n: int) -> float:
        """ms of one pass of ``n`` new tokens; for a steered model, ``n`` = 0: its projection."""
        if n == 0 and self._steerer is None:
            raise ValueError("n = 0 times a steered model's projection; this model is not steered")
        if n not in self._new:
            if self._model.allocates_cells and n > self._room:
                self._open(max(n, 2 * self._room))
            self._new[n] = torch.randint(0, self._vocab, (n,), generator=self._gen).tolist()
            self._pass(n)  # warm-up
        return 1000.0 * self._pass(n)


class LookupTimer:
    """The n-gram drafter over a random context of ``context_len`` tokens (``rule``: one of
    llama-server's lookups that keep state, begun on the context, with a first draft made, so
    that a timed draft looks up and adds what one round does; ``n_match``: ``ngram-mod``'s n-gram
    size in the list ``ngram-simple,ngram-mod``)."""

    def __init__(self, order: int, context_len: int, seed: int = 0, rule: str | None = None, n_match: int = MOD_NGRAM_ORDER) -> None:
        self.order = order
        self.context = np.random.default_rng(seed).integers(0, 1000, context_len).tolist()
        self.rule = rule
        self.n_match = n_match
        self.tables: dict[int, Table] = {}  # by width (ngram-map-k's m is the width)

    def __call__(self, n: int) -> float:
        """ms of one proposal of up to ``n`` tokens."""
        if self.rule is not None and n not in self.tables:
            table = self.tables[n] = stateful_table(self.rule, self.order, n, n_match=self.n_match)
            table.begin(self.context)
            table.draft(self.context[:-1], self.context[-1], n)
        t0 = time.perf_counter()
        if self.rule is not None:
            self.tables[n].draft(self.context[:-1], self.context[-1], n)
        else:
            ngram_lookup(self.context, self.order, n)
        return 1000.0 * (time.perf_counter() - t0)


class HeadsTimer:
    """Block-draft heads: one draft from one hidden row (the heads, the host's output layer over
    their rows and any rescoring), after a random context of ``context_len`` tokens that the
    rescoring's n-gram model has counted (as it has in decoding, where it grows a few tokens a round)."""

    def __init__(self, drafter: BpdDrafter, context_len: int, seed: int = 0) -> None:
        self.drafter = drafter
        model = drafter.model
        param = next(p for p in model.parameters() if p.is_floating_point())
        gen = torch.Generator().manual_seed(seed)
        self.hidden = torch.randn(1, drafter.card.hidden_size, generator=gen).to(param.device, param.dtype)  # [1, d]
        self.context = np.random.default_rng(seed).integers(0, drafter.width, context_len).tolist()
        self.sampling = SamplingConfig()
        drafter.prefill([self.context])
        self(1)  # warm-up; counts the context once

    def __call__(self, n: int) -> float:
        """ms of one draft of up to ``n`` tokens."""
        t0 = time.perf_counter()
        logits = self.drafter.head_logits(self.hidden, 2)[:n]
        self.drafter.drafts(logits, self.context, self.sampling)
        if self.hidden.device.type == "cuda":
            torch.cuda.synchronize(self.hidden.device)
        return 1000.0 * (time.perf_counter() - t0)


def sweep_order(points: Sequence[P], rounds: int, seed: int = 0) -> list[P]:
    """Every point once per round, each round in its own seeded random order.

    >>> order = sweep_order(["a", "b", "c"], 2, seed=1)
    >>> sorted(order) == ["a", "a", "b", "b", "c", "c"] and sorted(order[:3]) == ["a", "b", "c"]
    True
    """
    out: list[P] = []
    for r in range(rounds):
        batch = list(points)
        random.Random(seed * 1_000_003 + r).shuffle(batch)
        out += batch
    return out


def time_forward(model: Any, n: int, context_len: int, repeats: int, seed: int = 0) -> tuple[float, float, float]:
    """(median, p10, p90) ms of ``repeats`` passes of ``n`` tokens in a burst (benchmarks, tests)."""
    timer = PassTimer(model, context_len, seed)
    return summarize([timer(n) for _ in range(repeats)])
