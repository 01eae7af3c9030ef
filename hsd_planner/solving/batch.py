"""A solve's best chain per batch size (``hsd-plan solve --batch-sizes``): solving the stored
solve's profile at each batch size with the lockstep model (:mod:`hsd_planner.plan.batch`) and
storing the schedule a server switches plans by (:mod:`hsd_planner.store.schedule`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..plan import SolveConfig
from ..plan.batch import ScheduleRange, schedule_of, solve_batches, stops_paying
from ..plan.config import DEFAULT_CONTEXT
from ..store import Engine
from ..store.profiles import load_solve_profile
from ..store.schedule import BatchEntry, save_batch_plans

__all__ = ["BatchSolveReport", "solve_batch_schedule"]


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
    save_batch_plans(engine, solve_id, entries)
    return BatchSolveReport(solve_id, entries)
