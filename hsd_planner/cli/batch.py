"""``--batch-sizes`` of profile, solve and validate, and how a batch solve prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from hsd_runtime.terms.limits import MAX_BATCH

from ..plan import Plan
from ..plan.batch import BatchSolution
from .values import int_list

__all__ = ["batch_sizes_option", "format_batch_solve", "parse_batch_sizes"]

F = TypeVar("F", bound=Callable)


def batch_sizes_option(default: str | None, help: str) -> Callable[[F], F]:
    """``--batch-sizes``: comma-separated batch sizes (sequences decoded in lockstep), 1 to MAX_BATCH."""
    return click.option("--batch-sizes", default=default, show_default=default is not None, help=help)


def parse_batch_sizes(text: str | None) -> list[int] | None:
    """``"1,4,8"`` -> ``[1, 4, 8]`` (sorted, once each); None stays None."""
    if text is None:
        return None
    return sorted(set(int_list(text, "--batch-sizes", MAX_BATCH)))


def _plan_text(plan: Plan) -> str:
    return plan.label if plan.depth else f"{plan.chain[-1]} autoregressive (k = 0)"


def format_batch_solve(solution: BatchSolution, solve_id: int) -> str:
    """Solve ``solve_id``'s best chain per batch size, its prediction per sequence and for the batch, and the schedule."""
    lines = [
        "",
        f"batch sizes (solve {solve_id}; chains, every sequence in lockstep):",
        f"{'batch':>6} {'ms/token':>9} {'tokens/s':>9} {'accepted':>9} {'speed-up':>9}  best plan",
    ]
    for b, plan in solution.best:
        p = plan.prediction
        lines.append(
            f"{b:>6} {p.ms_per_token:>9.2f} {1000.0 * b / p.ms_per_token:>9.1f} {p.mean_accepted_length:>9.2f} {p.speedup:>8.2f}x  "
            f"{_plan_text(plan)}"
        )
    lines.append("schedule:")
    for r in solution.schedule:
        lines.append(f"  batch {r.min_batch}-{r.max_batch}: {_plan_text(r.plan)}")
    stop = solution.stops_paying
    if stop is not None:
        lines.append(f"speculation stops paying at batch size {stop}")
    return "\n".join(lines)
