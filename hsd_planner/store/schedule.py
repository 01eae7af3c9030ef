"""A solve's best chain per batch size (``hsd-plan solve --batch-sizes``): solving, storing and
reading back the schedule a server switches plans by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..plan import Plan, Prediction, SolveConfig
from ..plan.batch import ScheduleRange, schedule_of, solve_batches, stops_paying
from ..plan.config import DEFAULT_CONTEXT
from .reader import load_solve_profile
from .schema import BatchPlanRow, Solve

__all__ = ["BatchEntry", "BatchSolveReport", "load_batch_plans", "solve_batch_schedule"]


@dataclass(frozen=True)
class BatchEntry:
    """The best chain at one batch size, predicted per sequence."""

    batch_size: int
    plan: Plan

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of the whole batch."""
        return 1000.0 * self.batch_size / self.plan.prediction.ms_per_token

    def to_dict(self) -> dict:
        p = self.plan.prediction
        return {
            "batch_size": self.batch_size,
            "chain": list(self.plan.chain),
            "widths": list(self.plan.widths),
            "predicted_ms_per_token": p.ms_per_token,
            "predicted_mean_accepted_length": p.mean_accepted_length,
            "predicted_speedup": p.speedup,
            "predicted_tokens_per_s": self.tokens_per_s,
        }


@dataclass(frozen=True)
class BatchSolveReport:
    """A solve's best chain per batch size and the schedule they make."""

    solve_id: int
    entries: list[BatchEntry]  # ascending batch size

    @property
    def schedule(self) -> list[ScheduleRange]:
        return schedule_of([(e.batch_size, e.plan) for e in self.entries])

    @property
    def stops_paying(self) -> int | None:
        """The smallest batch size solved from which on no speculation pays (None: it pays at all)."""
        return stops_paying([(e.batch_size, e.plan) for e in self.entries])

    def to_dict(self) -> dict:
        return {
            "batch_sizes": [e.to_dict() for e in self.entries],
            "schedule": [
                {"min_batch": r.min_batch, "max_batch": r.max_batch, "chain": list(r.plan.chain), "widths": list(r.plan.widths)}
                for r in self.schedule
            ],
            "speculation_stops_paying_at": self.stops_paying,
        }


def solve_batch_schedule(engine: Engine, solve_id: int, config: SolveConfig, batch_sizes: Sequence[int]) -> BatchSolveReport:
    """Solve the profile stored solve ``solve_id`` read at each batch size with ``config`` (the
    solve's options; chains only), and store the best chain per batch size with that solve."""
    c = config
    profile, source = load_solve_profile(engine, solve_id)
    # the contexts the solve read its costs at (see solve_and_store)
    contexts: int | list[int] = c.context_len or source.contexts or DEFAULT_CONTEXT
    solution = solve_batches(profile, batch_sizes, c.t_max, 1, c.max_depth, c.acceptance, contexts, c.exclude, c.require)
    entries = [BatchEntry(b, plan) for b, plan in solution.best]
    with Session(engine) as s, s.begin():
        s.execute(delete(BatchPlanRow).filter_by(solve_id=solve_id))
        for e in entries:
            p = e.plan.prediction
            s.add(
                BatchPlanRow(
                    solve_id=solve_id,
                    batch_size=e.batch_size,
                    chain=list(e.plan.chain),
                    widths=list(e.plan.widths),
                    predicted_ms_per_token=p.ms_per_token,
                    predicted_mean_accepted_length=p.mean_accepted_length,
                    predicted_speedup=p.speedup,
                )
            )
    return BatchSolveReport(solve_id, entries)


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
