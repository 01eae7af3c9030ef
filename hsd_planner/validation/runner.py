"""``hsd-plan validate``: run solved plans on held-out prompts and compare with the prediction.

For each plan: measured ms per generated token (decode only, median over prompts and repeats;
prefill reported apart), the prediction of the latency model (median over the prompts of the
prediction at each prompt's context: its length plus half the continuation, for a generation of
``max_new_tokens`` tokens whose last round is cut short),
error = (predicted - measured) / measured, measured speed-up over the target's own
autoregressive decoding run in the same validation, and mean accepted length per level, predicted
and measured. Overall: the median absolute error and the regret, the measured latency of the
solver's pick over the best measured among the plans run.

The error compares a profile measured at one time with runs at another, so it includes any
change of the machine's speed in between (on a shared 2-core host, 10-25% from one minute to the
next). The speed-up error, predicted over measured speed-up against autoregressive decoding minus
one, divides out a change that slows every pass alike, but not one that changes the curves'
shape (memory contention slows single-token passes most). The calibrated prediction takes both
out, run by run (:mod:`.calibration`): each run is predicted from the profile scaled by the
reference passes measured around it, and a plan's calibrated prediction is the median over its runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from hsd_runtime import CachePool, GenerationResult, Hierarchy, HSDError, ModelLoader, SamplingConfig, build_hierarchy, positions_needed

from ..choices import AcceptanceModel, PlanKind
from ..errors import StoreError
from ..plan import Plan, Prediction, Profile, predict_over, rounds_per_round, tokens_per_round, widths_to_json
from ..profiling.sources import check_source
from ..profiling.timing import PassTimer
from ..prompts import PromptSet, encode_prompt
from ..stats import bootstrap_interval
from ..store import Engine
from ..store.profiles import load_profile
from ..store.records import RankedPlan, SolveRecord
from ..store.solves import newest_solve, solve_record
from ..store.validations import (
    ValidationEntry,
    ValidationRunEntry,
    model_sources,
    plans_by_id,
    plans_of_solve,
    save_validation,
)
from .calibration import Calibration
from .report import LevelResult, PlanResult, ValidationReport

__all__ = ["CANDIDATE_SETS", "level_results", "plan_result", "run_validation", "select_plans", "store_validation"]

# the summary figures of a validation report that are stored with it
SUMMARY = (
    "median_abs_error",
    "regret",
    "median_abs_speedup_error",
    "median_abs_error_calibrated",
    "median_abs_speedup_error_calibrated",
)

# which plans of a solve ``--candidates`` runs: (kinds run in full, how many best single drafters
# besides: None for all); the solve's autoregressive plan always runs as the baseline
CANDIDATE_SETS: dict[str, tuple[tuple[PlanKind, ...], int | None]] = {
    "best": (("best",), 1),  # the solver's pick and the best single drafter
    "top-k": (("best", "top"), 0),
    "singles": ((), None),
    "all": (("best", "top"), None),
}


def select_plans(engine: Engine, plan_ids: tuple[int, ...], candidates: str) -> tuple[SolveRecord, list[RankedPlan]]:
    """The plans to run (the solve's autoregressive baseline always included)."""
    if plan_ids:
        rows = plans_by_id(engine, plan_ids)
        solves = sorted({r.solve_id for r in rows})
        if len(solves) > 1:
            raise StoreError(
                f"plans {', '.join(map(str, plan_ids))} come from different solves ({', '.join(map(str, solves))}); validate one solve's plans at a time"
            )
        solve = solve_record(engine, solves[0])
        all_rows = plans_of_solve(engine, solve.id)
    else:
        solve = newest_solve(engine)
        all_rows = plans_of_solve(engine, solve.id)
        kinds, n_singles = CANDIDATE_SETS[candidates]
        singles = [r for r in all_rows if r.kind == "single"]
        rows = [r for r in all_rows if r.kind in kinds] + singles[:n_singles]
    auto = next(r for r in all_rows if r.kind == "autoregressive")
    seen, plans = set(), []
    for r in [*rows, auto]:
        key = (r.plan.chain, tuple(widths_to_json(r.plan.widths)))
        if key not in seen:
            seen.add(key)
            plans.append(r)
    return solve, plans


def run_validation(
    engine: Engine,
    loader: ModelLoader,
    solve: SolveRecord,
    plans: list[RankedPlan],
    prompts: PromptSet,
    max_new_tokens: int,
    repeats: int,
    progress: Callable[[int], None] | None = None,
) -> ValidationReport:
    """Run every plan on every prompt ``repeats`` times, store the validation, return a report."""
    profile = _solve_profile(engine, solve, plans)
    loader = loader.with_kernels(solve.hardware.kernels or "plain")  # the plans run on the kernels their latencies were measured with
    encoded = [encode_prompt(loader.load(solve.target).tokenizer, p) for p in prompts.prompts]
    built = _build(plans, loader, _cells(plans, encoded, max_new_tokens))
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    calibration = _calibration(profile, loader, plans, int(statistics.median(contexts)))
    runs = _measure(built, encoded, solve, repeats, max_new_tokens, calibration, progress or (lambda _n: None))
    results = _Comparison(profile, solve.acceptance_model, contexts, max_new_tokens, calibration, runs).results(plans)
    report = _report(solve, prompts.name, contexts, results, calibration)
    summary = {k: getattr(report, k) for k in SUMMARY} | {"calibration": report.calibration.to_dict() if report.calibration else None}
    return replace(report, validation_id=store_validation(engine, solve, prompts, max_new_tokens, repeats, results, **summary))


def _solve_profile(engine: Engine, solve: SolveRecord, plans: list[RankedPlan]) -> Profile:
    """The profile ``solve`` was made on, after checking that no model of ``plans`` changed on disk since."""
    stored = model_sources(engine)
    for spec in {name for ranked in plans for name in ranked.plan.chain}:
        check_source(spec, stored.get(spec))
    setting = solve.setting
    profile, _ = load_profile(
        engine, solve.target, solve.workload.name, setting.mode, setting.temperature, solve.hardware.fingerprint, setting.lenience
    )
    return profile


def _cells(plans: list[RankedPlan], encoded: list[list[int]], max_new_tokens: int) -> int:
    """The positions the longest run of any plan can reach: the longest prompt, the new tokens,
    and twice the drafts ahead of them (a tree's nodes), the size of each llama.cpp context."""
    return max(positions_needed(max(map(len, encoded)), max_new_tokens, p.plan.widths, tree_nodes=True) for p in plans)


def _build(plans: list[RankedPlan], loader: ModelLoader, cells: int | None = None) -> dict[int, Hierarchy]:
    """Every plan's hierarchy, loaded; a plan that cannot be run is refused before any runs.

    The plans share one cache per model (they run one at a time), so a plan that runs a prompt
    another plan prefilled keeps that prefill: the decode it times is the same. ``cells``: the
    positions each cache of an engine that allocates them up front holds (None: the model's context)."""
    built, pool = {}, CachePool(cells)
    for plan in plans:
        try:
            built[plan.id] = build_hierarchy(plan.plan.chain, plan.plan.widths, loader, caches=pool)[0]
        except HSDError as exc:
            raise StoreError(f"plan {plan.id} ({','.join(plan.plan.chain)}) cannot be run: {exc}") from None
    return built


@dataclass
class _Runs:
    """Every plan's runs, prompt-major as run, and per run its prompt and the reference rounds around it."""

    results: dict[int, list[GenerationResult]]
    around: dict[int, list[tuple[int, list[int]]]]


def _measure(
    built: dict[int, Hierarchy],
    encoded: list[list[int]],
    solve: SolveRecord,
    repeats: int,
    max_new_tokens: int,
    calibration: Calibration,
    step: Callable[[int], None],
) -> _Runs:
    """Reference rounds first, a warm-up of every plan, then every plan on every prompt ``repeats``
    times, interleaved so that drift of the machine hits every plan alike, a reference round after
    each run.

    The plans share their models' caches (see :func:`_build`): on each prompt the plans that lead
    it (:func:`_leads`) run first and feed it afresh, their prefill measured; the others, and
    every repeat, reuse the prefill their models hold. The decode, all that is timed, is the same."""
    s = solve.setting
    sampling = SamplingConfig(mode=s.mode, temperature=s.temperature, top_p=s.top_p, lenience=s.lenience)
    calibration.measure(rounds=3)  # before the plans run
    for h in built.values():  # warm-up, untimed; the shared models are prefilled once
        h.generate(encoded[0], 4, sampling, reuse_prompt=True)
    runs = _Runs({i: [] for i in built}, {i: [] for i in built})
    lead = _leads(len(built), len(encoded))
    for k, ids in enumerate(encoded):
        leaders = [plan_id for i, plan_id in enumerate(built) if lead[i] == k]
        for rep in range(repeats):
            seeded = sampling.model_copy(update={"seed": 1000 * k + rep})
            for plan_id in leaders + [p for p in built if p not in leaders]:
                fresh = rep == 0 and plan_id in leaders
                runs.results[plan_id].append(built[plan_id].generate(ids, max_new_tokens, seeded, reuse_prompt=not fresh))
                after = calibration.measure()  # the reference right after every run; the one before is the last round
                runs.around[plan_id].append((k, [after - 1, after]))
                step(1)
    return runs


def _leads(plans: int, prompts: int) -> list[int]:
    """The prompt each plan leads: runs first on, feeding it afresh, so that every plan has a
    measured prefill. Plan i leads prompt i + 1 (cyclically): the warm-up's prompt, 0, which the
    others reuse, is led only where there are at least as many plans as prompts.

    >>> _leads(2, 3), _leads(3, 3), _leads(3, 1)
    ([1, 2], [1, 2, 0], [0, 0, 0])
    """
    return [(i + 1) % prompts for i in range(plans)]


@dataclass
class _Comparison:
    """A validation's runs beside what the profile predicts for them: generations of
    ``max_new_tokens`` tokens, as they are run (the last round cut short), at each prompt's context."""

    profile: Profile
    acceptance: AcceptanceModel
    contexts: list[int]
    max_new_tokens: int
    calibration: Calibration
    runs: _Runs

    def predicted(self, plan: RankedPlan) -> Prediction:
        """The median over the prompts' contexts, from the profile as measured."""
        return predict_over(self.profile, plan.plan.chain, plan.plan.widths, self.acceptance, self.contexts, self.max_new_tokens)

    def calibrated_ms(self, plan: RankedPlan) -> float:
        """The median over the plan's runs of the prediction from the profile scaled by the drift
        of the reference rounds around each run, at its prompt's context."""
        return statistics.median(
            predict_over(
                self.calibration.apply(self.profile, at),
                plan.plan.chain,
                plan.plan.widths,
                self.acceptance,
                [self.contexts[k]],
                self.max_new_tokens,
            ).ms_per_token
            for (k, at), r in zip(self.runs.around[plan.id], self.runs.results[plan.id])
            if r.tokens
        )

    def results(self, plans: list[RankedPlan]) -> list[PlanResult]:
        """Every plan's predictions against its measurements; speed-ups over the autoregressive plan run beside it."""
        auto = next(p for p in plans if not p.plan.depth)
        predicted = {p.id: self.predicted(p) for p in plans}
        calibrated = {p.id: self.calibrated_ms(p) for p in plans}
        runs = self.runs.results
        out = []
        for ranked in plans:
            plan, mine = ranked.plan, runs[ranked.id]
            levels = level_results(self.profile, plan, mine, self.acceptance)
            interval = _speedup_interval(runs[auto.id], mine, len(self.contexts))
            out.append(
                plan_result(
                    ranked.id,
                    ranked.kind,
                    plan,
                    (predicted[ranked.id], predicted[auto.id]),
                    (mine, runs[auto.id]),
                    levels,
                    measured_speedup_interval=interval,
                    tied=ranked.tied,
                    calibrated_ms_per_token=calibrated[ranked.id],
                    calibrated_speedup=calibrated[auto.id] / calibrated[ranked.id],
                )
            )
        return out


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
    ms = _median_ms(runs)
    return PlanResult(
        plan_id=plan_id,
        kind=kind,
        plan=Plan(plan.chain, plan.widths, Prediction(mine.ms_per_token, mine.mean_accepted_length, auto.ms_per_token / mine.ms_per_token)),
        measured_ms_per_token=ms,
        measured_mean_accepted_length=sum(r.total_tokens for r in runs) / sum(len(c) for r in runs for c in r.committed),
        measured_speedup=_median_ms(auto_runs) / ms,
        # the prefills that fed their prompt (a repeat of a prompt reuses its cached prefill)
        prefill_ms=statistics.median(1000 * r.prefill_s for r in runs if r.levels[-1].prefill_tokens),
        tokens=sum(r.total_tokens for r in runs),
        levels=levels,
        **extra,
    )


def _median_ms(results: list[GenerationResult]) -> float:
    return statistics.median(r.ms_per_token for r in results if r.total_tokens)


def _report(solve: SolveRecord, prompts: str, contexts: list[int], results: list[PlanResult], calibration: Calibration) -> ValidationReport:
    """The validation's report, not yet stored; the solver's pick is its best plan when it was
    run, else the lowest prediction among those run."""
    pick = next((p for p in results if p.kind == "best"), None) or min(results, key=lambda p: p.plan.prediction.ms_per_token)
    return ValidationReport(
        validation_id=0,
        solve_id=solve.id,
        target=solve.target,
        workload=solve.workload.name,
        prompts=prompts,
        prompt_count=len(contexts),
        context_len=int(statistics.median(contexts)),
        context_lens=contexts,
        mode=solve.setting.mode,
        lenience=solve.setting.lenience,
        acceptance=solve.acceptance_model,
        plans=results,
        pick=cast(int, pick.plan_id),
        calibration=calibration.record(),
    )


def _calibration(profile: Profile, loader: ModelLoader, plans: list[RankedPlan], context_len: int) -> Calibration:
    """Reference timers for the target and every model the plans run (the n-gram lookup has none)."""
    names = [profile.target] + sorted({n for p in plans for n in p.plan.chain if n != profile.target and not profile.model(n).lookup})
    return Calibration(profile, {name: PassTimer(loader.load(name).model, context_len) for name in names}, context_len)


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
    engine: Engine, solve: SolveRecord, prompts: PromptSet, max_new_tokens: int, repeats: int, results: list[PlanResult], **summary: Any
) -> int:
    """Store a validation of ``solve``: its ``summary`` figures (those of :class:`ValidationEntry`
    it has; the rest None) and every plan's run; return its id."""
    absent = {k: None for k in ValidationEntry.__dataclass_fields__}
    run = {"solve_id": solve.id, "prompts_name": prompts.name, "prompts": len(prompts.prompts), "max_new_tokens": max_new_tokens}
    entry = ValidationEntry(**(absent | run | {"repeats": repeats} | summary))
    fields = ValidationRunEntry.__dataclass_fields__
    runs = [ValidationRunEntry(**{k: v for k, v in r.to_dict().items() if k in fields}) for r in results]
    return save_validation(engine, entry, runs)


def _speedup_interval(auto: list[GenerationResult], runs: list[GenerationResult], prompts: int) -> tuple[float, float] | None:
    """The 90% interval of the measured speed-up over bootstrap resamples of the prompts.

    ``auto`` and ``runs`` hold each prompt's repeats in order (prompt-major, as run).
    """
    per = len(runs) // prompts
    a = [_median_ms(auto[k * per : (k + 1) * per]) for k in range(prompts)]
    b = [_median_ms(runs[k * per : (k + 1) * per]) for k in range(prompts)]
    return bootstrap_interval(
        list(range(prompts)), lambda drawn: statistics.median(a[k] for k in drawn) / statistics.median(b[k] for k in drawn)
    )
