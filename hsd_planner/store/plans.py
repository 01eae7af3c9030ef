"""A stored plan read back with the solve it came from: the solve's options, machine, workload and profile."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime.terms.shape import Width

from ..choices import PlanKind
from ..errors import ChainError, StoreError
from ..plan import Plan, Prediction, Profile, widths_from_json
from .profiles import load_solve_profile
from .records import RankedPlan, SolveRecord
from .schema import PlanRow, Solve
from .solves import solve_record

__all__ = ["SolvedPlan", "load_plan", "ranked_plan", "stored_widths"]


@dataclass(frozen=True)
class SolvedPlan:
    """One plan of a stored solve, the solve (its options and rows) and the profile it read."""

    plan_id: int
    plan: Plan  # as stored: chain, widths and the prediction the solve printed
    solve: SolveRecord
    profile: Profile
    contexts: int | list[int]  # what the solve read the cost curves at


def stored_widths(values: Sequence[int | str]) -> list[Width]:
    """A stored plan's widths, trees as TreeShape; a StoreError when one cannot be read back."""
    try:
        return widths_from_json(values)
    except ChainError as exc:
        raise StoreError(f"a stored plan has a width that cannot be read back: {exc}") from None


def ranked_plan(row: PlanRow) -> RankedPlan:
    """A stored plan row as a typed record: its id, solve, kind, plan, interval and batch size."""
    interval = (row.speedup_lo, row.speedup_hi) if row.speedup_lo is not None and row.speedup_hi is not None else None
    prediction = Prediction(row.predicted_ms_per_token, row.predicted_mean_accepted_length, row.predicted_speedup)
    plan = Plan(tuple(row.chain), tuple(stored_widths(row.widths)), prediction)
    return RankedPlan(row.id, row.solve_id, cast(PlanKind, row.kind), plan, interval, row.tied, row.batch_size)


def load_plan(db: Engine, plan_id: int | None = None) -> SolvedPlan:
    """Plan ``plan_id`` (None: the pick of the newest solve) with its solve and the solve's profile."""
    with Session(db) as s:
        if plan_id is None:
            ranked = select(PlanRow).join(Solve).where(PlanRow.kind != "schedule")
            row = s.scalars(ranked.order_by(Solve.id.desc(), PlanRow.rank)).first()
            if row is None:
                raise StoreError("there is no plan in the database; run hsd-plan solve first")
        else:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"no plan with id {plan_id}; see hsd-plan solve for plan ids")
        plan = ranked_plan(row).plan
        plan_id, solve_id = row.id, row.solve_id
    solve = solve_record(db, solve_id)
    profile, source = load_solve_profile(db, solve_id)
    return SolvedPlan(plan_id, plan, solve, profile, _contexts(source.contexts, solve.context_len))


def _contexts(recorded: list[int] | None, context_len: int) -> int | list[int]:
    """The contexts the solve read its costs at: a solve over the workload's own contexts stores
    their median (see :func:`~hsd_planner.solving.solve_and_store`), one at a named context stores
    that context."""
    if recorded and int(statistics.median(recorded)) == context_len:
        return recorded
    return context_len
