"""``hsd-plan demo``: a thin wrapper over :mod:`hsd_planner.demo`, the whole workflow on a model family."""

from __future__ import annotations

from dataclasses import replace

import click

from ..demo import FAMILIES, run_demo
from ..limits import MAX_COUNT, MAX_LENGTH, MAX_REPEATS
from ..profiling import ProfileSummary
from ..profiling.sources import with_engine
from ..store import check_db, open_db
from ..validation.plot import check_plot_path
from .loader import make_loader, resolve_dtype_choice
from .options import allow_busy_option, db_option, engine_option, json_option, prepack_option, runtime_options
from .render import Bars, emit, format_summary, format_validation
from .values import model_list

__all__ = ["demo"]


@click.command()
@click.option(
    "--family",
    type=click.Choice(list(FAMILIES)),
    default="qwen",
    show_default=True,
    help="qwen: Qwen2.5-Coder 1.5B with the lookup and the 0.5B's int8 copy on HumanEval; smollm2: SmolLM2-135M early exits, quick.",
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
    help="Validation runs of every plan on every held-out prompt [default: the family's: qwen 1, smollm2 2].",
)
@click.option("--plot", "plot_file", default="hsd-plan-demo.png", show_default=True, help="The validation figure (PNG, PDF, SVG or JPEG).")
@click.option("--force", is_flag=True, help="Let --plot replace a file that is not a figure of its format, or a symbolic link.")
@allow_busy_option
@runtime_options
@prepack_option
@engine_option
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
    allow_busy: bool,
    dtype: str,
    device: str,
    prepack: bool,
    engine: str,
    db_url: str | None,
    as_json: bool,
) -> None:
    """Profile, solve and validate a model family end to end.

    The default family profiles the n-gram drafter, the int8 copy of Qwen2.5-Coder 0.5B and the
    1.5B target on HumanEval prompts, 128 new tokens each (long enough to write the function's
    body), solves for the best hierarchy, then runs the best plan and the best single drafter
    against autoregressive decoding on held-out problems. --family smollm2 is the quick demo on
    SmolLM2-135M. What the database already holds is reused, so a second run only validates again.

    Example:

        hsd-plan demo

        hsd-plan demo --family smollm2 --max-prompts 6 --validate-prompts 3 --plot demo.png

        hsd-plan demo --engine llamacpp

    --engine llamacpp runs the family's GGUF files on llama.cpp: the n-gram drafter, one that drafts
    only on a 3-token match (ngram:min=3) and a Q4_0 copy of the smaller model made by llama.cpp's
    quantizer, under the target as it is packaged. --engine static runs the family's own candidates
    on the static engine (CUDA graphs on a GPU: hsd-plan demo --engine static --device cuda); on a
    GPU an int8 copy, a CPU kernel, gives way to the model it copies.
    """

    def say(text: str) -> None:
        if not as_json:
            click.echo(text, err=True)

    def show(summary: ProfileSummary) -> None:
        say(format_summary(summary))

    plot = check_plot_path(plot_file, force)
    check_db(db_url)  # a bad --db fails before the models load
    dtype = resolve_dtype_choice(dtype, device)
    loader = make_loader(device, dtype, prepack, engine)
    chosen = FAMILIES[family].on_engine(engine, loader.device.type)
    overrides = {
        "models": ",".join(with_engine(model_list(models, "--models"), engine)) if models is not None else None,
        "max_prompts": max_prompts,
        "validate_prompts": validate_prompts,
        "max_new_tokens": max_new_tokens,
        "rounds": rounds,
        "repeats": repeats,
    }
    chosen = replace(chosen, **{k: v for k, v in overrides.items() if v is not None})
    report = run_demo(
        lambda: open_db(db_url),  # opened once the models are loaded and checked: a refusal creates no database
        loader,
        chosen,
        dtype,
        plot,
        say=say,
        show=show,
        stages=Bars(),
        allow_busy=allow_busy,
    )
    emit(report, as_json, lambda r: f"{format_validation(r.validation)}\n\n{r.conclusion}")
