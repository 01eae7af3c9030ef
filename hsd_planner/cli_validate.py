"""``hsd-plan validate`` and ``hsd-plan demo``: thin wrappers over the validation library."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from sqlalchemy.orm import Session

from hsd_runtime import ModelLoader

from .options import db_option, json_option, runtime_options
from .plans import format_chain
from .store import Setting

__all__ = ["validate", "demo"]


@click.command()
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
    prompts = split(load_prompts(prompts_file, category), "validate", max_prompts)
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
        f"{'plan':>5} {'kind':<15} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'speed-up p/m':>13} {'accepted p/m':>13}  hierarchy",
    ]
    for p in report["plans"]:
        lines.append(
            f"{p['plan_id']:>5} {p['kind']:<15} {p['predicted_ms_per_token']:>8.2f} {p['measured_ms_per_token']:>8.2f} "
            f"{p['error']:>+7.1%} {p['predicted_speedup']:>6.2f}/{p['measured_speedup']:<6.2f} "
            f"{p['predicted_mean_accepted_length']:>6.2f}/{p['measured_mean_accepted_length']:<6.2f}  {format_chain(p['chain'], p['widths'])}"
        )
    lines.append(f"median |error| {report['median_abs_error']:.1%}; median |speed-up error| {report['median_abs_speedup_error']:.1%}; "
                 f"regret {report['regret']:.1%} (pick: plan {report['pick']}); validation {report['validation_id']} stored")
    return "\n".join(lines)


DEMO_MODELS = "ngram,smollm2-135m:layers=2,smollm2-135m:layers=4,smollm2-135m:layers=8,smollm2-135m"


@click.command()
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
    prompts = split(load_prompts(), "profile", max_prompts)
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
    held_out = split(load_prompts(), "validate", validate_prompts)
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
