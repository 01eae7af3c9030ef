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

import random
import statistics
from collections.abc import Callable
from dataclasses import replace

from hsd_runtime import HSDError, ModelLoader, SamplingConfig, build_hierarchy
from hsd_runtime.shape import Width

from ..errors import StoreError
from ..plan import Profile, predict_over, tokens_per_round
from ..profiling.sources import check_source
from ..profiling.timing import PassTimer
from ..prompts import PromptSet, encode_prompt
from ..store import Engine
from ..store.reader import load_profile
from ..store.records import PlanRecord, SolveRecord
from ..store.solves import widths_to_json
from ..store.validations import (
    ValidationEntry,
    ValidationRunEntry,
    model_sources,
    newest_solve,
    plans_by_id,
    plans_of_solve,
    save_validation,
    solve_record,
)
from ..vocab import AcceptanceModel, PlanKind
from .calibration import Calibration
from .report import LevelResult, PlanResult, ValidationReport

__all__ = ["CANDIDATE_SETS", "run_validation", "select_plans"]

# which plans of a solve ``--candidates`` runs: (kinds run in full, how many best single drafters
# besides: None for all); the solve's autoregressive plan always runs as the baseline
CANDIDATE_SETS: dict[str, tuple[tuple[PlanKind, ...], int | None]] = {
    "best": (("best",), 1),  # the solver's pick and the best single drafter
    "top-k": (("best", "top"), 0),
    "singles": ((), None),
    "all": (("best", "top"), None),
}


def select_plans(engine: Engine, plan_ids: tuple[int, ...], candidates: str) -> tuple[SolveRecord, list[PlanRecord]]:
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
        key = (tuple(r.chain), tuple(widths_to_json(r.widths)))
        if key not in seen:
            seen.add(key)
            plans.append(r)
    return solve, plans


def run_validation(
    engine: Engine,
    loader: ModelLoader,
    solve: SolveRecord,
    plans: list[PlanRecord],
    prompts: PromptSet,
    max_new_tokens: int,
    repeats: int,
    progress: Callable[[int], None] | None = None,
) -> ValidationReport:
    """Run every plan on every prompt ``repeats`` times, store the validation, return a report."""
    step = progress or (lambda _n: None)
    setting, target, workload = solve.setting, solve.target, solve.workload
    loader = loader.with_kernels(solve.hardware.kernels or "plain")  # the plans run on the kernels their latencies were measured with
    profile, _ = load_profile(engine, target, workload, setting.mode, setting.temperature, solve.hardware.fingerprint)
    sampling = SamplingConfig(mode=setting.mode, temperature=setting.temperature, top_p=setting.top_p)
    stored = model_sources(engine)
    for spec in {name for plan in plans for name in plan.chain}:
        check_source(spec, stored.get(spec))
    widths = {plan.id: plan.widths for plan in plans}  # a stored tree "3x2x1" as a TreeShape
    built = {}
    for plan in plans:
        try:
            built[plan.id] = build_hierarchy(plan.chain, widths[plan.id], loader)[0]
        except HSDError as exc:
            raise StoreError(f"plan {plan.id} ({','.join(plan.chain)}) cannot be run: {exc}") from None
    tokenizer = loader.load(target).tokenizer
    encoded = [encode_prompt(tokenizer, p) for p in prompts.prompts]
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    calibration = _calibration(profile, loader, plans, int(statistics.median(contexts)))
    calibration.measure(rounds=3)  # before the plans run
    for h in built.values():  # warm-up, untimed
        h.generate(encoded[0], 4, sampling)

    runs: dict[int, list] = {p.id: [] for p in plans}
    around: dict[int, list[tuple[int, list[int]]]] = {p.id: [] for p in plans}  # per run: its prompt, the reference rounds around it
    for k, ids in enumerate(encoded):
        for rep in range(repeats):
            seed = 1000 * k + rep
            for plan in plans:  # interleaved, so that drift of the machine hits every plan alike
                runs[plan.id].append(built[plan.id].generate(ids, max_new_tokens, sampling.model_copy(update={"seed": seed})))
                after = calibration.measure()  # the reference right after every run; the one before is the last round
                around[plan.id].append((k, [after - 1, after]))
                step(1)

    measured = {p.id: statistics.median(r.ms_per_token for r in runs[p.id] if r.tokens) for p in plans}
    # predicted for generations of max_new_tokens, as they are run (the last round cut short)
    predicted = {p.id: predict_over(profile, p.chain, widths[p.id], solve.acceptance_model, contexts, max_new_tokens) for p in plans}
    # per run: the profile scaled by the drift of the reference rounds around it, at its prompt's context
    calibrated = {
        p.id: statistics.median(
            predict_over(
                calibration.apply(profile, at), p.chain, widths[p.id], solve.acceptance_model, [contexts[k]], max_new_tokens
            ).ms_per_token
            for (k, at), r in zip(around[p.id], runs[p.id])
            if r.tokens
        )
        for p in plans
    }
    auto = next(p.id for p in plans if len(p.chain) == 1)
    results = [
        PlanResult(
            plan_id=plan.id,
            kind=plan.kind,
            chain=list(plan.chain),
            widths=widths[plan.id],
            predicted_ms_per_token=predicted[plan.id].ms_per_token,
            measured_ms_per_token=measured[plan.id],
            predicted_mean_accepted_length=predicted[plan.id].mean_accepted_length,
            measured_mean_accepted_length=sum(len(r.tokens) for r in runs[plan.id]) / sum(r.target_rounds for r in runs[plan.id]),
            predicted_speedup=predicted[auto].ms_per_token / predicted[plan.id].ms_per_token,
            measured_speedup=measured[auto] / measured[plan.id],
            prefill_ms=statistics.median(1000 * r.prefill_s for r in runs[plan.id]),
            tokens=sum(len(r.tokens) for r in runs[plan.id]),
            levels=_levels(profile, plan.chain, widths[plan.id], runs[plan.id], solve.acceptance_model),
            measured_speedup_interval=_speedup_interval(runs[auto], runs[plan.id], len(encoded)),
            tied=plan.tied,
            calibrated_ms_per_token=calibrated[plan.id],
            calibrated_speedup=calibrated[auto] / calibrated[plan.id],
        )
        for plan in plans
    ]
    # the solver's pick: its best plan when it was run, else the lowest prediction among those run
    pick = next((p for p in results if p.kind == "best"), None) or min(results, key=lambda p: p.predicted_ms_per_token)
    report = ValidationReport(
        validation_id=0,
        solve_id=solve.id,
        target=target,
        workload=workload,
        prompts=prompts.name,
        prompt_count=len(encoded),
        context_len=int(statistics.median(contexts)),
        context_lens=contexts,
        mode=setting.mode,
        acceptance=solve.acceptance_model,
        plans=results,
        pick=pick.plan_id,
        calibration=calibration.to_dict(),
    )
    return replace(report, validation_id=_store(engine, solve, prompts, max_new_tokens, repeats, report))


def _calibration(profile: Profile, loader: ModelLoader, plans: list[PlanRecord], context_len: int) -> Calibration:
    """Reference timers for the target and every model the plans run (the n-gram lookup has none)."""
    names = [profile.target] + sorted({n for p in plans for n in p.chain if n != profile.target and not profile.model(n).lookup})
    return Calibration(profile, {name: PassTimer(loader.load(name).model, context_len) for name in names}, context_len)


def _levels(profile: Profile, chain: list[str], widths: list[Width], results: list, acceptance: AcceptanceModel) -> list[LevelResult]:
    """Per level: forward passes and acceptance, and tokens per round predicted vs measured."""
    predicted_rounds = tokens_per_round(profile, chain, widths, acceptance)  # E[X] per level, trees included
    out = []
    for k, name in enumerate(chain):
        stats = [r.levels[k] for r in results]
        measured = None
        if k > 0:
            below = [r.levels[k - 1] for r in results]
            rounds = sum(x.forward_passes for x in stats) or 1
            measured = (sum(x.accepted for x in below) + rounds) / rounds
        out.append(
            LevelResult(
                model=name,
                forward_passes=sum(x.forward_passes for x in stats),
                proposed=sum(x.proposed for x in stats),
                accepted=sum(x.accepted for x in stats),
                measured_tokens_per_round=measured,
                predicted_tokens_per_round=predicted_rounds[k],
                **{key: sum(getattr(x, key) for x in stats) for key in ("time_s", "forward_s", "cache_s", "draft_s", "verify_s")},
            )
        )
    return out


def _store(engine: Engine, solve: SolveRecord, prompts: PromptSet, max_new_tokens: int, repeats: int, report: ValidationReport) -> int:
    entry = ValidationEntry(
        solve_id=solve.id,
        prompts_name=prompts.name,
        prompts=len(prompts.prompts),
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        median_abs_error=report.median_abs_error,
        regret=report.regret,
        median_abs_speedup_error=report.median_abs_speedup_error,
        median_abs_error_calibrated=report.median_abs_error_calibrated,
        median_abs_speedup_error_calibrated=report.median_abs_speedup_error_calibrated,
        calibration=report.calibration,
    )
    runs = [
        ValidationRunEntry(
            plan_id=p.plan_id,
            chain=p.chain,
            widths=widths_to_json(p.widths),
            predicted_ms_per_token=p.predicted_ms_per_token,
            calibrated_ms_per_token=p.calibrated_ms_per_token,
            measured_ms_per_token=p.measured_ms_per_token,
            error=p.error,
            measured_speedup=p.measured_speedup,
            predicted_mean_accepted_length=p.predicted_mean_accepted_length,
            measured_mean_accepted_length=p.measured_mean_accepted_length,
            prefill_ms=p.prefill_ms,
            tokens=p.tokens,
            levels=[lv.to_dict() for lv in p.levels],
        )
        for p in report.plans
    ]
    return save_validation(engine, entry, runs)


def _speedup_interval(auto: list, runs: list, prompts: int, resamples: int = 200, seed: int = 0) -> tuple[float, float] | None:
    """5th-95th percentile of the measured speed-up over bootstrap resamples of the prompts.

    ``auto`` and ``runs`` hold each prompt's repeats in order (prompt-major, as run).
    """
    if prompts < 2:
        return None
    per = len(runs) // prompts

    def ms(results: list, k: int) -> float:
        return statistics.median(r.ms_per_token for r in results[k * per : (k + 1) * per] if r.tokens)

    a = [ms(auto, k) for k in range(prompts)]
    b = [ms(runs, k) for k in range(prompts)]
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        drawn = [rng.randrange(prompts) for _ in range(prompts)]
        ratios.append(statistics.median(a[k] for k in drawn) / statistics.median(b[k] for k in drawn))
    ratios.sort()
    return ratios[int(0.05 * (resamples - 1))], ratios[int(0.95 * (resamples - 1))]
