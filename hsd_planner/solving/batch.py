"""A solve's best chain per batch size (``hsd-plan solve --batch-sizes``): solving the stored
solve's profile at each batch size (:func:`hsd_planner.plan.batch.solve_batches`) and storing the
schedule a server switches plans by (:mod:`hsd_planner.store.schedule`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..plan import SolveConfig
from ..plan.batch import BatchSolution, solve_batches
from ..plan.config import DEFAULT_CONTEXT
from ..store import Engine
from ..store.profiles import load_solve_profile
from ..store.schedule import save_batch_plans

__all__ = ["solve_batch_schedule"]


def solve_batch_schedule(db: Engine, solve_id: int, config: SolveConfig, batch_sizes: Sequence[int]) -> BatchSolution:
    """Solve the profile stored solve ``solve_id`` read at each batch size with ``config`` (the
    solve's options; chains only), and store the best chain per batch size with that solve."""
    profile, source = load_solve_profile(db, solve_id)
    # the contexts the solve read its costs at (see solve_and_store)
    contexts: int | list[int] = config.context_len or source.contexts or DEFAULT_CONTEXT
    solution = solve_batches(profile, batch_sizes, config, contexts)
    save_batch_plans(db, solve_id, solution.best)
    return solution
