"""``--batch-sizes`` of profile, solve and validate, and how batch solves and validations print."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from hsd_runtime.terms.limits import MAX_BATCH

from ..plan import Plan
from ..plan.batch import BatchSolution
from ..validation.batch import BatchValidationReport
from .values import int_list

__all__ = ["batch_sizes_option", "format_batch_solve", "format_batch_validation", "parse_batch_sizes"]

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


def format_batch_validation(report: BatchValidationReport) -> str:
    """Per batch size and plan: predicted against measured ms per token, throughput and speed-up."""
    lines = [
        f"validation {report.validation_id} of solve {report.solve_id}: {report.prompt_count} prompts of {report.prompts}, "
        f"{report.max_new_tokens} tokens per sequence",
        f"{'batch':>6} {'kind':<15} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'meas tok/s':>10} "
        f"{'pred x':>7} {'meas x':>7} {'accepted':>9}  plan",
    ]
    for r in report.runs:
        lines.append(
            f"{r.batch_size:>6} {r.kind:<15} {r.plan.prediction.ms_per_token:>8.1f} {r.measured_ms_per_token:>8.1f} {r.error:>+7.1%} "
            f"{r.measured_tokens_per_s:>10.1f} {r.plan.prediction.speedup:>6.2f}x {r.measured_speedup:>6.2f}x "
            f"{r.measured_mean_accepted_length:>9.2f}  {_plan_text(r.plan)}"
        )
    lines.append(f"median |error| {report.median_abs_error:.1%}")
    if report.median_abs_speedup_error is not None:
        lines.append(f"median |speed-up error| {report.median_abs_speedup_error:.1%} (speculative plans)")
    return "\n".join(lines)
