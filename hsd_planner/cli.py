"""The ``hsd-plan`` command line: thin wrappers over library functions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from pydantic import ValidationError
from sqlalchemy.orm import Session

from hsd_runtime import HSDError, ModelLoader, SamplingConfig

from .generation import GenerateReport, generate_text
from .store import Setting
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
@click.option("--context-lens", default="64,512", show_default=True, help="Cached context lengths to time at.")
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
        context_lens=int_list(context_lens, "--context-lens"), repeats=repeats, acceptance=not skip_acceptance, force=force,
    )
    prompts = split(load_prompts(prompts_file, category), "profile")
    if max_prompts:
        prompts = type(prompts)(prompts.name, prompts.prompts[:max_prompts])
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
    from .plans import solve_and_store
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
        chain = " -> ".join([f"{m}[{w}]" for m, w in zip(p["chain"], p["widths"])] + [p["chain"][-1]])
        click.echo(f"{p['id']:>5} {p['kind']:<15} {p['predicted_ms_per_token']:>9.2f} {p['predicted_mean_accepted_length']:>9.2f} "
                   f"{p['predicted_speedup']:>8.2f}x  {chain}")


@cli.command()
@click.option("--plan", "plan_ids", type=int, multiple=True, help="Plan id to run (repeatable); see hsd-plan solve.")
@click.option("--best", is_flag=True, help="Run the newest solve's best plan (with the best single drafter).")
@click.option("--candidates", type=click.Choice(["best", "top-k", "singles", "all"]), default="best", show_default=True,
              help="Which plans of the newest solve to run; autoregressive decoding always runs as the baseline.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), default=None, help="Prompt file [default: the built-in set].")
@click.option("--category", default=None, help="Keep only JSONL rows of this category.")
@click.option("--max-prompts", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, help="Write predicted-vs-measured figure (PNG).")
@runtime_options(dtype=None, dtype_help="Dtype for models whose spec sets none [default: the dtype the plan was profiled in].")
@db_option
@json_option
def validate(plan_ids, best, candidates, prompts_file, category, max_prompts, max_new_tokens, repeats, plot_file, dtype, device, db, as_json) -> None:
    """Run solved plans on held-out prompts and compare predicted with measured latency.

    The prompts are the validation split of the prompt set (the quarter that profiling never
    uses). Per plan: predicted and measured ms/token (decode only), error, measured speed-up
    over autoregressive decoding run in the same validation, mean accepted length; overall the
    median absolute error and the regret of the solver's pick. Every run is stored.

    Example:

        hsd-plan validate --candidates top-k --max-prompts 8 --plot validate.png
    """
    from tqdm import tqdm

    from .store import open_engine
    from .validation import run_validation, select_plans
    from .workloads import load_prompts, split

    engine = open_engine(db)
    solve, plans = select_plans(engine, plan_ids, "best" if best else candidates)
    prompts = split(load_prompts(prompts_file, category), "validate")
    prompts = type(prompts)(prompts.name, prompts.prompts[:max_prompts])
    with Session(engine) as s:
        solve_dtype = s.get(Setting, solve.setting_id).dtype
    loader = ModelLoader(device=device, dtype=dtype or solve_dtype)
    bar = tqdm(desc="validating", total=len(plans) * len(prompts.prompts) * repeats, unit="run", file=sys.stderr, disable=None)
    report = run_validation(engine, loader, solve, plans, prompts, max_new_tokens, repeats, progress=bar.update)
    bar.close()
    if plot_file:
        from .plot import plot_validation

        plot_validation(report, Path(plot_file))
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(_format_validation(report))


def _format_validation(report: dict) -> str:
    lines = [
        f"target {report['target']}: {report['prompt_count']} held-out prompts of {report['prompts']}, "
        f"{report['mode']}, {report['acceptance']} acceptance model, context {report['context_len']}",
        f"{'plan':>5} {'kind':<15} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'speed-up':>9} {'accepted p/m':>13}  hierarchy",
    ]
    for p in report["plans"]:
        chain = " -> ".join([f"{m}[{w}]" for m, w in zip(p["chain"], p["widths"])] + [p["chain"][-1]])
        lines.append(
            f"{p['plan_id']:>5} {p['kind']:<15} {p['predicted_ms_per_token']:>8.2f} {p['measured_ms_per_token']:>8.2f} "
            f"{p['error']:>+7.1%} {p['measured_speedup']:>8.2f}x {p['predicted_mean_accepted_length']:>6.2f}/{p['measured_mean_accepted_length']:<6.2f}  {chain}"
        )
    lines.append(f"median |error| {report['median_abs_error']:.1%}; regret {report['regret']:.1%} (pick: plan {report['pick']}); "
                 f"validation {report['validation_id']} stored")
    return "\n".join(lines)


DEMO_MODELS = "ngram,smollm2-135m:layers=2,smollm2-135m:layers=4,smollm2-135m:layers=8,smollm2-135m"


@cli.command()
@click.option("--models", default=DEMO_MODELS, show_default=True, help="Candidates, target last.")
@click.option("--max-prompts", type=click.IntRange(min=1), default=12, show_default=True, help="Profiling prompts (built-in set).")
@click.option("--validate-prompts", type=click.IntRange(min=1), default=6, show_default=True, help="Held-out prompts to validate on.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default="hsd-plan-demo.png", show_default=True)
@runtime_options(dtype="bf16")
@db_option
@json_option
def demo(models, max_prompts, validate_prompts, max_new_tokens, plot_file, dtype, device, db, as_json) -> None:
    """Profile, solve and validate on the built-in default, end to end.

    Profiles the n-gram drafter, three early exits and SmolLM2-135M on the built-in prompts, solves for the best hierarchy, then runs the best plan and
    the best single drafter against autoregressive decoding on held-out prompts. What the
    database already holds is reused, so a second run only validates again.

    Example:

        hsd-plan demo --max-prompts 6 --validate-prompts 3 --plot demo.png
    """
    from tqdm import tqdm

    from .plans import solve_and_store
    from .plot import plot_validation
    from .profiler import ProfileConfig, run_profile
    from .store import open_engine
    from .summary import format_summary, profile_summary
    from .validation import run_validation, select_plans
    from .workloads import load_prompts, split

    engine = open_engine(db)
    loader = ModelLoader(device=device, dtype=dtype)
    prompts = split(load_prompts(), "profile")
    prompts = type(prompts)(prompts.name, prompts.prompts[:max_prompts])
    config = ProfileConfig(models=models.split(","), dtype=dtype, max_new_tokens=max_new_tokens,
                           latency_grid=[1, 2, 4, 8, 16], context_lens=[64, 256], repeats=3)
    say = (lambda *_: None) if as_json else (lambda text: click.echo(text, err=True))
    say(f"1/3 profiling {len(config.models)} models on {len(prompts.prompts)} built-in prompts ({dtype})")
    bar = tqdm(desc="profiling", unit="step", file=sys.stderr, disable=None)
    outcome = run_profile(engine, config, prompts, loader, progress=bar.update, total=lambda n: setattr(bar, "total", n))
    bar.close()
    summary = profile_summary(engine, outcome)
    say(format_summary(summary))
    say("\n2/3 solving")
    solved = solve_and_store(engine, target=config.models[-1], workload=prompts.name, t_max=8)
    say(f"best: {' -> '.join(solved['chain'])} widths {solved['widths']}, predicted {solved['predicted_ms_per_token']:.1f} ms/token "
        f"({solved['predicted_speedup']:.2f}x)")
    say("\n3/3 validating on held-out prompts")
    solve, plans = select_plans(engine, (), "best")
    held_out = split(load_prompts(), "validate")
    held_out = type(held_out)(held_out.name, held_out.prompts[:validate_prompts])
    bar = tqdm(desc="validating", total=len(plans) * len(held_out.prompts), unit="run", file=sys.stderr, disable=None)
    report = run_validation(engine, loader, solve, plans, held_out, max_new_tokens, 1, progress=bar.update)
    bar.close()
    plot_validation(report, Path(plot_file))
    if as_json:
        click.echo(json.dumps({"profile": summary, "solve": solved, "validation": report, "plot": plot_file}))
        return
    click.echo(_format_validation(report))
    best = next((p for p in report["plans"] if p["kind"] == "best"), report["plans"][0])
    singles = [p for p in report["plans"] if p["kind"] == "single"]
    tail = f"; over the best single drafter {singles[0]['measured_ms_per_token'] / best['measured_ms_per_token']:.2f}x" if singles else ""
    click.echo(f"\nthe solver's pick: {best['measured_speedup']:.2f}x the speed of autoregressive decoding{tail}. Figure: {plot_file}")
