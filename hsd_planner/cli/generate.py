"""``hsd-plan generate``: run one hierarchy on one prompt."""

from __future__ import annotations

import click

from hsd_runtime import SamplingConfig

from ..generate import generate_text
from ..limits import MAX_LENGTH
from .loader import make_loader, resolve_dtype_choice
from .options import engine_option, json_option, prepack_option, runtime_options, sampling_options
from .render import emit, format_generate
from .values import parse_widths

__all__ = ["generate"]


@click.command()
@click.option("--chain", required=True, help="Models, smallest first, target last: a,b,c.")
@click.option("--widths", default="", help="One proposal width per level below the target: 4,2.")
@click.option("--prompt", required=True, help="The prompt text.")
@click.option(
    "--max-new-tokens",
    type=click.IntRange(1, MAX_LENGTH),
    default=128,
    show_default=True,
    help="Tokens to generate at most (fewer where an end-of-sequence token comes first).",
)
@click.option("--raw", is_flag=True, help="Do not wrap the prompt in the tokenizer's chat template.")
@click.option("--check", is_flag=True, help="Also decode with the target alone (greedy) and compare.")
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="Run a short untimed generation first.")
@sampling_options
@runtime_options
@prepack_option
@engine_option
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
    lenience: float,
    top_k: int | None,
    top_p: float | None,
    seed: int,
    dtype: str,
    device: str,
    prepack: bool,
    engine: str,
    as_json: bool,
) -> None:
    """Run one hierarchy on one prompt and report per-level stats.

    --check compares with the target's own greedy decoding. With an fp32 target the tokens
    must be identical, and a difference exits with status 1. In bf16/fp16 a batched
    verification pass and an incremental pass round differently and can flip near-ties, so
    --check then reports the first divergence and the agreement rate without failing; so it does
    on llama.cpp, whose passes over several tokens use other kernels than its one-token passes.

    Example:

        hsd-plan generate --chain ngram,smollm2-135m:layers=8,smollm2-135m --widths 4,2 \\
            --prompt "Write a haiku about the sea." --check

        hsd-plan generate --engine llamacpp --chain ngram,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \\
            --widths 8,4 --prompt "Write a function that reverses a string." --check
    """
    if check and mode != "greedy":
        raise click.ClickException("--check compares greedy outputs; use it with --mode greedy")
    sampling = SamplingConfig(mode=mode, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, lenience=lenience)
    loader = make_loader(device, resolve_dtype_choice(dtype, device), prepack, engine)
    report = generate_text(chain, parse_widths(widths), prompt, max_new_tokens, sampling, loader, chat=not raw, check=check, warmup=warmup)
    emit(report, as_json, format_generate)
    if report.check is not None and report.check.exact and not report.check.identical:
        # after the report: one line Error: ... on stderr, exit status 1, as every refusal
        raise click.ClickException(
            f"speculative output differs from the target's greedy output at new token {report.check.first_divergence}"
        )
