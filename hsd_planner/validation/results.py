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

__all__ = ["level_results", "median_ms", "plan_result", "same_text", "speedup_interval", "store_validation", "workload_ms"]


def plan_result(
    plan_id: int | None,
    kind: str,
    plan: Plan,
    predicted: tuple[Prediction, Prediction],
    measured: tuple[list[GenerationResult], list[GenerationResult]],
    levels: list[LevelResult],
    units: int | None = None,
    **extra: Any,
) -> PlanResult:
    """``plan``'s runs against its prediction, ``predicted`` and ``measured`` each (the plan's,
    the autoregressive plan's beside it: on the same prompts, or batches, ``units`` of them, each
    with its repeats; see :func:`workload_ms`); ``extra``: the
    :class:`PlanResult` fields a validation adds (batch size, calibration, interval)."""
    (mine, auto), (runs, auto_runs) = predicted, measured
    ms = workload_ms(runs, units)
    return PlanResult(
        plan_id=plan_id,
        kind=kind,
        plan=Plan(plan.chain, plan.widths, Prediction(mine.ms_per_token, mine.mean_accepted_length, auto.ms_per_token / mine.ms_per_token)),
        measured_ms_per_token=ms,
        measured_mean_accepted_length=sum(r.total_tokens for r in runs) / sum(len(c) for r in runs for c in r.committed),
        measured_speedup=workload_ms(auto_runs, units) / ms,
        # the prefills that fed their prompt (a repeat of a prompt reuses its cached prefill)
        prefill_ms=statistics.median(1000 * r.prefill_s for r in runs if r.levels[-1].prefill_tokens),
        tokens=sum(r.total_tokens for r in runs),
        levels=levels,
        **extra,
    )


def median_ms(results: list[GenerationResult]) -> float:
    """The median ms per token of the runs that made tokens (repeats of one prompt or batch)."""
    return statistics.median(r.ms_per_token for r in results if r.total_tokens)


def workload_ms(results: list[GenerationResult], units: int | None = None) -> float:
    """The workload's ms per token: each unit's median over its repeats (``results`` unit-major,
    as run; None: every run its own unit), weighted by the unit's tokens. This is the time of the
    workload's tokens over their count, what the latency model predicts from acceptance pooled over
    the prompts; a median over prompts follows the typical prompt instead, which for a lookup that
    drafts in bursts is slower than the workload (by 4-12 % on HumanEval and summarization here).

    >>> from types import SimpleNamespace as R
    >>> workload_ms([R(ms_per_token=40.0, total_tokens=100), R(ms_per_token=10.0, total_tokens=300)])
    17.5
    """
    per = max(1, len(results) // units) if units else 1
    pairs = []
    for k in range(0, len(results), per):
        made = [r for r in results[k : k + per] if r.total_tokens]
        if made:
            pairs.append((median_ms(made), statistics.median(r.total_tokens for r in made)))
    return sum(ms * n for ms, n in pairs) / sum(n for _, n in pairs)


def same_text(runs: list[GenerationResult], auto: list[GenerationResult]) -> tuple[int, int]:
    """Of the sequences of ``runs``, how many made exactly the new tokens of the same sequence of
    ``auto`` (the autoregressive runs beside them, in the same order), and how many there are.

    >>> from types import SimpleNamespace as R
    >>> same_text([R(sequences=[[1, 2]]), R(sequences=[[3, 4]])], [R(sequences=[[1, 2]]), R(sequences=[[3, 5]])])
    (1, 2)
    """
    pairs = [(mine, theirs) for r, a in zip(runs, auto) for mine, theirs in zip(r.sequences, a.sequences)]
    return sum(mine == theirs for mine, theirs in pairs), len(pairs)


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
    a = [auto[k * per : (k + 1) * per] for k in range(units)]
    b = [runs[k * per : (k + 1) * per] for k in range(units)]
    return bootstrap_interval(
        list(range(units)),
        lambda drawn: workload_ms([r for k in drawn for r in a[k]], len(drawn)) / workload_ms([r for k in drawn for r in b[k]], len(drawn)),
    )
