"""Calibration: how fast the machine is now, against when it was profiled, per model and pass size.

A shared machine drifts between profiling and validation, and not by one factor: when other
tenants contend for memory bandwidth, a pass of one token (bound by reading the weights) slows
down more than a pass of eight (which does more arithmetic per weight read). On a shared 2-core
cloud machine the 1.5B target's c(8) / c(1) moved between 1.10 and 1.45 from one state to another, and
a speed-up that verifies eight tokens a round moves with it.

The machine's state also changes within seconds (the target's c(1) went 85, 78, 78, 88, 61, 60,
58, 60, 87 ms in consecutive reference rounds of one validation), so one drift for a whole
validation does not describe any one run. The reference, each validated model's passes of 1 and
8 tokens at the validation's median context, is therefore measured in rounds:
three before the plans run and one right after every run. Single passes are noisy too (one pass
in ten or twenty takes twice its time while the others agree), so a round times every pass
``passes`` times, interleaved, and keeps the median. A run is calibrated by the two rounds
around it: per model, the drift at n is the median measured over profiled time at n = 1 and
n = 8 over those rounds, interpolated in log n between them and held beyond; the calibrated
profile is the profile with every model's curve scaled by its drift. Predictions from it are
reported beside the raw ones, and the speed-up error is reported from both; the report derives its one-figure drift from the stored reference (see :mod:`.report`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..plan import LatencyCurve, Profile

__all__ = ["REFERENCE_N", "REFERENCE_PASSES", "Calibration", "CalibrationRecord", "ModelReference"]

REFERENCE_N = (1, 8)  # the passes each model's drift is measured on
REFERENCE_PASSES = 3  # passes per reference point and round, the median kept


@dataclass(frozen=True)
class ModelReference:
    """One model's reference passes: per pass size, the profiled ms and the samples measured now (one per round)."""

    profiled_ms: dict[int, float]
    samples_ms: dict[int, list[float]]

    def ratios(self) -> dict[int, float]:
        """Per pass size measured, the median now over the profiled ms."""
        return {n: statistics.median(samples) / self.profiled_ms[n] for n, samples in self.samples_ms.items() if samples}


@dataclass(frozen=True)
class CalibrationRecord:
    """The reference passes of one validation, as its report and the database keep them."""

    context_len: int | None
    models: dict[str, ModelReference]

    def to_dict(self) -> dict:
        """JSON: pass sizes as strings, ``{"context_len", "models": {name: {"profiled_ms", "samples_ms"}}}``."""
        return {
            "context_len": self.context_len,
            "models": {
                name: {
                    "profiled_ms": {str(n): v for n, v in ref.profiled_ms.items()},
                    "samples_ms": {str(n): list(v) for n, v in ref.samples_ms.items()},
                }
                for name, ref in self.models.items()
            },
        }


class Calibration:
    """Reference passes of the validated models, and the drift they show against the profile."""

    def __init__(
        self, profile: Profile, timers: Mapping[str, Callable[[int], float]], context_len: int, passes: int = REFERENCE_PASSES
    ) -> None:
        """``timers[name](n)``: ms of one pass of n tokens of model ``name`` at ``context_len``, the
        validation's own (the profile is read there too: the machine's state changes the curves'
        slope in the context as well); the profile's target must be among them. ``passes``: passes
        per point and round, the round keeping their median."""
        if profile.target not in timers:
            raise ValueError(f"the target {profile.target} needs a reference timer")
        self.target = profile.target
        self.context_len = context_len
        self.passes = passes
        self._timers = dict(timers)
        self.profiled = {name: {n: profile.model(name).latency[1](n, context_len) for n in REFERENCE_N} for name in timers}
        self.samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in REFERENCE_N} for name in timers}

    @property
    def rounds(self) -> int:
        """Reference rounds measured so far."""
        return len(self.samples[self.target][REFERENCE_N[0]])

    def measure(self, rounds: int = 1) -> int:
        """One sample of each model's reference passes per round, the median of ``passes`` passes
        timed in turn over every model and pass size; returns the index of the last round."""
        for _ in range(rounds):
            got: dict[str, dict[int, list[float]]] = {name: {n: [] for n in REFERENCE_N} for name in self._timers}
            for _ in range(self.passes):
                for name, timer in self._timers.items():
                    for n in REFERENCE_N:
                        got[name][n].append(timer(n))
            for name, by_n in got.items():
                for n, ms in by_n.items():
                    self.samples[name][n].append(statistics.median(ms))
        return self.rounds - 1

    def ratio(self, name: str, n: int, at: Sequence[int] | None = None) -> float:
        """Median measured over profiled ms of ``name``'s reference pass ``n`` over the rounds ``at``
        (None: every round; 1.0 before any sample)."""
        got = self.samples[name][n]
        chosen = got if at is None else [got[i] for i in at]
        return statistics.median(chosen) / self.profiled[name][n] if chosen else 1.0

    def factor(self, name: str, n: int, at: Sequence[int] | None = None) -> float:
        """The drift of ``name`` at a pass of ``n`` tokens over the rounds ``at``: the ratios at 1
        and 8, log-linear in n between them and held beyond (1.0 for a model without reference passes).

        Geometric interpolation, so that a factor between two equal ratios is that ratio.
        """
        if name not in self.samples:
            return 1.0
        lo, hi = REFERENCE_N
        r_lo, r_hi = self.ratio(name, lo, at), self.ratio(name, hi, at)
        t = min(1.0, max(0.0, math.log(max(n, lo) / lo) / math.log(hi / lo)))
        return r_lo ** (1.0 - t) * r_hi**t

    def apply(self, profile: Profile, at: Sequence[int] | None = None) -> Profile:
        """``profile`` with every calibrated model's latency points scaled by its drift at each n
        over the rounds ``at`` (None: every round), at every batch size alike (the reference
        passes are over one sequence)."""
        models = []
        for m in profile.models:
            if m.name in self.samples:
                m = m.model_copy(update={"latency": {b: self._scaled(m.name, curve, at) for b, curve in m.latency.items()}})
            models.append(m)
        return profile.model_copy(update={"models": models})

    def _scaled(self, name: str, curve: LatencyCurve, at: Sequence[int] | None) -> LatencyCurve:
        points = {ctx: {n: ms * self.factor(name, n, at) for n, ms in row.items()} for ctx, row in curve.points.items()}
        return curve.model_copy(update={"points": points})

    def record(self) -> CalibrationRecord:
        """Per model: the profiled reference ms and the samples measured now (one per round)."""
        models = {name: ModelReference(dict(self.profiled[name]), {n: list(v) for n, v in s.items()}) for name, s in self.samples.items()}
        return CalibrationRecord(self.context_len, models)
