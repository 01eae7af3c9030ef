"""From a validation's runs to its results: a plan's runs against its prediction, its levels'
passes and acceptance, the bootstrap interval of its measured speed-up, and the stored validation."""

from __future__ import annotations

import statistics
from typing import Any

from hsd_runtime import GenerationResult

from ..choices import AcceptanceModel
from ..plan import Plan, Prediction, Profile, rounds_per_round, tokens_per_round
from ..prompts import PromptSet
from ..stats import bootstrap_interval
from ..store import Engine
from ..store.records import SolveRecord
from ..store.validations import ValidationEntry, ValidationRunEntry, save_validation
from .report import LevelResult, PlanResult

__all__ = ["level_results", "median_ms", "plan_result", "speedup_interval", "store_validation"]


def plan_result(
    plan_id: int | None,
    kind: str,
    plan: Plan,
    predicted: tuple[Prediction, Prediction],
    measured: tuple[list[GenerationResult], list[GenerationResult]],
    levels: list[LevelResult],
    **extra: Any,
) -> PlanResult:
    """``plan``'s runs against its prediction, ``predicted`` and ``measured`` each (the plan's,
    the autoregressive plan's beside it: on the same prompts, or batches); ``extra``: the
    :class:`PlanResult` fields a validation adds (batch size, calibration, interval)."""
    (mine, auto), (runs, auto_runs) = predicted, measured
    ms = median_ms(runs)
    return PlanResult(
        plan_id=plan_id,
        kind=kind,
        plan=Plan(plan.chain, plan.widths, Prediction(mine.ms_per_token, mine.mean_accepted_length, auto.ms_per_token / mine.ms_per_token)),
        measured_ms_per_token=ms,
        measured_mean_accepted_length=sum(r.total_tokens for r in runs) / sum(len(c) for r in runs for c in r.committed),
        measured_speedup=median_ms(auto_runs) / ms,
        # the prefills that fed their prompt (a repeat of a prompt reuses its cached prefill)
        prefill_ms=statistics.median(1000 * r.prefill_s for r in runs if r.levels[-1].prefill_tokens),
        tokens=sum(r.total_tokens for r in runs),
        levels=levels,
        **extra,
    )


def median_ms(results: list[GenerationResult]) -> float:
    """The median ms per token of the runs that made tokens."""
    return statistics.median(r.ms_per_token for r in results if r.total_tokens)


def level_results(
    profile: Profile, plan: Plan, results: list[GenerationResult], acceptance: AcceptanceModel, batch: int = 1
) -> list[LevelResult]:
    """Per level: forward passes and acceptance, summed over ``results``, and tokens per round
    predicted vs measured (at one sequence only: a batched pass serves several sequences' rounds)."""
    predicted_tokens = tokens_per_round(profile, plan.chain, plan.widths, acceptance)  # E[X] per level, trees included
    predicted_rounds = rounds_per_round(profile, plan.chain, plan.widths, acceptance)  # m(T_k) per middle level
    passes = [sum(r.levels[k].forward_passes for r in results) for k in range(len(plan.chain))]
    out = []
    for k, name in enumerate(plan.chain):
        stats = [r.levels[k] for r in results]
        measured = rounds = None
        if k > 0 and batch == 1:
            below = [r.levels[k - 1] for r in results]
            made = passes[k] or 1
            measured = (sum(x.accepted for x in below) + made) / made
            if predicted_rounds[k] is not None and passes[k + 1]:
                rounds = passes[k] / passes[k + 1]
        out.append(
            LevelResult(
                model=name,
                forward_passes=passes[k],
                proposed=sum(x.proposed for x in stats),
                accepted=sum(x.accepted for x in stats),
                measured_tokens_per_round=measured,
                predicted_tokens_per_round=predicted_tokens[k],
                predicted_rounds=predicted_rounds[k],
                measured_rounds=rounds,
                **{
                    key: sum(getattr(x, key) for x in stats)
                    for key in ("time_s", "forward_s", "cache_s", "draft_s", "verify_s", "steers", "steer_s")
                },
            )
        )
    return out


def store_validation(
    db: Engine, solve: SolveRecord, prompts: PromptSet, max_new_tokens: int, repeats: int, results: list[PlanResult], **summary: Any
) -> int:
    """Store a validation of ``solve``: its ``summary`` figures (those of :class:`ValidationEntry`
    it has; the rest None) and every plan's run; return its id."""
    absent = {k: None for k in ValidationEntry.__dataclass_fields__}
    run = {"solve_id": solve.id, "prompts_name": prompts.name, "prompts": len(prompts.prompts), "max_new_tokens": max_new_tokens}
    entry = ValidationEntry(**(absent | run | {"repeats": repeats} | summary))
    fields = ValidationRunEntry.__dataclass_fields__
    runs = [ValidationRunEntry(**{k: v for k, v in r.to_dict().items() if k in fields}) for r in results]
    return save_validation(db, entry, runs)


def speedup_interval(auto: list[GenerationResult], runs: list[GenerationResult], units: int) -> tuple[float, float] | None:
    """The 90% interval of the measured speed-up over bootstrap resamples of ``units`` (the
    prompts, or the batches).

    ``auto`` and ``runs`` hold each unit's repeats in order (unit-major, as run).
    """
    per = len(runs) // units
    a = [median_ms(auto[k * per : (k + 1) * per]) for k in range(units)]
    b = [median_ms(runs[k * per : (k + 1) * per]) for k in range(units)]
    return bootstrap_interval(
        list(range(units)), lambda drawn: statistics.median(a[k] for k in drawn) / statistics.median(b[k] for k in drawn)
    )
