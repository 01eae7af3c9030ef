"""``hsd-plan solve``: solve on the newest matching stored profile and store the ranked plans."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from hsd_runtime.terms.choices import Mode

from ..choices import PlanKind
from ..plan import SOLVE_DEFAULTS, Plan, Solution, SolveConfig, solve
from ..plan.config import DEFAULT_CONTEXT
from ..store import Engine
from ..store.profiles import load_profile
from ..store.records import Ranking
from ..store.solves import acceptance_sample, profiled_length, save_solve
from .intervals import bootstrap_profiles, past_misses, past_plans, predicted_intervals
from .report import SolveReport

__all__ = ["solve_and_store"]


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
    (each prompt plus half its continuation). Plans are ranked by the time of a generation of
    ``config.max_new_tokens`` tokens (read on the acceptance profiled at that length where there
    is one) or, without one, of as many as the profile's continuations held (the workload's own
    length); each carries the 90% interval of its predicted speed-up
    over bootstrap profiles (the profiled prompts resampled, each model's curves drifted as far as
    its own samples moved while profiled), widened by the misses of this machine's past
    validations of the target (:mod:`.intervals`).
    """
    profile, source = load_profile(db, target, workload, mode, temperature, hardware, lenience, config.max_new_tokens)
    contexts: int | list[int] = config.context_len or source.contexts or DEFAULT_CONTEXT
    context_len = contexts if isinstance(contexts, int) else int(statistics.median(contexts))
    if config.max_new_tokens is None:
        config = config.model_copy(update={"max_new_tokens": profiled_length(db, source.setting_id)})
    ranked = _ranked(solve(profile, config, contexts))
    plans = [plan for plan, _ in ranked]
    boot = bootstrap_profiles(db, profile, source, drift=True, plans=plans)
    scores = past_misses(db, source.target, source.hardware_id, source.workload_id)
    intervals = predicted_intervals(boot, plans, config.acceptance, contexts, config.max_new_tokens, scores=scores)
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
        max_new_tokens=config.max_new_tokens,
        interval_history=past_plans(scores),
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
