"""``hsd-plan solve``: solve on the stored profile and store the ranked plans."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from .planner import best_singles, solve
from .profile_db import load_profile
from .solver import Plan
from .store import ModelRow, PlanRow, Solve
from .store.repo import get_or_create

__all__ = ["solve_and_store", "plan_dict", "format_chain"]


def format_chain(chain: list[str], widths: list[int]) -> str:
    """``ngram[4] -> m:layers=8[2] -> m``: each drafter with its width, then the target.

    >>> format_chain(["ngram", "t"], [4])
    'ngram[4] -> t'
    """
    return " -> ".join([f"{m}[{w}]" for m, w in zip(chain, widths)] + [chain[-1]])


def plan_dict(plan: Plan, kind: str, plan_id: int | None = None) -> dict:
    p = plan.prediction
    return {
        "id": plan_id,
        "kind": kind,
        "chain": list(plan.chain),
        "widths": list(plan.widths),
        "predicted_ms_per_token": p.ms_per_token,
        "predicted_mean_accepted_length": p.mean_accepted_length,
        "predicted_speedup": p.speedup,
    }


def solve_and_store(
    engine: Engine,
    target: str | None = None,
    workload: str | None = None,
    mode: str = "greedy",
    temperature: float = 1.0,
    acceptance: str = "empirical",
    top_k: int = 5,
    t_max: int = 8,
    max_depth: int | None = None,
    context_len: int = 256,
    exclude: tuple[str, ...] = (),
    require: tuple[str, ...] = (),
) -> dict:
    """Solve on the newest matching profile, store the solve and its plans, return a report."""
    profile, source = load_profile(engine, target, workload, mode, temperature)
    solution = solve(
        profile, t_max=t_max, top_k=top_k, max_depth=max_depth, acceptance=acceptance, context_len=context_len,
        exclude=exclude, require=require,
    )
    ranked = [(p, "best" if i == 0 else "top") for i, p in enumerate(solution.top)]
    singles = [p for p in best_singles(profile, t_max, acceptance, context_len) if p.chain[0] not in exclude]
    extra = [(p, "single") for p in singles] + [(solution.autoregressive, "autoregressive")]
    with Session(engine) as s, s.begin():
        target_id = get_or_create(s, ModelRow, {"spec": source.target}, parameters=0).id
        row = Solve(
            target_id=target_id, workload_id=source.workload_id, setting_id=source.setting_id, hardware_id=source.hardware_id,
            acceptance_model=acceptance, t_max=t_max, max_depth=max_depth, context_len=context_len,
        )
        s.add(row)
        s.flush()
        out = []
        for rank, (plan, kind) in enumerate(ranked + [x for x in extra if x[0] is not None]):
            p = plan.prediction
            pr = PlanRow(
                solve_id=row.id, rank=rank, kind=kind, chain=list(plan.chain), widths=list(plan.widths),
                predicted_ms_per_token=p.ms_per_token, predicted_mean_accepted_length=p.mean_accepted_length, predicted_speedup=p.speedup,
            )
            s.add(pr)
            s.flush()
            out.append(plan_dict(plan, kind, pr.id))
        solve_id = row.id
    best = out[0]
    return {
        "solve_id": solve_id,
        "target": source.target,
        "workload": source.workload,
        "hardware": source.hardware,
        "mode": mode,
        "temperature": temperature if mode == "sample" else None,
        "acceptance": acceptance,
        "context_len": context_len,
        **{k: best[k] for k in ("chain", "widths", "predicted_ms_per_token", "predicted_mean_accepted_length", "predicted_speedup")},
        "plans": out,
    }
