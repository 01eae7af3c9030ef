"""``hsd-plan solve``: rank hierarchies from the stored profile and store the plans."""

from __future__ import annotations

import click

from ..plan import SolveConfig
from ..store import open_engine
from ..store.solves import solve_and_store
from .options import db_option, json_option, mode_options, solve_options, split_specs
from .render import emit, format_solve

__all__ = ["solve_command"]


@click.command("solve")
@click.option("--target", default=None, help="Target model spec [default: the largest profiled verifier].")
@click.option("--workload", default=None, help="Workload name as profiled (see hsd-plan profiles show) [default: the newest].")
@mode_options
@solve_options
@db_option
@json_option
def solve_command(target: str | None, workload: str | None, mode: str, temperature: float, acceptance: str, top_k: int, t_max: int,
                  max_depth: int | None, context_len: int, exclude: str, require: str, db: str | None, as_json: bool) -> None:
    """Find the latency-optimal hierarchy from the stored profile, and store the plans.

    Prints the best hierarchy, the alternatives, the best single drafter and autoregressive
    decoding, each with predicted ms per token, mean accepted length and speed-up.

    Example:

        hsd-plan solve --target smollm2-135m --t-max 8 --json
    """
    config = SolveConfig(t_max=t_max, top_k=top_k, max_depth=max_depth, acceptance=acceptance, context_len=context_len,
                         exclude=split_specs(exclude), require=split_specs(require))
    emit(solve_and_store(open_engine(db), target, workload, mode, temperature, config), as_json, format_solve)
