"""How sure a prediction is: the 90% interval of a plan's predicted speed-up over bootstrap
profiles (the profiled prompts resampled, and with ``drift`` each model's latency moved as far as
its own samples moved while it was profiled; for a validation, each also timed as its runs will
be, :func:`timing_noise`), widened by how far this machine's past validations of the same target
measured from their predictions.

Over few prompts a percentile interval is too narrow (a resample's spread is the plug-in one, and
its tails the normal's), so every interval here reaches out to the percentiles
:func:`~hsd_planner.stats.expanded` gives for the number of prompts profiled.

The bootstrap sees only what the profile holds: prompts like the profiled ones, a machine in the
state it was profiled in. What it cannot see - held-out prompts that draft otherwise, a machine
whose curves changed shape, the latency model's own bias - shows in the validations stored before.
Each gives, per plan, its miss r = log(measured / predicted speed-up) in units of its own bootstrap
interval's half-width on the side it missed (:func:`~hsd_planner.stats.miss_score`: -1 and 1 are
the interval's ends). Once at least :data:`MIN_RESIDUALS` plans were validated for the target on
this machine (of the same workload once it has that many, :func:`past_misses`), an interval is
the union of the bootstrap's and the prediction moved by the bounds of those scores that a
split-conformal interval gives, each in units of this interval's own
half-width (a normalised split-conformal interval: it holds the next measured speed-up as often as
the past ones held theirs, as far as the next run is like them). A validation's plans ran on the
same prompts and miss together, so the bounds count validations, not plans
(:func:`~hsd_planner.stats.group_bounds`): below 39 past validations, the farthest past miss
on each side. A validation of many prompts, whose bootstrap
interval is narrow, is widened in proportion, not by the misses of past validations of a few
prompts; a miss that does not shrink with the prompts (the latency model's own bias) shows as a
larger score in validations of many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hsd_runtime.terms.shape import TreeShape

from ..choices import AcceptanceModel
from ..plan import Plan, Prediction, Profile, predict
from ..stats import group_bounds, interval, resample_profiles
from ..store import Engine
from ..store.profiles import ProfileSource, prompt_acceptance
from ..store.validations import speedup_scores

__all__ = [
    "MIN_RESIDUALS",
    "Bootstrap",
    "bootstrap_predictions",
    "bootstrap_profiles",
    "past_misses",
    "past_plans",
    "predicted_intervals",
    "timed",
    "timing_noise",
    "widened",
    "widest",
]

# past validated plans (of one target on one machine) before their misses widen an interval: with
# fewer, the 5th and 95th percentiles are the extremes of a handful of runs
MIN_RESIDUALS = 10


@dataclass(frozen=True)
class Bootstrap:
    """Bootstrap profiles, and how many profiled prompts they resample."""

    profiles: list[Profile]  # empty without per-prompt rows
    prompts: int
    sample: int | None = None  # each profile pools this many prompts drawn from its resample (None: the resample)

    def interval(self, values: Sequence[float]) -> tuple[float, float]:
        """The 90% interval of ``values``, one per profile, expanded for :attr:`prompts` prompts
        (see :func:`~hsd_planner.stats.expanded`).

        >>> [round(x, 1) for x in Bootstrap([], 8).interval(list(range(101)))]
        [2.1, 97.9]
        """
        return interval(values, drawn_from=self.prompts, sample=self.sample)

    def timed_interval(
        self, found: Sequence[Prediction], profile: Profile, plan: Plan, runs: int, batch_size: int = 1
    ) -> tuple[float, float]:
        """The 90% interval of the speed-ups ``found`` (``plan`` predicted on each profile) as a
        validation's ``runs`` runs of it, and as many of autoregressive decoding, will time them
        (:func:`timing_noise` from ``profile``, the one ``plan`` was predicted on)."""
        return self.interval(timed([p.speedup for p in found], timing_noise(profile, plan, runs, batch_size)))


def bootstrap_profiles(
    db: Engine,
    profile: Profile,
    source: ProfileSource,
    drift: bool = False,
    sample: int | None = None,
    plans: Sequence[Plan] | None = None,
) -> Bootstrap:
    """Profiles whose acceptance pools resamples of the profiled prompts (none without per-prompt
    rows); with ``drift``, their latency curves drawn around the measured ones too; with
    ``sample``, each pooling that many prompts, as a run on that many new prompts would (see
    :func:`~hsd_planner.stats.resample_profiles`). With ``plans``, the profiles price those plans
    and none wider (their tables stop at the widest width the plans draft)."""
    pairs = {(a.drafter, a.verifier) for a in profile.acceptance}
    by_pair = prompt_acceptance(db, source, pairs)
    prompts = len({k for rows in by_pair.values() for k in rows})
    widths = widest(plans) if plans is not None else None
    return Bootstrap(resample_profiles(profile, by_pair, drift=drift, sample=sample, widths=widths), prompts, sample)


def widest(plans: Sequence[Plan]) -> int:
    """The widest round any of ``plans`` drafts: a chain level's width, a tree's nodes (1 without a drafter).

    >>> from hsd_planner.plan import Prediction
    >>> widest([Plan(("a", "b"), (4,), Prediction(0.0, 0.0, 0.0)), Plan(("a", "b"), (TreeShape((3, 2)),), Prediction(0.0, 0.0, 0.0))])
    9
    """
    return max((w.nodes if isinstance(w, TreeShape) else w for plan in plans for w in plan.widths), default=1)


def bootstrap_predictions(
    profiles: list[Profile],
    plan: Plan,
    acceptance: AcceptanceModel,
    contexts: int | list[int],
    max_new_tokens: int | None = None,
    batch_size: int = 1,
) -> list[Prediction] | None:
    """``plan``'s prediction on each bootstrap profile of ``profiles`` (for a generation of
    ``max_new_tokens`` at ``batch_size``; see :func:`~hsd_planner.plan.predict`); None for a tree
    plan whose sibling curve the resamples do not carry (a fixed curve would shrink its spread to
    the upper levels' uncertainty and claim a certainty never measured)."""
    if not all(_predictable(b, plan) for b in profiles):
        return None
    return [predict(b, plan.chain, plan.widths, acceptance, contexts, max_new_tokens, batch_size) for b in profiles]


def predicted_intervals(
    boot: Bootstrap,
    plans: Sequence[Plan],
    acceptance: AcceptanceModel,
    contexts: int | list[int],
    max_new_tokens: int | None = None,
    batch_size: int = 1,
    scores: Sequence[Sequence[float]] = (),
) -> list[tuple[float, float] | None] | None:
    """Per plan, the 90% interval of its predicted speed-up over the bootstrap ``boot`` (see
    :func:`bootstrap_predictions`; None where that has none). The interval of a plan above
    autoregressive decoding is :func:`widened` by ``scores``, the misses of past validations (one
    list per validation)."""
    if not boot.profiles:
        return None
    out: list[tuple[float, float] | None] = []
    for plan in plans:
        found = bootstrap_predictions(boot.profiles, plan, acceptance, contexts, max_new_tokens, batch_size)
        if found is None:
            out.append(None)
            continue
        band = boot.interval([p.speedup for p in found])
        out.append(widened(band, plan.prediction.speedup, scores) if plan.depth else band)
    return out


def widened(band: tuple[float, float], speedup: float, scores: Sequence[Sequence[float]]) -> tuple[float, float]:
    """``band`` joined with ``speedup`` moved by each of the bounds :func:`~hsd_planner.stats.group_bounds`
    gives the misses ``scores`` (per past validation, its plans'
    :func:`~hsd_planner.stats.miss_score`), in units of ``band``'s own half-width on that side of
    ``speedup``; ``band`` itself with fewer than :data:`MIN_RESIDUALS` past plans.

    >>> widened((1.9, 2.1), 2.0, [[0.0] * 8 + [-3.0]])
    (1.9, 2.1)
    >>> [round(x, 3) for x in widened((1.8, 2.2), 2.0, [[-2.0, 0.5]] * 5)]  # twice the lower half-width below
    [1.62, 2.2]
    >>> [round(x, 3) for x in widened((1.9, 2.1), 2.0, [[-2.0, 0.5]] * 5)]  # the same misses, a narrower band
    [1.805, 2.1]
    """
    if not past_plans(scores):
        return band
    low, high = group_bounds(scores)
    # half-widths in log (none on a side where the band does not reach past the prediction)
    below, above = max(0.0, math.log(speedup / band[0])), max(0.0, math.log(band[1] / speedup))

    def moved(s: float) -> float:
        return speedup * math.exp(s * (above if s >= 0 else below))

    return min(band[0], moved(low)), max(band[1], moved(high))


def past_misses(db: Engine, target: str, hardware_id: int, workload_id: int) -> list[list[float]]:
    """The misses of past validations that widen an interval for a plan of ``target`` solved on
    the profile of ``workload_id`` on the machine ``hardware_id``, one list per validation
    (:func:`~hsd_planner.store.validations.speedup_scores`): the workload's own once they hold
    :data:`MIN_RESIDUALS` plans, every workload's of the target on the machine before that. A
    workload's validations are more alike than another workload's: its prompts draft alike, and
    a miss of a workload whose intervals are narrow, carried over in units of another's wide ones,
    widens them more than they need."""
    own = speedup_scores(db, target, hardware_id, workload_id)
    return own if past_plans(own) else speedup_scores(db, target, hardware_id)


def past_plans(scores: Sequence[Sequence[float]]) -> int:
    """How many past plans ``scores`` (per validation) hold: what a report counts as its interval
    history, 0 below :data:`MIN_RESIDUALS` (they widen nothing then).

    >>> past_plans([[0.1, -0.2], [0.3]]), past_plans([[0.0] * 6, [0.0] * 6])
    (0, 12)
    """
    n = sum(len(g) for g in scores)
    return n if n >= MIN_RESIDUALS else 0


def timing_noise(profile: Profile, plan: Plan, runs: int, batch_size: int = 1) -> float:
    """The sigma of log(measured speed-up) that timing alone adds to a validation that runs
    ``plan`` ``runs`` times and autoregressive decoding as often, beside them: each run's ms per
    token moved by the machine as far as one pass of the target moved while it was profiled (its
    curve's :attr:`~hsd_planner.plan.LatencyCurve.spread`), independently from run to run, so
    sigma * sqrt(2 / runs) for the ratio of the two means. A plan whose drafting varies little
    over the profiled prompts has a bootstrap interval narrower than the runs' own timing
    (a lookup that finds nothing to copy: the same passes as autoregressive decoding).

    >>> from hsd_planner.plan import LatencyCurve, ModelProfile
    >>> curve = LatencyCurve(points={64: {1: 80.0, 4: 120.0}}, spread=0.05)
    >>> t = Profile(target="t", models=[ModelProfile(name="t", latency={1: curve})], acceptance=[])
    >>> round(timing_noise(t, Plan(("ngram", "t"), (4,), Prediction(0.0, 0.0, 0.0)), runs=8), 4)
    0.025
    """
    curve = profile.model(plan.chain[-1]).latency.get(batch_size)
    return curve.spread * math.sqrt(2.0 / runs) if curve is not None and runs > 0 else 0.0


def timed(speedups: Sequence[float], sigma: float, seed: int = 0) -> list[float]:
    """``speedups`` (one per bootstrap profile) each moved by exp(sigma z), z a standard normal
    drawn per profile from its own seeded stream: the bootstrap's predictions as runs timed with
    :func:`timing_noise` ``sigma`` would measure them.

    >>> timed([2.0, 2.0], 0.0)
    [2.0, 2.0]
    >>> [round(x, 3) for x in timed([2.0, 2.0], 0.1)]
    [2.453, 1.549]
    """
    if sigma <= 0.0:
        return list(speedups)
    z = np.random.default_rng(seed + 3).standard_normal(len(speedups))  # apart from the resample's streams (seed to seed + 2)
    return [s * math.exp(sigma * float(x)) for s, x in zip(speedups, z)]


def _predictable(profile: Profile, plan: Plan) -> bool:
    """Whether ``profile`` has what ``plan`` needs beyond run lengths: the first pair's sibling
    curve when the first drafter drafts a tree."""
    if not plan.widths or not isinstance(plan.widths[0], TreeShape):
        return True
    return (plan.chain[0], plan.chain[1]) in profile.siblings_curves()
