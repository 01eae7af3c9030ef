"""``hsd-plan solve``: solve on the newest matching stored profile and store the ranked plans."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from hsd_runtime.terms.choices import Mode
from hsd_runtime.terms.shape import TreeShape

from ..choices import AcceptanceModel, PlanKind
from ..plan import SOLVE_DEFAULTS, Plan, Profile, Solution, SolveConfig, predict, solve
from ..plan.config import DEFAULT_CONTEXT
from ..stats import interval, resample_profiles
from ..store import Engine
from ..store.profiles import ProfileSource, load_profile, prompt_acceptance
from ..store.records import Ranking
from ..store.solves import acceptance_sample, save_solve
from .report import SolveReport

__all__ = ["predicted_intervals", "solve_and_store"]


def solve_and_store(
    db: Engine,
    target: str | None = None,
    workload: str | None = None,
    mode: Mode = "greedy",
    temperature: float = 1.0,
    config: SolveConfig = SOLVE_DEFAULTS,
    hardware: str | Sequence[str] | None = None,
    lenience: float = 1.0,
) -> SolveReport:
    """Solve on the newest matching profile, store the solve and its plans, return a report.

    ``hardware``: the fingerprint(s) whose latency to use (None: the newest of any). Cost curves
    are read at ``config.context_len`` or, without one, averaged over the workload's own contexts
    (each prompt plus half its continuation).
    """
    profile, source = load_profile(db, target, workload, mode, temperature, hardware, lenience)
    contexts: int | list[int] = config.context_len or source.contexts or DEFAULT_CONTEXT
    context_len = contexts if isinstance(contexts, int) else int(statistics.median(contexts))
    ranked = _ranked(solve(profile, config, contexts))
    plans = [plan for plan, _ in ranked]
    intervals = predicted_intervals(_bootstrap_profiles(db, profile, source), plans, config.acceptance, contexts)
    stored = save_solve(db, source, config, context_len, _with_intervals(ranked, intervals))
    sample = acceptance_sample(db, source, plans[0].chain)
    return SolveReport(
        solve_id=stored[0].solve_id,
        target=source.target,
        workload=source.workload,
        hardware=source.hardware,
        mode=mode,
        temperature=temperature if mode == "sample" else None,
        lenience=lenience,
        acceptance=config.acceptance,
        context_len=context_len,
        plans=stored,
        sample_prompts=sample[0] if sample else None,
        sample_positions=sample[1] if sample else None,
    )


def _ranked(solution: Solution) -> list[tuple[Plan, PlanKind]]:
    """The plans a solve stores, in rank order: best, top, singles, autoregressive decoding."""
    ranked: list[tuple[Plan, PlanKind]] = [(p, "best" if i == 0 else "top") for i, p in enumerate(solution.top)]
    return ranked + [(p, "single") for p in solution.singles] + [(solution.autoregressive, "autoregressive")]


def _with_intervals(ranked: list[tuple[Plan, PlanKind]], intervals: list[tuple[float, float] | None] | None) -> list[Ranking]:
    """Each plan with its interval, and tied where that overlaps the pick's (rank 0) interval."""
    pick_plan, pick = ranked[0][0], intervals[0] if intervals else None
    out: list[Ranking] = []
    for rank, (plan, kind) in enumerate(ranked):
        own = intervals[rank] if intervals else None
        tied = None
        if own is not None and pick is not None:
            tied = (plan.chain, plan.widths) != (pick_plan.chain, pick_plan.widths) and own[1] >= pick[0]
        out.append((plan, kind, own, tied))
    return out


def _bootstrap_profiles(db: Engine, profile: Profile, source: ProfileSource) -> list[Profile]:
    """Profiles whose acceptance pools resamples of the profiled prompts (none without per-prompt rows)."""
    pairs = {(a.drafter, a.verifier) for a in profile.acceptance}
    return resample_profiles(profile, prompt_acceptance(db, source, pairs))


def predicted_intervals(
    profiles: list[Profile], plans: list[Plan], acceptance: AcceptanceModel, contexts: int | list[int]
) -> list[tuple[float, float] | None] | None:
    """Per plan, the 90% interval of its predicted speed-up over the bootstrap ``profiles``; None
    for a tree plan whose sibling curve the resamples do not carry (a fixed curve would shrink the
    interval to the upper levels' uncertainty and claim a certainty never measured)."""
    if not profiles:
        return None
    out: list[tuple[float, float] | None] = []
    for plan in plans:
        if not all(_predictable(b, plan) for b in profiles):
            out.append(None)
            continue
        out.append(interval([predict(b, plan.chain, plan.widths, acceptance, contexts).speedup for b in profiles]))
    return out


def _predictable(profile: Profile, plan: Plan) -> bool:
    """Whether ``profile`` has what ``plan`` needs beyond run lengths: the first pair's sibling
    curve when the first drafter drafts a tree."""
    if not plan.widths or not isinstance(plan.widths[0], TreeShape):
        return True
    return (plan.chain[0], plan.chain[1]) in profile.siblings_curves()
