"""``hsd-plan profile``: measure latency curves and pairwise acceptance into the database."""

from __future__ import annotations

import click

from hsd_runtime import parse_spec

from ..errors import StoreError
from ..limits import MAX_LENGTH, MAX_REPEATS
from ..profiling import ProfileConfig, prepare_profile, profile_summary, run_profile
from ..profiling.sources import absolute_specs, trained_overlaps, with_engine
from ..prompts import load_prompts, split
from ..store import check_db, open_db
from ..store.failures import LOST, describe_lost
from .batch import batch_sizes_option, parse_batch_sizes
from .loader import make_loader, resolve_dtype_choice
from .options import (
    allow_busy_option,
    db_option,
    engine_option,
    json_option,
    prepack_option,
    prompt_options,
    runtime_options,
    sampling_options,
)
from .render import Bars, emit, format_summary
from .values import int_list, model_list

__all__ = ["profile"]

_D = ProfileConfig.model_fields


@click.command()
@click.option("--models", required=True, help="Comma-separated model specs to profile, e.g. ngram,smollm2-135m:layers=8,smollm2-135m.")
@prompt_options(max_help="Profile at most this many prompts")
@click.option(
    "--max-new-tokens",
    type=click.IntRange(1, MAX_LENGTH),
    default=_D["max_new_tokens"].default,
    show_default=True,
    help="Length of each verifier continuation.",
)
@sampling_options(top_k=False, seed_help="Seed of sampled continuations.")
@click.option(
    "--latency-grid", default=",".join(map(str, _D["latency_grid"].default_factory())), show_default=True, help="Tokens per pass n to time."
)
@click.option(
    "--context-lens",
    default="auto",
    show_default=True,
    help="Cached context lengths to time at; auto: 64, 512 and the longest prompt plus continuation when longer.",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, MAX_REPEATS),
    default=_D["repeats"].default,
    show_default=True,
    help="Interleaved latency rounds: timed passes per point (median kept).",
)
@batch_sizes_option(
    "1",
    "Sequences per pass to time: 1 is the plain curve; each larger batch size b adds c(n, b), one pass over b sequences "
    "of n new tokens each (for solve --batch-sizes).",
)
@click.option("--skip-acceptance", is_flag=True, help="Measure latency curves only.")
@click.option("--force", is_flag=True, help="Re-measure what is already stored.")
@allow_busy_option
@runtime_options
@prepack_option
@engine_option
@db_option
@json_option
def profile(
    models: str,
    prompts_file: str | None,
    category: str | None,
    max_prompts: int | None,
    max_new_tokens: int,
    mode: str,
    temperature: float,
    lenience: float,
    top_p: float | None,
    seed: int,
    latency_grid: str,
    context_lens: str,
    repeats: int,
    batch_sizes: str,
    skip_acceptance: bool,
    force: bool,
    allow_busy: bool,
    dtype: str,
    device: str,
    prepack: bool,
    engine: str,
    db_url: str | None,
    as_json: bool,
) -> None:
    """Measure latency curves and pairwise acceptance into the database.

    Latency: one cached forward pass of n new tokens after each context length. Acceptance: for
    every pair (cheaper drafter, dearer verifier), the verifier's own continuation of each
    prompt (its logits kept from the passes that generate it), with each drafter teacher-forced
    over it. Profiling uses the profiling split of the
    prompts (a quarter is held out for validation); a trained drafter (a distilled student, heads,
    steering) whose training record lists any of them is named in a warning, as its acceptance
    there is its training acceptance. Each measurement is committed as it is taken: rerun an
    interrupted command to resume it.

    Example:

        hsd-plan profile --models ngram,smollm2-135m:layers=8,smollm2-135m --max-prompts 12

        hsd-plan profile --models ngram,smollm2-135m:layers=8,smollm2-135m --batch-sizes 1,2,4,8

        hsd-plan profile --engine llamacpp --models ngram,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --max-prompts 12

        hsd-plan profile --engine llamacpp --models qwen2.5-coder-0.5b,qwen2.5-coder-0.5b:pmin=0.5,qwen2.5-coder-1.5b

        hsd-plan profile --engine llamacpp --models ngram:n=3:rule=ngram-mod,ngram:n=4:rule=llama-server,qwen2.5-coder-1.5b

        hsd-plan profile --engine llamacpp --models ngram:n=4:rule=ngram-map-k,ngram:n=4:rule=ngram-map-k4v:hits=2,qwen2.5-coder-1.5b

    Latency samples timed while other processes kept the cores busy (or the hypervisor took
    more than 5% of their time) are timed again once the machine is quiet; a machine that stays
    busy for about half a minute is refused in one line (--allow-busy keeps such samples).

    --engine llamacpp profiles the GGUF files on llama.cpp: every model spec gets engine=llamacpp,
    and the profile is stored under llama.cpp's kernels (its binding's version) and thread count.
    """
    dtype = resolve_dtype_choice(dtype, device)
    config = ProfileConfig(
        models=with_engine(absolute_specs(model_list(models, "--models")), engine),
        mode=mode,
        temperature=temperature,
        top_p=top_p or 1.0,
        lenience=lenience,
        seed=seed,
        dtype=dtype,
        max_new_tokens=max_new_tokens,
        latency_grid=int_list(latency_grid, "--latency-grid"),
        context_lens=None if context_lens == "auto" else int_list(context_lens, "--context-lens"),
        repeats=repeats,
        batch_sizes=parse_batch_sizes(batch_sizes),
        acceptance=not skip_acceptance,
        force=force,
        allow_busy=allow_busy,
    )
    prompts = split(load_prompts(prompts_file, category), "profile", max_prompts)
    for spec, n in trained_overlaps(config.models, prompts):
        click.echo(
            f"warning: {spec} was trained on {n} of these {len(prompts.prompts)} profiling prompts: its acceptance here is "
            f"its training acceptance and plans with it will be predicted too fast; profile with --max-prompts at most the "
            f"trainer's --reserve, or on other prompts",
            err=True,
        )
    check_db(db_url)  # a bad --db fails before the models load
    # the kernels the profile is stored under are its models' engine's: where every model spec
    # names one engine (engine=static on each, say), that engine's, not the command's default
    named = {parse_spec(m).engine or engine for m in config.models if parse_spec(m).is_model}
    loader = make_loader(device, dtype, prepack, named.pop() if len(named) == 1 else engine)
    prepared = prepare_profile(config, prompts, loader)  # every refusal before the database is created or written
    db = open_db(db_url)
    bars = Bars()
    bars.start("profiling")
    try:
        outcome = run_profile(db, config, prompts, loader, progress=bars.step, total=bars.total, prepared=prepared, note=bars.note)
    except KeyboardInterrupt:
        raise click.ClickException("interrupted; every finished measurement is saved, rerun the same command to resume") from None
    except LOST as exc:  # the database went away under us: a server stopped, a network gone
        raise StoreError(
            f"{describe_lost(db.url, exc.orig or exc)}; every finished measurement is saved, rerun the same command to resume"
        ) from None
    finally:
        bars.close()
    emit(profile_summary(db, outcome), as_json, format_summary)
