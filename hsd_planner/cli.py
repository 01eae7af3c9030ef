"""The ``hsd-plan`` command line: thin wrappers over library functions."""

from __future__ import annotations

import json
import sys

import click
from pydantic import ValidationError

from hsd_runtime import HSDError, ModelLoader, SamplingConfig

from .generation import GenerateReport, generate_text
from .options import json_option, parse_widths, runtime_options, sampling_options

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
