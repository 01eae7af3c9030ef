"""The bootstrap of hsd-plan: resampled prompts, and the 90% percentile interval over them.

Acceptance and latency are measured on a finite set of prompts; a different set would give other
figures. A bootstrap draws as many prompts as there are, with replacement, computes the figure on
the draw, and repeats; the interval is the 5th to 95th percentile of the figures (numpy's linear
interpolation between order statistics), reaching further out over a few prompts
(:func:`expanded`, for predictions). Used for the predicted speed-up of every solved plan
(:func:`resample_profiles`: profiles whose acceptance pools resampled profiled prompts, and whose
latency curves, with ``drift``, each move by a factor drawn from the spread their own samples showed
while profiled: the machine drifts between a profile and the runs it predicts, and not for every
model alike) and for the measured speed-up of every validated plan (:func:`bootstrap_interval`
over held-out prompts). :func:`miss_score` measures a validated speed-up's miss in units of
its predicted interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import TypeVar

import numpy as np

from ..plan import PairAcceptance, Profile
from .pooling import PromptSums, PromptTable

__all__ = [
    "BOOTSTRAP_PROFILES",
    "INTERVAL",
    "bootstrap_interval",
    "expanded",
    "interval",
    "miss_score",
    "pooled_profile",
    "pooled_profiles",
    "resample_profiles",
    "resamples",
]

BOOTSTRAP_PROFILES = 1000  # resamples per solve: with fewer, the 5th and 95th percentiles of a few prompts move from seed to seed
INTERVAL = (5.0, 95.0)  # the percentiles of every interval hsd-plan reports: a 90% interval

K = TypeVar("K")


def resamples(items: Sequence[K], count: int, seed: int = 0) -> list[list[K]]:
    """``count`` draws of ``len(items)`` items with replacement, seeded.

    >>> [len(draw) for draw in resamples("abc", 2)]
    [3, 3]
    """
    rng = np.random.default_rng(seed)
    return [[items[i] for i in rng.integers(len(items), size=len(items))] for _ in range(count)]


def interval(values: Sequence[float], drawn_from: int | None = None, sample: int | None = None) -> tuple[float, float]:
    """The 5th and 95th percentile of ``values``; with ``drawn_from``, the values of bootstrap
    resamples of that many items (each pooling ``sample`` items drawn from its resample, where
    given), and the percentiles :func:`expanded` for so few.

    >>> interval(list(range(101)))
    (5.0, 95.0)
    >>> [round(x, 1) for x in interval(list(range(101)), drawn_from=8)]
    [2.1, 97.9]
    """
    lo, hi = np.percentile(values, INTERVAL if drawn_from is None else expanded(drawn_from, sample))
    return float(lo), float(hi)


def expanded(n: int, sample: int | None = None) -> tuple[float, float]:
    """The percentiles a bootstrap over ``n`` items reports as its 90% interval: Hesterberg's
    expanded percentile interval ("What teachers should know about the bootstrap", The American
    Statistician 69(4), 2015), for a prediction of ``sample`` new items too.

    A percentile interval over resamples of n items is too narrow for small n: a resample's spread
    is the plug-in one, (n - 1) / n of the sample variance s^2, and the normal's tails stand where
    Student's t with n - 1 degrees of freedom belongs. So the tails move out to Phi(-c t[n - 1, 0.95])
    with c = sqrt(n / (n - 1)): about the 2nd and 98th percentile for 8 items, the 3.5th and 96.5th
    for 16, the 5th and 95th in the limit. With ``sample`` = m (each resample of the n pools m items
    drawn from it, the mean of m new items about the mean of the n), the two draws' variance is
    s^2 (n - 1) / n (1 / n + (n - 1) / (n m)) where t's prediction interval has s^2 (1 / n + 1 / m):
    c = sqrt(n / (n - 1) (n + m) / (n + m - 1)).

    >>> [round(x, 2) for x in expanded(8)]
    [2.14, 97.86]
    >>> [round(x, 2) for x in expanded(8, sample=6)]
    [1.78, 98.22]
    >>> expanded(1)
    (0.0, 100.0)
    """
    if n < 2:
        return 0.0, 100.0
    c = n / (n - 1) * ((n + sample) / (n + sample - 1) if sample else 1.0)
    tail = 100.0 * NormalDist().cdf(-math.sqrt(c) * _t95(n - 1))
    return tail, 100.0 - tail


def _t95(dof: int) -> float:
    """The 95th percentile of Student's t with ``dof`` degrees of freedom, by the Cornish-Fisher
    expansion around the normal's (Abramowitz and Stegun 26.7.5; 6.0 against 6.31 at 1 degree of
    freedom, within 0.001 from 3).

    >>> round(_t95(7), 3), round(_t95(30), 3)
    (1.895, 1.697)
    """
    z, v = NormalDist().inv_cdf(0.95), float(dof)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def miss_score(measured: float, predicted: float, band: tuple[float, float]) -> float | None:
    """How far ``measured`` fell from ``predicted`` in units of the interval ``band`` around it:
    log(measured / predicted) over log(high / predicted) above the prediction, over
    log(predicted / low) below it (so ``band``'s ends score 1 and -1); None where ``band`` has no
    width on that side.

    >>> [round(miss_score(m, 2.0, (1.8, 2.2)), 6) for m in (2.2, 1.8, 2.0)]
    [1.0, -1.0, 0.0]
    >>> round(miss_score(1.6, 2.0, (1.8, 2.2)), 3)  # about twice as far below as the band reaches, in log
    -2.118
    """
    r = math.log(measured / predicted)
    side = math.log(band[1] / predicted) if r >= 0 else math.log(predicted / band[0])
    if side <= 0:
        return None if r else 0.0
    return r / side  # side > 0 on the side r fell: the score keeps r's sign


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
    widths: int | None = None,
) -> list[Profile]:
    """``count`` copies of ``profile`` whose acceptance pools a resample of the profiled prompts;
    with ``drift``, each model's latency curves also scaled by exp(sigma z), z a standard normal
    drawn per model and copy, sigma the curves' measured :attr:`~hsd_planner.plan.LatencyCurve.spread`.

    ``sample``: the copies predict what a run on that many new prompts will show, not the mean
    over the workload: each pools ``sample`` prompts drawn from a resample of the profiled ones (the
    mean's own uncertainty, then the spread of a small set around it; a validation on 3 prompts
    varies far more than the mean of 12 profiled ones).

    ``widths``: the copies' visited and drafted tables reach that width only (the widest a plan
    they will predict drafts; None: every width profiled).

    ``by_pair[(drafter, verifier)][prompt]`` holds per-prompt acceptance sums (optionally with
    siblings_sum and siblings_count: the resampled A(k) of pairs that have one). None when a pair of
    the profile lacks per-prompt rows (an import of aggregated rows only).
    """
    have = {(a.drafter, a.verifier) for a in profile.acceptance}
    prompts = sorted({k for pair in by_pair.values() for k in pair})
    if not prompts or any(set(by_pair.get(pair, {})) != set(prompts) for pair in have):
        return []
    draws = resamples(prompts, count, seed)
    if sample is not None:
        rng = np.random.default_rng(seed + 2)
        draws = [[drawn[i] for i in rng.integers(len(drawn), size=sample)] for drawn in draws]
    out = pooled_profiles(profile, by_pair, draws, widths)
    if not drift:
        return out
    rng = np.random.default_rng(seed + 1)  # its own stream: the prompts drawn stay those drawn without drift
    return [_drifted(p, rng) for p in out]


def pooled_profile(profile: Profile, by_pair: Mapping[tuple[str, str], Mapping[int, PromptSums]], prompts: Sequence[int]) -> Profile:
    """``profile`` whose acceptance of each of its pairs pools the per-prompt sums ``by_pair`` of
    ``prompts`` (indices into ``by_pair[pair]``; one may repeat, as in a resample). Every pair of
    ``profile`` must have rows for every prompt drawn."""
    return pooled_profiles(profile, by_pair, [prompts])[0]


def pooled_profiles(
    profile: Profile,
    by_pair: Mapping[tuple[str, str], Mapping[int, PromptSums]],
    draws: Sequence[Sequence[int]],
    widths: int | None = None,
) -> list[Profile]:
    """:func:`pooled_profile` of each of ``draws``, every pair's prompts pooled for all draws at
    once (a row of prompt counts per draw: see :class:`~hsd_planner.stats.pooling.PromptTable`),
    with visited and drafted tables up to width ``widths`` (None: every width profiled)."""
    keys = sorted({k for drawn in draws for k in drawn})
    column = {k: i for i, k in enumerate(keys)}
    weights = np.zeros((len(draws), len(keys)))  # (draws, prompts): how often each draw holds each prompt
    for i, drawn in enumerate(draws):
        np.add.at(weights[i], [column[k] for k in drawn], 1.0)
    pooled = [PromptTable([by_pair[(a.drafter, a.verifier)][k] for k in keys]).pool(weights, widths) for a in profile.acceptance]
    return [
        profile.model_copy(
            update={
                "acceptance": [
                    PairAcceptance.model_construct(  # pooled sums are valid acceptance: no validation per resample
                        drafter=a.drafter,
                        verifier=a.verifier,
                        alpha=min(1.0, p[i].alpha),
                        run_lengths=p[i].run_lengths,
                        visited=p[i].visited,
                        drafted=p[i].drafted,
                        siblings=p[i].siblings,
                    )
                    for a, p in zip(profile.acceptance, pooled)
                ]
            }
        )
        for i in range(len(draws))
    ]


def _drifted(profile: Profile, rng: np.random.Generator) -> Profile:
    """``profile`` with each model's curves scaled by one factor exp(sigma z) (sigma: the curve's spread)."""
    models = []
    for m in profile.models:
        z = float(rng.standard_normal())
        latency = {b: c.scaled(math.exp(c.spread * z)) for b, c in m.latency.items()}
        models.append(m.model_copy(update={"latency": latency}))
    return profile.model_copy(update={"models": models})
