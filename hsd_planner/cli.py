"""The ``hsd-plan`` command line: thin wrappers over library functions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from pydantic import ValidationError

from hsd_runtime import HSDError, ModelLoader, SamplingConfig

from .generation import GenerateReport, generate_text
from .options import db_option, int_list, json_option, parse_widths, runtime_options, sampling_options

__all__ = ["cli"]


class _Group(click.Group):
    """Turns every error a user can act on into one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HSDError as exc:
            raise click.ClickException(str(exc)) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise click.ClickException(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


@click.group(cls=_Group)
@click.version_option(package_name="hsd-plan")
def cli() -> None:
    """Choose, solve and validate hierarchies of speculative-decoding drafters.

    A chain lists models smallest first and the target last, e.g.
    ngram,smollm2-135m:layers=8,smollm2-135m; each level below the target has a proposal
    width T (--widths 4,2).
    """


def _print_report(report: GenerateReport) -> None:
    r = report.result
    click.echo(report.text)
    click.echo("")
    click.echo(f"{'level':<34} {'passes':>7} {'tok/pass':>8} {'proposed':>9} {'accepted':>9} {'alpha':>6} {'ms':>9}")
    for lv in r.levels:
        alpha = f"{lv.acceptance:.2f}" if lv.acceptance is not None else "-"
        click.echo(
            f"{lv.model:<34} {lv.forward_passes:>7} {lv.tokens_per_pass:>8.2f} {lv.proposed:>9} {lv.accepted:>9} {alpha:>6} {1000 * lv.time_s:>9.1f}"
        )
    click.echo(
        f"{len(r.tokens)} tokens in {r.decode_s:.2f} s: {r.ms_per_token:.1f} ms/token ({r.tokens_per_s:.1f} tok/s), "
        f"mean accepted length {r.mean_accepted_length:.2f}; prefill {r.prompt_tokens} tokens in {1000 * r.prefill_s:.0f} ms "
        f"[{report.dtype}, {report.device}]"
    )
    if report.check is not None:
        c = report.check
        if c.identical:
            click.echo("check: identical to the target's own greedy decoding")
        else:
            click.echo(f"check: first divergence at new token {c.first_divergence}, agreement {c.agreement:.1%}")


@cli.command()
@click.option("--chain", required=True, help="Models, smallest first, target last: a,b,c.")
@click.option("--widths", default="", help="One proposal width per level below the target: 4,2.")
@click.option("--prompt", required=True, help="The prompt text.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--raw", is_flag=True, help="Do not wrap the prompt in the tokenizer's chat template.")
@click.option("--check", is_flag=True, help="Also decode with the target alone (greedy) and compare.")
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="Run a short untimed generation first.")
@sampling_options
@runtime_options
@json_option
def generate(
    chain: str,
    widths: str,
    prompt: str,
    max_new_tokens: int,
    raw: bool,
    check: bool,
    warmup: bool,
    mode: str,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int,
    dtype: str,
    device: str,
    as_json: bool,
) -> None:
    """Run one hierarchy on one prompt and report per-level stats.

    --check compares with the target's own greedy decoding. With an fp32 target the tokens
    must be identical, and a difference exits with status 1. In bf16/fp16 a batched
    verification pass and an incremental pass round differently and can flip near-ties, so
    --check then reports the first divergence and the agreement rate without failing.

    Example:

        hsd-plan generate --chain ngram,smollm2-135m:layers=8,smollm2-135m --widths 4,2 \\
            --prompt "Write a haiku about the sea." --check
    """
    if check and mode != "greedy":
        raise click.ClickException("--check compares greedy outputs; use it with --mode greedy")
    sampling = SamplingConfig(mode=mode, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    loader = ModelLoader(device=device, dtype=dtype)
    report = generate_text(
        chain, parse_widths(widths), prompt, max_new_tokens, sampling, loader, chat=not raw, check=check, warmup=warmup
    )
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        _print_report(report)
    if report.check is not None and report.check.exact and not report.check.identical:
        click.echo(
            f"error: speculative output differs from the target's greedy output at new token {report.check.first_divergence}",
            err=True,
        )
        sys.exit(1)


@cli.command()
@click.option("--models", required=True, help="Comma-separated model specs to profile, e.g. ngram,smollm2-135m:layers=8,smollm2-135m.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), default=None, help="JSONL ('prompt' or Spec-Bench 'turns') or text file, one prompt per line [default: the built-in set].")
@click.option("--category", default=None, help="Keep only JSONL rows of this category.")
@click.option("--max-prompts", type=click.IntRange(min=1), default=None, help="Profile at most this many prompts.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=64, show_default=True, help="Length of each verifier continuation.")
@click.option("--mode", type=click.Choice(["greedy", "sample"]), default="greedy", show_default=True)
@click.option("--temperature", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True)
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of sampled continuations.")
@click.option("--latency-grid", default="1,2,4,8,16,32,64", show_default=True, help="Tokens per pass n to time.")
@click.option("--context-lens", default="auto", show_default=True,
              help="Cached context lengths to time at; auto: 64, 512 and the longest prompt plus continuation when longer.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Timed passes per point (median kept).")
@click.option("--skip-acceptance", is_flag=True, help="Measure latency curves only.")
@click.option("--force", is_flag=True, help="Re-measure what is already stored.")
@runtime_options
@db_option
@json_option
def profile(models, prompts_file, category, max_prompts, max_new_tokens, mode, temperature, top_p, seed, latency_grid,
            context_lens, repeats, skip_acceptance, force, dtype, device, db, as_json) -> None:
    """Measure latency curves and pairwise acceptance into the database.

    Latency: one cached forward pass of n new tokens after each context length. Acceptance: for
    every pair (cheaper drafter, dearer verifier), the verifier's own continuation of each
    prompt, with each drafter teacher-forced over it. Profiling uses the profiling split of the
    prompts (a quarter is held out for validation). Each measurement is committed as it is taken:
    rerun an interrupted command to resume it.

    Example:

        hsd-plan profile --models ngram,smollm2-135m:layers=8,smollm2-135m --dtype bf16 --max-prompts 12
    """
    from tqdm import tqdm

    from .profiler import ProfileConfig, run_profile
    from .store import open_engine
    from .summary import format_summary, profile_summary
    from .workloads import load_prompts, split

    config = ProfileConfig(
        models=[m for m in models.split(",") if m], mode=mode, temperature=temperature, top_p=top_p, seed=seed,
        dtype=dtype, max_new_tokens=max_new_tokens, latency_grid=int_list(latency_grid, "--latency-grid"),
        context_lens=None if context_lens == "auto" else int_list(context_lens, "--context-lens"), repeats=repeats, acceptance=not skip_acceptance, force=force,
    )
    prompts = split(load_prompts(prompts_file, category), "profile", max_prompts)
    engine = open_engine(db)
    loader = ModelLoader(device=device, dtype=dtype)
    bar = tqdm(desc="profiling", unit="step", file=sys.stderr, disable=None)
    try:
        outcome = run_profile(engine, config, prompts, loader, progress=bar.update, total=lambda n: setattr(bar, "total", n))
    except KeyboardInterrupt:
        bar.close()
        raise click.ClickException("interrupted; every finished measurement is saved, rerun the same command to resume") from None
    bar.close()
    summary = profile_summary(engine, outcome)
    click.echo(json.dumps(summary) if as_json else format_summary(summary))


@cli.group()
def profiles() -> None:
    """Show, export and import the profiling database."""


@profiles.command("show")
@db_option
@json_option
def profiles_show(db, as_json) -> None:
    """Show what the database holds.

    Example:

        hsd-plan profiles show --json
    """
    from .exchange import export_document
    from .store import open_engine

    doc = export_document(open_engine(db))
    if as_json:
        click.echo(doc.model_dump_json())
        return
    click.echo(f"{len(doc.hardware)} hardware, {len(doc.models)} models, {len(doc.workloads)} workloads, "
               f"{len(doc.latency)} latency points, {len(doc.acceptance)} acceptance pairs")
    for h in doc.hardware:
        click.echo(f"hardware {h.fingerprint}: {h.device} {h.device_name}, {h.threads} threads, torch {h.torch_version}")
    for w in doc.workloads:
        click.echo(f"workload {w.name}: {w.count} prompts ({w.content_hash[:12]})")
    for m in doc.models:
        pts = [r for r in doc.latency if r.model == m.spec]
        c1 = min((r for r in pts if r.n_tokens == 1), key=lambda r: r.context_len, default=None)
        c1_text = f", c(1) = {c1.median_ms:.2f} ms" if c1 else ""
        click.echo(f"model {m.spec}: {m.parameters:,} parameters, {len(pts)} latency points{c1_text}")
    names = {w.content_hash: w.name for w in doc.workloads}
    for a in doc.acceptance:
        click.echo(f"acceptance {a.drafter} -> {a.verifier} on {names.get(a.workload, a.workload[:12])} "
                   f"({a.setting.mode}, T={a.setting.temperature}, top-p={a.setting.top_p}, {a.setting.dtype}): "
                   f"alpha {a.alpha:.3f} over {a.positions} positions")


@profiles.command("export")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
def profiles_export(file, db) -> None:
    """Write the whole database to FILE as versioned JSON.

    Example:

        hsd-plan profiles export my-machine.json
    """
    from .exchange import export_document
    from .store import open_engine

    doc = export_document(open_engine(db))
    Path(file).write_text(doc.model_dump_json(indent=1))
    click.echo(f"exported {len(doc.latency)} latency points and {len(doc.acceptance)} acceptance pairs to {file}")


@profiles.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
@json_option
def profiles_import(file, db, as_json) -> None:
    """Merge an exported FILE into the database (rows already present are skipped).

    Example:

        hsd-plan profiles import my-machine.json --db team.db
    """
    from .exchange import import_document, read_document
    from .store import open_engine

    doc = read_document(Path(file))
    added = import_document(open_engine(db), doc)
    click.echo(json.dumps(added) if as_json else "imported: " + ", ".join(f"{v} {k}" for k, v in added.items()))


@cli.command("solve")
@click.option("--target", default=None, help="Target model spec [default: the largest profiled verifier].")
@click.option("--workload", default=None, help="Workload name as profiled (see hsd-plan profiles show) [default: the newest].")
@click.option("--mode", type=click.Choice(["greedy", "sample"]), default="greedy", show_default=True)
@click.option("--temperature", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True)
@click.option("--acceptance", type=click.Choice(["empirical", "iid"]), default="empirical", show_default=True,
              help="Run-length model: the measured P(G >= g), or alpha^g.")
@click.option("--top", "top_k", type=click.IntRange(min=1), default=5, show_default=True, help="How many hierarchies to list.")
@click.option("--t-max", type=int, default=8, show_default=True, help="Largest width tried at any level.")
@click.option("--max-depth", type=int, default=None, help="Most drafter levels [default: no limit].")
@click.option("--context-len", type=click.IntRange(min=1), default=256, show_default=True, help="Context length the cost curves are read at.")
@click.option("--exclude", default="", help="Comma-separated model specs not to use.")
@click.option("--require", default="", help="Comma-separated model specs every plan must contain.")
@db_option
@json_option
def solve_command(target, workload, mode, temperature, acceptance, top_k, t_max, max_depth, context_len, exclude, require, db, as_json) -> None:
    """Find the latency-optimal hierarchy from the stored profile, and store the plans.

    Prints the best hierarchy, the alternatives, the best single drafter and autoregressive
    decoding, each with predicted ms per token, mean accepted length and speed-up.

    Example:

        hsd-plan solve --target smollm2-135m --t-max 8 --json
    """
    from .plans import format_chain, solve_and_store
    from .store import open_engine

    split_specs = lambda text: tuple(x for x in text.split(",") if x)  # noqa: E731
    report = solve_and_store(
        open_engine(db), target, workload, mode, temperature, acceptance, top_k, t_max, max_depth, context_len,
        exclude=split_specs(exclude), require=split_specs(require),
    )
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(f"target {report['target']}, workload {report['workload']}, {mode}, {acceptance} acceptance, context {context_len}")
    click.echo(f"{'plan':>5} {'kind':<15} {'ms/token':>9} {'accepted':>9} {'speed-up':>9}  hierarchy")
    for p in report["plans"]:
        click.echo(f"{p['id']:>5} {p['kind']:<15} {p['predicted_ms_per_token']:>9.2f} {p['predicted_mean_accepted_length']:>9.2f} "
                   f"{p['predicted_speedup']:>8.2f}x  {format_chain(p['chain'], p['widths'])}")


# validate, demo and distill live in their own modules; registering them here keeps one entry point
from .cli_distill import distill  # noqa: E402
from .cli_validate import demo, validate  # noqa: E402

cli.add_command(validate)
cli.add_command(demo)
cli.add_command(distill)
