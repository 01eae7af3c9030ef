"""How sure a prediction is: the 90% interval of a plan's predicted speed-up over bootstrap
profiles (the profiled prompts resampled, and with ``drift`` each model's latency moved as far as
its own samples moved while it was profiled)."""

from __future__ import annotations

from collections.abc import Sequence

from hsd_runtime.terms.shape import TreeShape

from ..choices import AcceptanceModel
from ..plan import Plan, Profile, predict
from ..stats import interval, resample_profiles
from ..store import Engine
from ..store.profiles import ProfileSource, prompt_acceptance

__all__ = ["bootstrap_profiles", "predicted_intervals"]


def bootstrap_profiles(
    db: Engine, profile: Profile, source: ProfileSource, drift: bool = False, sample: int | None = None
) -> list[Profile]:
    """Profiles whose acceptance pools resamples of the profiled prompts (none without per-prompt
    rows); with ``drift``, their latency curves drawn around the measured ones too; with
    ``sample``, each pooling that many prompts, as a run on that many new prompts would (see
    :func:`~hsd_planner.stats.resample_profiles`)."""
    pairs = {(a.drafter, a.verifier) for a in profile.acceptance}
    return resample_profiles(profile, prompt_acceptance(db, source, pairs), drift=drift, sample=sample)


def predicted_intervals(
    profiles: list[Profile],
    plans: Sequence[Plan],
    acceptance: AcceptanceModel,
    contexts: int | list[int],
    max_new_tokens: int | None = None,
    batch_size: int = 1,
) -> list[tuple[float, float] | None] | None:
    """Per plan, the 90% interval of its predicted speed-up over the bootstrap ``profiles`` (for
    a generation of ``max_new_tokens`` at ``batch_size``; see :func:`~hsd_planner.plan.predict`);
    None for a tree plan whose sibling curve the resamples do not carry (a fixed curve would
    shrink the interval to the upper levels' uncertainty and claim a certainty never measured)."""
    if not profiles:
        return None
    out: list[tuple[float, float] | None] = []
    for plan in plans:
        if not all(_predictable(b, plan) for b in profiles):
            out.append(None)
            continue
        speedups = [predict(b, plan.chain, plan.widths, acceptance, contexts, max_new_tokens, batch_size).speedup for b in profiles]
        out.append(interval(speedups))
    return out


def _predictable(profile: Profile, plan: Plan) -> bool:
    """Whether ``profile`` has what ``plan`` needs beyond run lengths: the first pair's sibling
    curve when the first drafter drafts a tree."""
    if not plan.widths or not isinstance(plan.widths[0], TreeShape):
        return True
    return (plan.chain[0], plan.chain[1]) in profile.siblings_curves()
