"""The latency sweep of a profile: interleaved rounds over every (model, context, n) point,
taken in stages so that they spread over the profiling run (see :mod:`.timing` for the order).
"""

from __future__ import annotations

from collections.abc import Callable

from hsd_runtime.terms.kinds import Timing

from ..store import Engine
from ..store.measurements import save_latency, set_floors, stored_latency
from ..store.records import LatencyKey, LatencyPoint
from .config import ProfileConfig, ProfiledModel, ProfileOutcome
from .timing import SPREAD_LIMIT, HeadsTimer, LookupTimer, PassTimer, inversions, spread, summarize, sweep_order

__all__ = ["TIMERS", "Sweep"]


def _pass_timer(cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
    return PassTimer(cand.loaded_model.model, ctx)


def _lookup_timer(cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
    return LookupTimer(cand.spec.ngram_order, ctx)


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
    Each sample is committed as it is taken (the row's median, p10 and p90 over its samples so
    far), so an interrupted sweep resumes where it stopped. :meth:`finish` completes the rounds;
    then points whose spread stays above SPREAD_LIMIT get up to ``repeats`` more, interleaved
    among themselves, and inverted neighbours twice that.
    """

    def __init__(
        self,
        engine: Engine,
        config: ProfileConfig,
        out: ProfileOutcome,
        points: list[tuple[ProfiledModel, int, int]],
        step: Callable[[int], None],
        floor: Callable[[ProfiledModel, int, int], float | None],
    ) -> None:
        self.engine, self.config, self.out, self.step, self.floor = engine, config, out, step, floor
        self.samples: dict[tuple[int, int, int], list[float]] = {}
        self.keys: dict[tuple[int, int, int], LatencyKey] = {}
        self.by_point: dict[tuple[int, int, int], tuple[ProfiledModel, int, int]] = {}
        self._timers: dict[tuple[int, int], Callable[[int], float]] = {}
        keys = [LatencyKey(c.row_id, out.hardware_id, c.spec.run_dtype(config.dtype), n, ctx) for c, ctx, n in points]
        stored = stored_latency(engine, keys)
        backfill: dict[LatencyKey, float] = {}  # points measured before the floor probe existed
        for (cand, ctx, n), key in zip(points, keys):
            row = stored.get(key)
            # a point with no floor (the lookup, a projection) stays without one: nothing to write
            if row is not None and row.floor_ms is None and (value := floor(cand, ctx, n)) is not None:
                backfill[key] = value
            have = [] if row is None or config.force else list(row.samples_ms)
            if row is not None and not config.force and len(have) >= config.repeats:
                out.skipped += 1
                step(config.repeats)
                continue
            point = (cand.row_id, ctx, n)
            self.samples[point], self.keys[point], self.by_point[point] = have, key, (cand, ctx, n)
            step(len(have))
        set_floors(engine, backfill)

    def _timer(self, cand: ProfiledModel, ctx: int) -> Callable[[int], float]:
        if (cand.row_id, ctx) not in self._timers:
            self._timers[(cand.row_id, ctx)] = TIMERS[cand.kind.timing](cand, ctx)
        return self._timers[(cand.row_id, ctx)]

    def _sample(self, point: tuple[int, int, int]) -> None:
        cand, ctx, n = self.by_point[point]
        self.samples[point].append(self._timer(cand, ctx)(n))
        med, p10, p90 = summarize(self.samples[point])
        save_latency(
            self.engine, self.keys[point], LatencyPoint(n, ctx, med, self.floor(cand, ctx, n), tuple(self.samples[point]), p10, p90)
        )

    def to(self, rounds: int) -> None:
        """Interleaved rounds until every point has ``rounds`` samples (at most ``repeats``)."""
        rounds = min(rounds, self.config.repeats)
        short = [p for p in self.by_point if len(self.samples[p]) < rounds]
        need = rounds - min((len(self.samples[p]) for p in short), default=rounds)
        for point in sweep_order(short, need, self.config.seed + rounds):
            if len(self.samples[point]) < rounds:
                self._sample(point)
                self.step(1)

    def finish(self) -> None:
        """The remaining rounds, then more for noisy and inverted points."""
        self.to(self.config.repeats)
        repeats, seed = self.config.repeats, self.config.seed
        noisy = [p for p in self.by_point if spread(self.samples[p]) > SPREAD_LIMIT]
        for point in sweep_order(noisy, repeats, seed + 1):
            self._sample(point)
        # a pass of fewer tokens measured slower than a wider one beyond their noise: both points get
        # twice their rounds again, so a slow spell that produced the inversion ends up a minority
        inverted = sorted({p for pair in _inversions(self.samples) for p in pair})
        for point in sweep_order(inverted, 2 * repeats, seed + 2):
            self._sample(point)
        self.out.measured += len(self.by_point)
        self.out.noisy += sum(spread(self.samples[p]) > SPREAD_LIMIT for p in noisy)
        self.out.inverted += len(_inversions(self.samples))  # what survives measuring again is real; the profile keeps it


def _inversions(samples: dict[tuple[int, int, int], list[float]]) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Inverted neighbouring points (see :func:`.timing.inversions`) of every (model, context) curve."""
    curves: dict[tuple[int, int], dict[int, list[float]]] = {}
    for (model, ctx, n), values in samples.items():
        if n:  # n = 0 is a steered model's projection, not a pass
            curves.setdefault((model, ctx), {})[n] = values
    return [((m, c, n), (m, c, k)) for (m, c), curve in curves.items() for n, k in inversions(curve)]
