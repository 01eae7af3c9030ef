"""A solve's best chain per batch size (``hsd-plan solve --batch-sizes``): storing and reading back
the schedule a server switches plans by. The solving itself is :mod:`hsd_planner.solving.batch`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..plan import Plan, Prediction
from .schema import BatchPlanRow, Solve
from .upsert import upsert

__all__ = ["BatchEntry", "load_batch_plans", "save_batch_plans"]


@dataclass(frozen=True)
class BatchEntry:
    """The best chain at one batch size, predicted per sequence."""

    batch_size: int
    plan: Plan


def save_batch_plans(engine: Engine, solve_id: int, entries: Sequence[BatchEntry]) -> None:
    """Store ``entries`` as solve ``solve_id``'s best chain per batch size, replacing what it had:
    one transaction, each row upserted on its key (solve, batch size)."""
    with Session(engine) as s, s.begin():
        sizes = [e.batch_size for e in entries]
        s.execute(delete(BatchPlanRow).where(BatchPlanRow.solve_id == solve_id, BatchPlanRow.batch_size.not_in(sizes)))
        for e in entries:
            upsert(s, BatchPlanRow, {"solve_id": solve_id, "batch_size": e.batch_size}, e.plan.to_dict())


def load_batch_plans(engine: Engine, solve_id: int) -> list[BatchEntry]:
    """The best chain per batch size stored with solve ``solve_id`` (empty: a solve at batch size 1 only)."""
    with Session(engine) as s:
        if s.get(Solve, solve_id) is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        rows = s.scalars(select(BatchPlanRow).filter_by(solve_id=solve_id).order_by(BatchPlanRow.batch_size)).all()
        return [
            BatchEntry(
                r.batch_size,
                Plan(
                    tuple(r.chain),
                    tuple(int(w) for w in r.widths),
                    Prediction(r.predicted_ms_per_token, r.predicted_mean_accepted_length, r.predicted_speedup),
                ),
            )
            for r in rows
        ]
