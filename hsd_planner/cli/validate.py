"""``hsd-plan validate``: a thin wrapper over :mod:`hsd_planner.validation`."""

from __future__ import annotations

import click

from ..errors import ChainError
from ..limits import MAX_LENGTH, MAX_REPEATS, SQLITE_INT_MAX
from ..prompts import load_prompts, split
from ..store import open_db
from ..validation import CANDIDATE_SETS, run_validation, select_plans
from ..validation.plot import check_plot_path, plot_validation
from .batch import batch_sizes_option, parse_batch_sizes
from .loader import make_loader, resolve_dtype_choice
from .options import db_option, json_option, prompt_options, runtime_options
from .render import Bars, emit, format_validation

__all__ = ["validate"]


@click.command()
@click.option(
    "--plan", "plan_ids", type=click.IntRange(1, SQLITE_INT_MAX), multiple=True, help="Plan id to run (repeatable); see hsd-plan solve."
)
@click.option("--best", is_flag=True, help="Run the newest solve's best plan (with the best single drafter).")
@click.option(
    "--candidates",
    type=click.Choice(list(CANDIDATE_SETS)),
    default="best",
    show_default=True,
    help="Which plans of the newest solve to run; autoregressive decoding always runs as the baseline.",
)
@prompt_options(max_prompts=6, max_help="Validate on at most this many held-out prompts")
@click.option("--max-new-tokens", type=click.IntRange(1, MAX_LENGTH), default=64, show_default=True)
@click.option("--repeats", type=click.IntRange(1, MAX_REPEATS), default=1, show_default=True)
@batch_sizes_option(
    None,
    "Run the plans at these batch sizes: at each b, on batches of b held-out prompts in lockstep (above 1 every sequence "
    "decodes exactly --max-new-tokens), beside autoregressive decoding of the same batches and, from a solve made with "
    "--batch-sizes, its schedule's plan for b [default: batch size 1, the schedule left out].",
)
@click.option("--plot", "plot_file", default=None, help="Write predicted-vs-measured figure (PNG, PDF, SVG or JPEG).")
@click.option("--force", is_flag=True, help="Let --plot replace a file that is not a figure of its format, or a symbolic link.")
@runtime_options(dtype=None, dtype_help="Dtype for models whose spec sets none [default: the dtype the plan was profiled in].")
@db_option
@json_option
def validate(
    plan_ids: tuple[int, ...],
    best: bool,
    candidates: str,
    prompts_file: str | None,
    category: str | None,
    max_prompts: int,
    max_new_tokens: int,
    repeats: int,
    batch_sizes: str | None,
    plot_file: str | None,
    force: bool,
    dtype: str | None,
    device: str,
    db_url: str | None,
    as_json: bool,
) -> None:
    """Run solved plans on held-out prompts and compare predicted with measured latency.

    The prompts are the validation split of the prompt set (the quarter that profiling never
    uses). Per plan: predicted and measured ms/token (decode only), error, measured speed-up
    over autoregressive decoding run in the same validation, mean accepted length; overall the
    median absolute error and the regret of the solver's pick. Every run is stored.

    With --batch-sizes, the same plans (--plan, --best or --candidates) run at every batch size
    asked for, on batches of b prompts in lockstep, with the same prediction rule; a draft tree,
    which decodes one sequence at a time, runs at batch size 1 only. A solve made with
    --batch-sizes adds its schedule's plan for each b.

    Example:

        hsd-plan validate --candidates top-k --max-prompts 8 --plot validate.png

        hsd-plan validate --batch-sizes 1,4,8 --max-prompts 8

        hsd-plan validate --plan 3 --batch-sizes 1,8
    """
    sizes = parse_batch_sizes(batch_sizes)
    if sizes and max(sizes) > 1 and plot_file is not None:
        raise ChainError("--plot draws a validation at batch size 1; leave it out with --batch-sizes above 1")
    plot = check_plot_path(plot_file, force) if plot_file is not None else None
    db = open_db(db_url, create=False)
    solve, plans = select_plans(db, plan_ids, "best" if best else candidates)
    prompts = split(load_prompts(prompts_file, category), "validate", max_prompts)
    solve_dtype = solve.setting.dtype
    chosen = resolve_dtype_choice(dtype, device) if dtype else solve_dtype
    if chosen != solve_dtype:  # a profile predicts its own dtype only: the comparison would mean nothing
        raise ChainError(
            f"--dtype {dtype}: the plans were profiled in {solve_dtype}, and a profile predicts only its own dtype; "
            f"leave --dtype out, or profile and solve in {chosen} first"
        )
    loader = make_loader(device, chosen, advise=False)  # the plans' specs name their engine
    bars = Bars()
    bars.start("validating")
    try:
        report = run_validation(
            db, loader, solve, plans, prompts, max_new_tokens, repeats, batch_sizes=sizes, progress=bars.step, total=bars.total
        )
    finally:
        bars.close()
    if plot is not None:
        plot_validation(report, plot)
    emit(report, as_json, format_validation)
