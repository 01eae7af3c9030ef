"""The latency sweep of a profile: interleaved rounds over every (model, context, n) point,
taken in stages so that they spread over the profiling run (see :mod:`.timing` for the order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from ..store import Latency
from .timing import SPREAD_LIMIT, LookupTimer, PassTimer, inversions, spread, summarize, sweep_order

if TYPE_CHECKING:
    from .runner import ProfileConfig, ProfileOutcome, _Candidate

__all__ = ["Sweep"]


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
        points: list[tuple[_Candidate, int, int]],
        step: Callable[[int], None],
        floor: Callable[[_Candidate, int, int], float | None],
    ) -> None:
        self.engine, self.config, self.out, self.step, self.floor = engine, config, out, step, floor
        self.samples: dict[tuple[int, int, int], list[float]] = {}
        self.keys: dict[tuple[int, int, int], dict] = {}
        self.by_point: dict[tuple[int, int, int], tuple[_Candidate, int, int]] = {}
        self._timers: dict[tuple[int, int], Callable[[int], float]] = {}
        backfill: dict[int, float | None] = {}  # latency row id -> its floor
        with Session(engine) as s:
            for cand, ctx, n in points:
                dtype = cand.spec.run_dtype(config.dtype)
                key = dict(model_id=cand.row_id, hardware_id=out.hardware_id, dtype=dtype, n_tokens=n, context_len=ctx, batch_size=1)
                row = s.scalars(select(Latency).filter_by(**key)).first()
                if row is not None and row.floor_ms is None:  # measured before the floor probe existed
                    backfill[row.id] = floor(cand, ctx, n)
                have = [] if row is None or config.force else (row.samples_ms or [row.median_ms] * row.repeats)
                if row is not None and not config.force and len(have) >= config.repeats:
                    out.skipped += 1
                    step(config.repeats)
                    continue
                point = (cand.row_id, ctx, n)
                self.samples[point], self.keys[point], self.by_point[point] = list(have), key, (cand, ctx, n)
                step(len(have))
        with Session(engine) as s, s.begin():
            for row_id, value in backfill.items():
                s.get_one(Latency, row_id).floor_ms = value

    def _timer(self, cand: _Candidate, ctx: int) -> Callable[[int], float]:
        if (cand.row_id, ctx) not in self._timers:
            made = LookupTimer(cand.spec.ngram_order, ctx) if cand.loaded is None else PassTimer(cand.loaded.model, ctx)
            self._timers[(cand.row_id, ctx)] = made
        return self._timers[(cand.row_id, ctx)]

    def _sample(self, point: tuple[int, int, int]) -> None:
        cand, ctx, n = self.by_point[point]
        self.samples[point].append(self._timer(cand, ctx)(n))
        med, p10, p90 = summarize(self.samples[point])
        with Session(self.engine) as s, s.begin():
            s.execute(delete(Latency).filter_by(**self.keys[point]))
            s.add(
                Latency(
                    **self.keys[point],
                    median_ms=med,
                    p10_ms=p10,
                    p90_ms=p90,
                    repeats=len(self.samples[point]),
                    samples_ms=self.samples[point],
                    floor_ms=self.floor(cand, ctx, n),
                )
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
        curves.setdefault((model, ctx), {})[n] = values
    return [((m, c, n), (m, c, k)) for (m, c), curve in curves.items() for n, k in inversions(curve)]
