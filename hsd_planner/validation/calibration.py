"""Calibration: how fast the machine is now, against when it was profiled.

A shared machine drifts between profiling and validation. The target's own passes of 1 and 8
tokens, at the profiled context nearest to the validation's, are the reference: measured before
the plans run and again after each prompt (interleaved with them), their ratio to the profiled
values is the drift. Predictions scaled by it are reported beside the raw ones; the speed-up
error needs no calibration, since both of its speed-ups are ratios taken within one run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from torch import nn

from ..plan import Profile
from ..profiling.timing import PassTimer

__all__ = ["REFERENCE_N", "Calibration"]

REFERENCE_N = (1, 8)  # the target's passes the drift is measured on


class Calibration:
    """Reference passes of the target, and the drift they show against the profile."""

    def __init__(self, profile: Profile, target: nn.Module | None, context_len: int, timer: Callable[[int], float] | None = None) -> None:
        """``timer(n)`` (ms of one pass of n tokens) defaults to a PassTimer on ``target``."""
        curve = profile.model(profile.target).latency
        self.context_len = min(curve.points, key=lambda c: abs(c - context_len))
        self.profiled = {n: curve(n, self.context_len) for n in REFERENCE_N}
        self._timer = timer if timer is not None else PassTimer(target, self.context_len)
        self.samples: dict[int, list[float]] = {n: [] for n in REFERENCE_N}

    def measure(self, rounds: int = 1) -> None:
        """One sample of each reference pass per round (n alternating within a round)."""
        for _ in range(rounds):
            for n in REFERENCE_N:
                self.samples[n].append(self._timer(n))

    @property
    def drift(self) -> float:
        """Now over then: the geometric mean over the reference passes of median measured / profiled."""
        ratios = [statistics.median(self.samples[n]) / self.profiled[n] for n in REFERENCE_N if self.samples[n]]
        if not ratios:
            return 1.0
        product = 1.0
        for r in ratios:
            product *= r
        return product ** (1.0 / len(ratios))
