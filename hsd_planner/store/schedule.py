"""A solve's best chain per batch size (``hsd-plan solve --batch-sizes``): storing and reading back
the schedule a server switches plans by, as the solve's plans of kind ``schedule`` (one per batch
size, rank 0). The solving itself is :mod:`hsd_planner.solving.batch`."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..plan import Plan
from .plans import ranked_plan
from .records import RankedPlan
from .schema import PlanRow, Solve

__all__ = ["load_batch_plans", "save_batch_plans"]


def save_batch_plans(db: Engine, solve_id: int, best: Sequence[tuple[int, Plan]]) -> list[RankedPlan]:
    """Store ``best`` (batch size, its best plan predicted per sequence) as solve ``solve_id``'s
    schedule, replacing the one it had, in one transaction; return the plans as stored."""
    with Session(db) as s, s.begin():
        if s.get(Solve, solve_id) is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        s.execute(delete(PlanRow).where(PlanRow.solve_id == solve_id, PlanRow.kind == "schedule"))
        stored = []
        for b, plan in sorted(best, key=lambda entry: entry[0]):
            row = PlanRow(solve_id=solve_id, batch_size=b, rank=0, kind="schedule", **plan.to_dict())
            s.add(row)
            s.flush()
            stored.append(RankedPlan(row.id, solve_id, "schedule", plan, batch_size=b))
        return stored


def load_batch_plans(db: Engine, solve_id: int) -> list[RankedPlan]:
    """The schedule stored with solve ``solve_id``, by batch size (empty: a solve at batch size 1 only)."""
    with Session(db) as s:
        if s.get(Solve, solve_id) is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        rows = s.scalars(select(PlanRow).filter_by(solve_id=solve_id, kind="schedule").order_by(PlanRow.batch_size)).all()
        return [ranked_plan(r) for r in rows]
