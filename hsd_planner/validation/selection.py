"""Which plans a validation runs: plans named by id (one solve's), or a set of the newest solve's
(``--candidates``), the solve's autoregressive plan always among them as the baseline."""

from __future__ import annotations

from ..choices import PlanKind
from ..errors import StoreError
from ..plan import widths_to_json
from ..store import Engine
from ..store.records import RankedPlan, SolveRecord
from ..store.solves import newest_solve, solve_record
from ..store.validations import plans_by_id, plans_of_solve

__all__ = ["CANDIDATE_SETS", "select_plans"]

# which plans of a solve ``--candidates`` runs: (kinds run in full, how many best single drafters
# besides: None for all); the solve's autoregressive plan always runs as the baseline
CANDIDATE_SETS: dict[str, tuple[tuple[PlanKind, ...], int | None]] = {
    "best": (("best",), 1),  # the solver's pick and the best single drafter
    "top-k": (("best", "top"), 0),
    "singles": ((), None),
    "all": (("best", "top"), None),
}


def select_plans(db: Engine, plan_ids: tuple[int, ...], candidates: str) -> tuple[SolveRecord, list[RankedPlan]]:
    """The plans to run (the solve's autoregressive baseline always included)."""
    if plan_ids:
        rows = plans_by_id(db, plan_ids)
        solves = sorted({r.solve_id for r in rows})
        if len(solves) > 1:
            raise StoreError(
                f"plans {', '.join(map(str, plan_ids))} come from different solves ({', '.join(map(str, solves))}); validate one solve's plans at a time"
            )
        solve = solve_record(db, solves[0])
        all_rows = plans_of_solve(db, solve.id)
    else:
        solve = newest_solve(db)
        all_rows = plans_of_solve(db, solve.id)
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
