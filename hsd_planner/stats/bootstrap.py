"""The bootstrap of hsd-plan: resampled prompts, and the 90% percentile interval over them.

Acceptance and latency are measured on a finite set of prompts; a different set would give other
figures. A bootstrap draws as many prompts as there are, with replacement, computes the figure on
the draw, and repeats; the interval is the 5th to 95th percentile of the figures (numpy's linear
interpolation between order statistics). Used for the predicted speed-up of every solved plan
(:func:`resample_profiles`: profiles whose acceptance pools resampled profiled prompts, and whose
latency curves, with ``drift``, each move by a factor drawn from the spread their own samples showed
while profiled: the machine drifts between a profile and the runs it predicts, and not for every
model alike) and for the measured speed-up of every validated plan (:func:`bootstrap_interval`
over held-out prompts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from ..plan import PairAcceptance, Profile
from .pooling import PromptSums, pool_drafted, pool_prompts, pool_siblings

__all__ = ["BOOTSTRAP_PROFILES", "INTERVAL", "bootstrap_interval", "interval", "resample_profiles", "resamples"]

BOOTSTRAP_PROFILES = 100  # resamples per solve: percentiles of 100 predictions, well under a second
INTERVAL = (5.0, 95.0)  # the percentiles of every interval hsd-plan reports: a 90% interval

K = TypeVar("K")


def resamples(items: Sequence[K], count: int, seed: int = 0) -> list[list[K]]:
    """``count`` draws of ``len(items)`` items with replacement, seeded.

    >>> [len(draw) for draw in resamples("abc", 2)]
    [3, 3]
    """
    rng = np.random.default_rng(seed)
    return [[items[i] for i in rng.integers(len(items), size=len(items))] for _ in range(count)]


def interval(values: Sequence[float]) -> tuple[float, float]:
    """The 5th and 95th percentile of ``values``.

    >>> interval(list(range(101)))
    (5.0, 95.0)
    """
    lo, hi = np.percentile(values, INTERVAL)
    return float(lo), float(hi)


def bootstrap_interval(
    items: Sequence[K], statistic: Callable[[list[K]], float], count: int = 200, seed: int = 0
) -> tuple[float, float] | None:
    """The 90% interval of ``statistic`` over ``count`` resamples of ``items`` (None for fewer than two items)."""
    if len(items) < 2:
        return None
    return interval([statistic(draw) for draw in resamples(items, count, seed)])


def resample_profiles(
    profile: Profile,
    by_pair: Mapping[tuple[str, str], Mapping[int, PromptSums]],
    count: int = BOOTSTRAP_PROFILES,
    seed: int = 0,
    drift: bool = False,
    sample: int | None = None,
) -> list[Profile]:
    """``count`` copies of ``profile`` whose acceptance pools a resample of the profiled prompts;
    with ``drift``, each model's latency curves also scaled by exp(sigma z), z a standard normal
    drawn per model and copy, sigma the curves' measured :attr:`~hsd_planner.plan.LatencyCurve.spread`.

    ``sample``: the copies predict what a run on that many new prompts will show, not the mean
    over the workload: each pools ``sample`` prompts drawn from a resample of the profiled ones (the
    mean's own uncertainty, then the spread of a small set around it; a validation on 3 prompts
    varies far more than the mean of 12 profiled ones).

    ``by_pair[(drafter, verifier)][prompt]`` holds per-prompt acceptance sums (optionally with
    siblings_sum and siblings_count: the resampled A(k) of pairs that have one). None when a pair of
    the profile lacks per-prompt rows (an import of aggregated rows only).
    """
    have = {(a.drafter, a.verifier) for a in profile.acceptance}
    prompts = sorted({k for pair in by_pair.values() for k in pair})
    if not prompts or any(set(by_pair.get(pair, {})) != set(prompts) for pair in have):
        return []
    out = []
    draws = resamples(prompts, count, seed)
    if sample is not None:
        rng = np.random.default_rng(seed + 2)
        draws = [[drawn[i] for i in rng.integers(len(drawn), size=sample)] for drawn in draws]
    for drawn in draws:
        acceptance = []
        for (drafter, verifier), per_prompt in by_pair.items():
            if (drafter, verifier) not in have:
                continue
            rows = [per_prompt[k] for k in drawn]
            alpha, _positions, run_lengths, visited = pool_prompts(rows)
            acceptance.append(
                PairAcceptance(
                    drafter=drafter,
                    verifier=verifier,
                    alpha=min(1.0, alpha),
                    run_lengths=run_lengths,
                    visited=visited,
                    drafted=pool_drafted(rows),
                    siblings=pool_siblings(rows),
                )
            )
        out.append(profile.model_copy(update={"acceptance": acceptance}))
    if not drift:
        return out
    rng = np.random.default_rng(seed + 1)  # its own stream: the prompts drawn stay those drawn without drift
    return [_drifted(p, rng) for p in out]


def _drifted(profile: Profile, rng: np.random.Generator) -> Profile:
    """``profile`` with each model's curves scaled by one factor exp(sigma z) (sigma: the curve's spread)."""
    models = []
    for m in profile.models:
        z = float(rng.standard_normal())
        latency = {
            b: c.model_copy(
                update={"points": {ctx: {n: ms * math.exp(c.spread * z) for n, ms in row.items()} for ctx, row in c.points.items()}}
            )
            for b, c in m.latency.items()
        }
        models.append(m.model_copy(update={"latency": latency}))
    return profile.model_copy(update={"models": models})
