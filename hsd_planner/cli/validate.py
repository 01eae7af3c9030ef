"""``hsd-plan validate`` and ``hsd-plan demo``: thin wrappers over :mod:`hsd_planner.validation`."""

from __future__ import annotations

from dataclasses import replace

import click
from sqlalchemy.orm import Session

from ..errors import ChainError
from ..profiling import ProfileSummary
from ..prompts import load_prompts, split
from ..store import Setting, check_db, open_engine
from ..validation import CANDIDATE_SETS, FAMILIES, run_demo, run_validation, select_plans
from ..validation.batch import run_batch_validation
from ..validation.plot import check_plot_path, plot_validation
from ..vocab import MAX_COUNT, MAX_LENGTH, MAX_REPEATS, SQLITE_INT_MAX
from .batch import batch_sizes_option, format_batch_validation, parse_batch_sizes
from .options import db_option, json_option, make_loader, model_list, prepack_option, prompt_options, resolve_dtype_choice, runtime_options
from .render import Bars, emit, format_summary, format_validation

__all__ = ["demo", "validate"]


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
@prompt_options(max_prompts=6, max_help="Validate on at most this many held-out prompts.")
@click.option("--max-new-tokens", type=click.IntRange(1, MAX_LENGTH), default=64, show_default=True)
@click.option("--repeats", type=click.IntRange(1, MAX_REPEATS), default=1, show_default=True)
@batch_sizes_option(
    None,
    "Run the schedule of a solve made with --batch-sizes at these batch sizes instead: b held-out prompts in lockstep, "
    "each decoding exactly --max-new-tokens, beside autoregressive decoding of the same batches; per-token latency and "
    "throughput per batch size against the prediction.",
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
    db: str | None,
    as_json: bool,
) -> None:
    """Run solved plans on held-out prompts and compare predicted with measured latency.

    The prompts are the validation split of the prompt set (the quarter that profiling never
    uses). Per plan: predicted and measured ms/token (decode only), error, measured speed-up
    over autoregressive decoding run in the same validation, mean accepted length; overall the
    median absolute error and the regret of the solver's pick. Every run is stored.

    Example:

        hsd-plan validate --candidates top-k --max-prompts 8 --plot validate.png

        hsd-plan validate --batch-sizes 1,4,8 --max-prompts 8
    """
    sizes = parse_batch_sizes(batch_sizes)
    if sizes and plot_file is not None:
        raise ChainError("--plot draws a validation at batch size 1; leave it out with --batch-sizes")
    plot = check_plot_path(plot_file, force) if plot_file is not None else None
    engine = open_engine(db, create=False)
    solve, plans = select_plans(engine, plan_ids, "best" if best else candidates)
    prompts = split(load_prompts(prompts_file, category), "validate", max_prompts)
    with Session(engine) as s:
        solve_dtype = s.get_one(Setting, solve.setting_id).dtype
    chosen = resolve_dtype_choice(dtype, device) if dtype else solve_dtype
    if chosen != solve_dtype:  # a profile predicts its own dtype only: the comparison would mean nothing
        raise ChainError(
            f"--dtype {dtype}: the plans were profiled in {solve_dtype}, and a profile predicts only its own dtype; "
            f"leave --dtype out, or profile and solve in {chosen} first"
        )
    loader = make_loader(device, chosen)
    bars = Bars()
    if sizes:
        bars.start("validating", sum(2 * repeats * -(-len(prompts.prompts) // b) for b in sizes))
        try:
            batch = run_batch_validation(engine, loader, solve, sizes, prompts, max_new_tokens, repeats, progress=bars.step)
        finally:
            bars.close()
        emit(batch, as_json, format_batch_validation)
        return
    bars.start("validating", len(plans) * len(prompts.prompts) * repeats)
    try:
        report = run_validation(engine, loader, solve, plans, prompts, max_new_tokens, repeats, progress=bars.step)
    finally:
        bars.close()
    if plot is not None:
        plot_validation(report, plot)
    emit(report, as_json, format_validation)


@click.command()
@click.option(
    "--family",
    type=click.Choice(list(FAMILIES)),
    default="qwen",
    show_default=True,
    help="qwen: Qwen2.5-Coder 0.5B/1.5B with int8 copies on HumanEval; smollm2: SmolLM2-135M early exits, quick.",
)
@click.option("--models", default=None, help="Candidates, target last [default: the family's].")
@click.option("--max-prompts", type=click.IntRange(1, MAX_COUNT), default=None, help="Profiling prompts [default: the family's].")
@click.option(
    "--validate-prompts", type=click.IntRange(1, MAX_COUNT), default=None, help="Held-out prompts to validate on [default: the family's]."
)
@click.option("--max-new-tokens", type=click.IntRange(1, MAX_LENGTH), default=None, help="Continuation length [default: the family's].")
@click.option(
    "--rounds",
    type=click.IntRange(1, MAX_REPEATS),
    default=None,
    help="Interleaved latency rounds when profiling [default: the family's, 5].",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, MAX_REPEATS),
    default=None,
    help="Validation runs of every plan on every held-out prompt [default: the family's, 2].",
)
@click.option("--plot", "plot_file", default="hsd-plan-demo.png", show_default=True, help="The validation figure (PNG, PDF, SVG or JPEG).")
@click.option("--force", is_flag=True, help="Let --plot replace a file that is not a figure of its format, or a symbolic link.")
@runtime_options
@prepack_option
@db_option
@json_option
def demo(
    family: str,
    models: str | None,
    max_prompts: int | None,
    validate_prompts: int | None,
    max_new_tokens: int | None,
    rounds: int | None,
    repeats: int | None,
    plot_file: str,
    force: bool,
    dtype: str,
    device: str,
    prepack: bool,
    db: str | None,
    as_json: bool,
) -> None:
    """Profile, solve and validate a model family end to end.

    The default family profiles the n-gram drafter, int8 copies of Qwen2.5-Coder 0.5B and 1.5B,
    the 0.5B, an early exit of the 1.5B and the 1.5B target on HumanEval prompts, solves for the
    best hierarchy, then runs the best plan and the best single drafter against autoregressive
    decoding on held-out problems. --family smollm2 is the quick demo on SmolLM2-135M. What the
    database already holds is reused, so a second run only validates again.

    Example:

        hsd-plan demo

        hsd-plan demo --family smollm2 --max-prompts 6 --validate-prompts 3 --plot demo.png
    """

    def say(text: str) -> None:
        if not as_json:
            click.echo(text, err=True)

    def show(summary: ProfileSummary) -> None:
        say(format_summary(summary))

    plot = check_plot_path(plot_file, force)
    check_db(db)  # a bad --db fails before the models load
    chosen = FAMILIES[family]
    overrides = {
        "models": ",".join(model_list(models, "--models")) if models is not None else None,
        "max_prompts": max_prompts,
        "validate_prompts": validate_prompts,
        "max_new_tokens": max_new_tokens,
        "rounds": rounds,
        "repeats": repeats,
    }
    chosen = replace(chosen, **{k: v for k, v in overrides.items() if v is not None})
    dtype = resolve_dtype_choice(dtype, device)
    report = run_demo(
        lambda: open_engine(db),  # opened once the models are loaded and checked: a refusal creates no database
        make_loader(device, dtype, prepack),
        chosen,
        dtype,
        plot,
        say=say,
        show=show,
        stages=Bars(),
    )
    emit(report, as_json, lambda r: f"{format_validation(r.validation)}\n\n{r.conclusion}")
