"""The latency sweep of a profile: interleaved rounds over every (model, context, n, batch size)
point, taken in stages so that they spread over the profiling run (see :mod:`.timing` for the order).

A point of batch size 1 is c(n), one pass over one sequence; a point of batch size b > 1 is
c(n, b), one pass over b sequences of n new tokens each (:mod:`.batch`). Every point gets the
same care: interleaved rounds, then more rounds for noisy and inverted points. Samples are kept
only from windows in which no other work contended for the cores (:mod:`.guard`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from hsd_runtime.terms.kinds import Timing

from ..store import Engine
from ..store.measurements import save_latency, set_floors, stored_latency
from ..store.records import LatencyKey, LatencyPoint
from .batch import BatchLookupTimer, BatchPassTimer
from .config import ProfileConfig, ProfiledModel, ProfileOutcome
from .guard import Guard
from .timing import SPREAD_LIMIT, HeadsTimer, LookupTimer, PassTimer, inversions, spread, summarize, sweep_order

__all__ = ["TIMERS", "Point", "Sweep", "grid_of", "latency_points"]

# a latency point: the candidate, its context, the tokens per sequence of the pass and the batch size
Point = tuple[ProfiledModel, int, int, int]
_Key = tuple[int, int, int, int]  # (model row id, context, n, batch size)


def latency_points(config: ProfileConfig, candidates: Sequence[ProfiledModel], contexts: Sequence[int]) -> list[Point]:
    """Every point a profile measures: each candidate at each context and n of the latency grid
    (for a llama.cpp model with the points either side of its multiples of 16: :func:`grid_of`),
    at each batch size of ``config.batch_sizes`` (b > 1 only for a kind that decodes rows in
    lockstep, on an engine that does: not block-draft heads, steered drafters or another engine's
    model), and n = 0, a steered model's projection, which it runs once per proposal beside its
    passes. A ``pmin=`` drafter whose model is listed without it is not timed: its curves are that model's."""
    listed = {str(c.spec) for c in candidates}
    # a model that stops on its confidence (pmin=) runs the passes of the model it loads: listed too, it is timed once
    candidates = [c for c in candidates if not (c.kind.stops and str(c.spec.loads) in listed)]
    points = [(c, ctx, n, 1) for c in candidates for ctx in contexts for n in grid_of(config.latency_grid, c)]
    points += [(c, ctx, 0, 1) for c in candidates if c.kind.projection for ctx in contexts]
    rows = [c for c in candidates if c.kind.batched and not _other_engine(c)]
    grid = sorted(set(config.latency_grid))
    points += [(c, ctx, n, b) for c in rows for ctx in contexts for b in sorted(set(config.batch_sizes)) if b > 1 for n in grid]
    return points


def grid_of(grid: Sequence[int], cand: ProfiledModel) -> list[int]:
    """The tokens per pass ``cand`` is timed at: ``grid``, and for a llama.cpp model also n - 1 and
    n + 1 of each multiple of 16 in it (within the grid's widest). llama.cpp's CPU kernels run a
    pass of a multiple of 16 tokens faster than one a token shorter, so a line between two such
    dips prices every width between them low: 501 ms for a 37-token pass of the 1.5B Q4_K_M
    that took 555 in decoding (docs/engines.md).

    >>> from types import SimpleNamespace as NS
    >>> grid_of([1, 2, 4, 8, 16, 32, 64], NS(loaded=NS(engine="llamacpp")))
    [1, 2, 4, 8, 15, 16, 17, 31, 32, 33, 63, 64]
    >>> grid_of([1, 2, 4, 8, 16, 32, 64], NS(loaded=NS(engine="torch")))
    [1, 2, 4, 8, 16, 32, 64]
    """
    if cand.loaded is None or cand.loaded.engine != "llamacpp":
        return list(grid)
    widest = max(grid)
    sides = {m + d for m in grid if m % 16 == 0 for d in (-1, 1) if 1 <= m + d <= widest}
    return sorted(set(grid) | sides)


def _other_engine(cand: ProfiledModel) -> bool:
    """A model of an engine other than torch (llama.cpp, static), which decodes one sequence at a
    time (its cache opens no rows)."""
    return cand.loaded is not None and cand.loaded.engine != "torch"


def _pass_timer(cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
    return PassTimer(cand.loaded_model.model, ctx)


def _lookup_timer(cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
    spec = cand.spec
    return LookupTimer(spec.ngram_order, ctx, rule=spec.ngram_rule if spec.keeps_state else None, n_match=spec.n_match)


def _heads_timer(cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
    assert cand.heads is not None  # bound by the run's loading
    return HeadsTimer(cand.heads, ctx)


# a candidate's timer at one context, by what its kind's latency points time (hsd_runtime.terms.kinds)
TIMERS: dict[Timing, Callable[[ProfiledModel, int], Callable[[int], float]]] = {
    "pass": _pass_timer,
    "lookup": _lookup_timer,
    "heads": _heads_timer,
}


class Sweep:
    """Interleaved rounds over every latency point the database lacks (see :mod:`.timing`).

    Rounds are taken in stages (:meth:`to`), so that a profile's rounds spread over its whole
    run instead of the first seconds of it: the machine's state changes from minute to minute,
    and the curves should describe its usual state, not the one of the sweep's first seconds.
    Each sample is committed once its window is judged (the row's median, p10 and p90 over its
    samples so far; half a second or so after it is taken), so an interrupted sweep resumes where
    it stopped. :meth:`finish` completes the rounds;
    then points whose spread stays above SPREAD_LIMIT get up to ``repeats`` more, interleaved
    among themselves, and inverted neighbours twice that.

    A round visits the points of batch size b > 1 by group (model, context, b), every n of a group
    in turn in its own order: a group's timer holds b contexts cached, and one at a time is all the
    memory the larger batch sizes leave (the timers of one sequence are kept for the whole sweep).

    Samples wait in a window until the ``guard`` judges it (:mod:`.guard`): those of a window in
    which other work contended for the cores are taken again once the machine is quiet, so a
    busy spell never reaches a curve. A window closes when it is long enough to judge, at the end
    of each stage, before the noisy and inverted points are chosen, and before a group of b > 1
    is left (its points are taken again on its own timer).
    """

    def __init__(
        self,
        db: Engine,
        config: ProfileConfig,
        out: ProfileOutcome,
        points: list[Point],
        step: Callable[[int], None],
        floor: Callable[[ProfiledModel, int, int], float | None],
        guard: Guard | None = None,
    ) -> None:
        self.db, self.config, self.out, self.step, self.floor = db, config, out, step, floor
        self.guard = guard or Guard(None)
        self._pending: list[tuple[_Key, float]] = []  # samples of the open window, not yet judged
        self.samples: dict[_Key, list[float]] = {}
        self.keys: dict[_Key, LatencyKey] = {}
        self.by_point: dict[_Key, Point] = {}
        self._timers: dict[tuple[int, int], Callable[[int], float]] = {}
        self._group: tuple[tuple[int, int, int], Callable[[int], float]] | None = None  # the one timer of b > 1 held
        self._warmed: set[_Key] = set()  # points of b > 1 whose shape has run once (its kernels built)
        keys = [LatencyKey(c.row_id, out.hardware_id, c.spec.run_dtype(config.dtype), n, ctx, batch_size=b) for c, ctx, n, b in points]
        stored = stored_latency(db, keys)
        backfill: dict[LatencyKey, float] = {}  # points measured before the floor probe existed
        for (cand, ctx, n, b), key in zip(points, keys):
            row = stored.get(key)
            # a point with no floor (the lookup, a projection, a batch) stays without one: nothing to write
            if row is not None and row.floor_ms is None and (value := self._floor(cand, ctx, n, b)) is not None:
                backfill[key] = value
            have = [] if row is None or config.force else list(row.samples_ms)
            if row is not None and not config.force and len(have) >= config.repeats:
                out.skipped += 1
                step(config.repeats)
                continue
            point = (cand.row_id, ctx, n, b)
            self.samples[point], self.keys[point], self.by_point[point] = have, key, (cand, ctx, n, b)
            step(len(have))
        set_floors(db, backfill)

    def _floor(self, cand: ProfiledModel, ctx: int, n: int, b: int) -> float | None:
        """The machine's floor for one pass of a point (the probe's model is of one sequence: None above)."""
        return self.floor(cand, ctx, n) if b == 1 else None

    def _timer(self, cand: ProfiledModel, ctx: int, b: int) -> Callable[[int], float]:
        if b > 1:
            group = (cand.row_id, ctx, b)
            if self._group is None or self._group[0] != group:
                self._group = None  # the last group's contexts freed before the next one's are cached
                made: Callable[[int], float]
                if cand.kind.timing == "lookup":
                    made = BatchLookupTimer(cand.spec.ngram_order, ctx, b, self.config.seed)
                else:
                    made = BatchPassTimer(cand.loaded_model.model, ctx, b, self.config.seed)
                self._group = (group, made)
            return self._group[1]
        if (cand.row_id, ctx) not in self._timers:
            self._timers[(cand.row_id, ctx)] = TIMERS[cand.kind.timing](cand, ctx)
        return self._timers[(cand.row_id, ctx)]

    def _sample(self, point: _Key) -> None:
        """One sample of ``point`` into the open window; the window is judged once it is long enough."""
        cand, ctx, _n, b = self.by_point[point]
        if b > 1 and (self._group is None or self._group[0] != (cand.row_id, ctx, b)):
            self._settle()  # the window's points of the group held are taken again, if need be, on its timer
        self.guard.open()
        self._pending.append((point, self._time(point)))
        if self.guard.due():
            self._settle()

    def _time(self, point: _Key) -> float:
        """ms of one pass of ``point``."""
        cand, ctx, n, b = self.by_point[point]
        timer = self._timer(cand, ctx, b)
        if b > 1 and point not in self._warmed:  # the first pass of a shape builds its kernels (PassTimer warms its own)
            timer(n)
            self._warmed.add(point)
        return timer(n)

    def _settle(self) -> None:
        """Judge the open window: keep its samples, or take them again in a new window after the
        machine has quieted, until a window is quiet (the guard refuses a machine that stays busy)."""
        while self._pending:
            if self.guard.keep(len(self._pending)):
                for point, ms in self._pending:
                    self._commit(point, ms)
                self._pending = []
            else:
                self.guard.open()
                self._pending = [(point, self._time(point)) for point, _ in self._pending]
        self.out.remeasured, self.out.kept_busy = self.guard.remeasured, self.guard.kept_busy

    def _commit(self, point: _Key, ms: float) -> None:
        """Add a judged sample to its point and store the point's row."""
        cand, ctx, n, b = self.by_point[point]
        self.samples[point].append(ms)
        med, p10, p90 = summarize(self.samples[point])
        save_latency(
            self.db, self.keys[point], LatencyPoint(n, ctx, med, self._floor(cand, ctx, n, b), tuple(self.samples[point]), p10, p90)
        )

    def _count(self, point: _Key) -> int:
        """Samples of ``point`` taken so far, those of the open window included."""
        return len(self.samples[point]) + sum(1 for p, _ in self._pending if p == point)

    def _order(self, points: Sequence[_Key], rounds: int, seed: int) -> Iterator[_Key]:
        """Every point once per round in a seeded order (:func:`.timing.sweep_order`), those of b > 1
        by group: a group takes one place in the round, its points in their own order there."""
        groups: dict[_Key, list[_Key]] = {}  # a point of b = 1 is its own group; a group of b > 1 is keyed with n = 0
        for p in points:
            groups.setdefault(p if p[3] == 1 else (p[0], p[1], 0, p[3]), []).append(p)
        shuffle = random.Random(seed * 7919 + 1).shuffle
        for unit in sweep_order(list(groups), rounds, seed):
            members = list(groups[unit])
            shuffle(members)
            yield from members

    def to(self, rounds: int) -> None:
        """Interleaved rounds until every point has ``rounds`` samples (at most ``repeats``)."""
        rounds = min(rounds, self.config.repeats)
        short = [p for p in self.by_point if self._count(p) < rounds]
        need = rounds - min((self._count(p) for p in short), default=rounds)
        for point in self._order(short, need, self.config.seed + rounds):
            if self._count(point) < rounds:
                self._sample(point)
                self.step(1)
        self._settle()  # a stage's samples are judged before the run does other work

    def finish(self) -> None:
        """The remaining rounds, then more for noisy and inverted points."""
        self.to(self.config.repeats)
        repeats, seed = self.config.repeats, self.config.seed
        noisy = [p for p in self.by_point if spread(self.samples[p]) > SPREAD_LIMIT]
        for point in self._order(noisy, repeats, seed + 1):
            self._sample(point)
        self._settle()
        # a pass of fewer tokens measured slower than a wider one beyond their noise: both points get
        # twice their rounds again, so a slow spell that produced the inversion ends up a minority
        inverted = sorted({p for pair in _inversions(self.samples) for p in pair})
        for point in self._order(inverted, 2 * repeats, seed + 2):
            self._sample(point)
        self._settle()
        self._group = None
        self.out.measured += len(self.by_point)
        self.out.noisy += sum(spread(self.samples[p]) > SPREAD_LIMIT for p in noisy)
        self.out.inverted += len(_inversions(self.samples))  # what survives measuring again is real; the profile keeps it


def _inversions(samples: dict[_Key, list[float]]) -> list[tuple[_Key, _Key]]:
    """Inverted neighbouring points (see :func:`.timing.inversions`) of every (model, context, batch size) curve."""
    curves: dict[tuple[int, int, int], dict[int, list[float]]] = {}
    for (model, ctx, n, b), values in samples.items():
        if n:  # n = 0 is a steered model's projection, not a pass
            curves.setdefault((model, ctx, b), {})[n] = values
    return [((m, c, n, b), (m, c, k, b)) for (m, c, b), curve in curves.items() for n, k in inversions(curve)]
