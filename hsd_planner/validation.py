"""``hsd-plan validate``: run solved plans on held-out prompts and compare with the prediction.

For each plan: measured ms per generated token (decode only, median over prompts and repeats;
prefill reported apart), the prediction of the latency model (median over the prompts of the
prediction at each prompt's context: its length plus half the continuation),
error = (predicted - measured) / measured, measured speed-up over the target's own
autoregressive decoding run in the same validation, and mean accepted length per level, predicted
and measured. Overall: the median absolute error and the regret, the measured latency of the
solver's pick over the best measured among the plans run.

The error compares a profile measured at one time with runs at another, so it includes any
change of the machine's speed in between (on a shared 2-core host, 10-25% from one minute to the
next). The speed-up error, predicted over measured speed-up against autoregressive decoding minus
one, divides that out: both speed-ups are ratios taken within one run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime import HSDError, ModelLoader, SamplingConfig, build_hierarchy

from .generation import encode_prompt
from .latency import Prediction, expected_run_tokens
from .planner import Profile, predict
from .profile_db import load_profile
from .store import Hardware, ModelRow, PlanRow, Setting, Solve, StoreError, Validation, ValidationRun, Workload
from .workloads import PromptSet

__all__ = ["CANDIDATE_SETS", "select_plans", "run_validation", "predict_over"]

CANDIDATE_SETS = {
    "best": ("best", "single1"),  # the solver's pick and the best single drafter
    "top-k": ("best", "top"),
    "singles": ("single",),
    "all": ("best", "top", "single"),
}


def select_plans(engine: Engine, plan_ids: tuple[int, ...], candidates: str) -> tuple[Solve, list[PlanRow]]:
    """The plans to run (the solve's autoregressive baseline always included)."""
    with Session(engine, expire_on_commit=False) as s:
        if plan_ids:
            rows = [s.get(PlanRow, i) for i in plan_ids]
            missing = [i for i, r in zip(plan_ids, rows) if r is None]
            if missing:
                raise StoreError(f"no plan with id {missing[0]}; see hsd-plan solve for plan ids")
            solve = s.get(Solve, rows[0].solve_id)
        else:
            solve = s.scalars(select(Solve).order_by(Solve.id.desc())).first()
            if solve is None:
                raise StoreError("there is no plan in the database; run hsd-plan solve first")
            all_rows = s.scalars(select(PlanRow).filter_by(solve_id=solve.id).order_by(PlanRow.rank)).all()
            kinds = CANDIDATE_SETS[candidates]
            singles = [r for r in all_rows if r.kind == "single"]
            rows = [r for r in all_rows if r.kind in kinds] + (singles[:1] if "single1" in kinds else [])
        auto = s.scalars(select(PlanRow).filter_by(solve_id=solve.id, kind="autoregressive")).first()
        seen, plans = set(), []
        for r in [*rows, auto]:
            key = (tuple(r.chain), tuple(r.widths))
            if key not in seen:
                seen.add(key)
                plans.append(r)
        return solve, plans


def run_validation(
    engine: Engine,
    loader: ModelLoader,
    solve: Solve,
    plans: list[PlanRow],
    prompts: PromptSet,
    max_new_tokens: int,
    repeats: int,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Run every plan on every prompt ``repeats`` times, store the validation, return a report."""
    step = progress or (lambda _n: None)
    with Session(engine) as s:
        setting = s.get(Setting, solve.setting_id)
        target = s.get(ModelRow, solve.target_id).spec
        workload = s.get(Workload, solve.workload_id).name
        hardware = s.get(Hardware, solve.hardware_id).fingerprint
    profile, _ = load_profile(engine, target, workload, setting.mode, setting.temperature, hardware)
    sampling = SamplingConfig(mode=setting.mode, temperature=setting.temperature, top_p=setting.top_p)
    built = {}
    for plan in plans:
        try:
            built[plan.id] = build_hierarchy(plan.chain, plan.widths, loader)[0]
        except HSDError as exc:
            raise StoreError(f"plan {plan.id} ({','.join(plan.chain)}) cannot be run: {exc}") from None
    tokenizer = loader.load(target).tokenizer
    encoded = [encode_prompt(tokenizer, p) for p in prompts.prompts]
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    for h in built.values():  # warm-up, untimed
        h.generate(encoded[0], 4, sampling)

    runs: dict[int, list] = {p.id: [] for p in plans}
    for k, ids in enumerate(encoded):
        for rep in range(repeats):
            seed = 1000 * k + rep
            for plan in plans:  # interleaved, so that drift of the machine hits every plan alike
                runs[plan.id].append(built[plan.id].generate(ids, max_new_tokens, sampling.model_copy(update={"seed": seed})))
                step(1)

    report_plans = []
    for plan in plans:
        results = runs[plan.id]
        measured = statistics.median(r.ms_per_token for r in results if r.tokens)
        pred = predict_over(profile, plan.chain, plan.widths, solve.acceptance_model, contexts)
        report_plans.append({
            "plan_id": plan.id,
            "kind": plan.kind,
            "chain": list(plan.chain),
            "widths": list(plan.widths),
            "predicted_ms_per_token": pred.ms_per_token,
            "measured_ms_per_token": measured,
            "error": (pred.ms_per_token - measured) / measured,
            "predicted_mean_accepted_length": pred.mean_accepted_length,
            "measured_mean_accepted_length": sum(len(r.tokens) for r in results) / sum(r.target_rounds for r in results),
            "prefill_ms": statistics.median(1000 * r.prefill_s for r in results),
            "tokens": sum(len(r.tokens) for r in results),
            "levels": _levels(profile, plan, results, solve.acceptance_model),
        })
    auto = next(p for p in report_plans if len(p["chain"]) == 1)
    for p in report_plans:
        p["measured_speedup"] = auto["measured_ms_per_token"] / p["measured_ms_per_token"]
        p["predicted_speedup"] = auto["predicted_ms_per_token"] / p["predicted_ms_per_token"]
        p["speedup_error"] = p["predicted_speedup"] / p["measured_speedup"] - 1.0
    # the solver's pick: its best plan when it was run, else the lowest prediction among those run
    pick = next((p for p in report_plans if p["kind"] == "best"), None) or min(report_plans, key=lambda p: p["predicted_ms_per_token"])
    best_measured = min(p["measured_ms_per_token"] for p in report_plans)
    report = {
        "solve_id": solve.id,
        "target": target,
        "workload": workload,
        "prompts": prompts.name,
        "prompt_count": len(encoded),
        "context_len": int(statistics.median(contexts)),
        "context_lens": contexts,
        "mode": setting.mode,
        "acceptance": solve.acceptance_model,
        "median_abs_error": statistics.median(abs(p["error"]) for p in report_plans),
        "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in report_plans if p is not auto) if len(report_plans) > 1 else 0.0,
        "regret": pick["measured_ms_per_token"] / best_measured - 1.0,
        "pick": pick["plan_id"],
        "plans": report_plans,
    }
    report["validation_id"] = _store(engine, solve, prompts, max_new_tokens, repeats, report)
    return report


def predict_over(profile: Profile, chain: list[str], widths: list[int], acceptance: str, contexts: list[int]) -> Prediction:
    """The prediction with the median ms per token over prompts at the given context lengths."""
    preds = [predict(profile, chain, widths, acceptance, c) for c in contexts]
    ms = statistics.median(p.ms_per_token for p in preds)
    return Prediction(ms, preds[0].mean_accepted_length, statistics.median(p.speedup for p in preds))


def _levels(profile, plan: PlanRow, results, acceptance: str) -> list[dict]:
    """Per level: forward passes and acceptance, and tokens per round predicted vs measured."""
    pairs = profile.pairs(acceptance)
    out = []
    for k, name in enumerate(plan.chain):
        stats = [r.levels[k] for r in results]
        entry = {
            "model": name,
            "forward_passes": sum(x.forward_passes for x in stats),
            "proposed": sum(x.proposed for x in stats),
            "accepted": sum(x.accepted for x in stats),
            "time_s": sum(x.time_s for x in stats),
        }
        if k > 0:
            below = [r.levels[k - 1] for r in results]
            rounds = sum(x.forward_passes for x in stats) or 1
            entry["measured_tokens_per_round"] = (sum(x.accepted for x in below) + rounds) / rounds
            runs = pairs.get((plan.chain[k - 1], name))
            entry["predicted_tokens_per_round"] = expected_run_tokens(runs, plan.widths[k - 1]) if runs else None
        out.append(entry)
    return out


def _store(engine: Engine, solve: Solve, prompts: PromptSet, max_new_tokens: int, repeats: int, report: dict) -> int:
    with Session(engine) as s, s.begin():
        v = Validation(
            solve_id=solve.id, prompts_name=prompts.name, prompts=len(prompts.prompts), max_new_tokens=max_new_tokens,
            repeats=repeats, median_abs_error=report["median_abs_error"], regret=report["regret"],
            median_abs_speedup_error=report["median_abs_speedup_error"],
        )
        s.add(v)
        s.flush()
        for p in report["plans"]:
            s.add(ValidationRun(
                validation_id=v.id, plan_id=p["plan_id"], chain=p["chain"], widths=p["widths"],
                predicted_ms_per_token=p["predicted_ms_per_token"], measured_ms_per_token=p["measured_ms_per_token"],
                error=p["error"], measured_speedup=p["measured_speedup"],
                predicted_mean_accepted_length=p["predicted_mean_accepted_length"],
                measured_mean_accepted_length=p["measured_mean_accepted_length"], prefill_ms=p["prefill_ms"],
                tokens=p["tokens"], levels=p["levels"],
            ))
        return v.id
