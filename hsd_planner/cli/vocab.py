"""``hsd-plan vocab``: a token ranking for trimmed drafter heads (``vocab=FILE``)."""

from __future__ import annotations

import json

import click

from hsd_runtime import ModelLoader

from ..limits import MAX_COUNT
from ..paths import check_output_path, write_atomic
from ..prompts import load_prompts, split
from ..vocab import TokenRanking, count_ranking
from .options import FORCE_HELP, json_option, prompt_options

__all__ = ["vocab"]


@click.command()
@click.option("--model", "model_spec", required=True, help="The drafter (its tokenizer counts; no weights are run).")
@prompt_options
@click.option("--size", type=click.IntRange(1, MAX_COUNT), required=True, help="Tokens to keep (the N of vocab=N).")
@click.option("--out", required=True, help="The ranking file to write (JSON; a file name: not empty, no trailing '/').")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@json_option
def vocab(
    model_spec: str,
    prompts_file: str | None,
    category: str | None,
    max_prompts: int | None,
    size: int,
    out: str,
    force: bool,
    as_json: bool,
) -> None:
    """Count a prompt set's tokens and write the --size most frequent as a ranking for vocab=FILE.

    The profiling split of the prompt set is counted (the held-out split stays unseen, as for
    every other measurement); tokens never seen follow in id order. A drafter spec
    NAME:vocab=FILE then scores those tokens only; its tokenizer must be the one counted with.

    Example:

        hsd-plan vocab --model qwen2.5-coder-0.5b --prompts humaneval --size 16384 --out he-16k.json

        hsd-plan profile --models qwen2.5-coder-0.5b:vocab=he-16k.json,qwen2.5-coder-1.5b --prompts humaneval
    """
    path = check_output_path(out, "--out", force)  # before the model is loaded
    prompts = split(load_prompts(prompts_file, category), "profile", max_prompts)
    model = ModelLoader("cpu", "fp32", prepack=False).load(model_spec)
    if size >= model.logits_width:
        raise click.ClickException(
            f"--size {size:,} keeps every token of {model_spec}'s {model.logits_width:,}-token output layer; give less"
        )
    tokens, total, distinct, coverage = count_ranking(model, prompts.prompts, size)
    ranking = TokenRanking(
        model=model_spec,
        fingerprint=model.fingerprint,
        prompts=prompts.name,
        prompts_hash=prompts.content_hash,
        counted_tokens=total,
        distinct_tokens=distinct,
        coverage=coverage,
        tokens=tokens,
    )
    write_atomic(path, "--out", lambda tmp: tmp.write_text(json.dumps(ranking.to_dict()) + "\n"))
    if as_json:
        click.echo(json.dumps(ranking.summary() | {"out": out}))
    else:
        click.echo(
            f"wrote {out}: {size:,} tokens of {model_spec}, covering {coverage:.1%} of the {total:,} tokens "
            f"({distinct:,} distinct) of {prompts.name}"
        )
