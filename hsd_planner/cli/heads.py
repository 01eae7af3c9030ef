"""``hsd-plan heads train``: block-draft heads for a host model (a thin wrapper over :mod:`hsd_planner.training.heads`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hsd_runtime import ModelLoader
from hsd_runtime.terms.limits import MAX_HEADS

from ..limits import MAX_HEAD_INNER
from ..training.heads import HeadsConfig, HeadsReport, HeadsTrainer
from .loader import resolve_dtype_choice
from .options import json_option, prompt_options, runtime_options
from .render import emit
from .training_options import step_options, training_options, vocab_option
from .training_run import run_training

__all__ = ["heads"]


_default = HeadsConfig.field_default


@click.group()
def heads() -> None:
    """Block-draft heads: extra heads on a model's own hidden state that draft a block per pass
    (use the result as bpd:DIR directly below the model)."""


@heads.command("train")
@click.option(
    "--model", "model", default=_default("model"), show_default=True, help="The host: the model spec whose hidden state the heads read."
)
@click.option(
    "--heads",
    "n_heads",
    type=click.IntRange(2, MAX_HEADS),
    default=_default("heads"),
    show_default=True,
    help="H, counting the model's own next-token head (H - 1 heads are trained).",
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for the heads (must be new or empty, unless --resume)."
)
@click.option(
    "--loss",
    type=click.Choice(["kl", "ce"]),
    default=_default("loss"),
    show_default=True,
    help="Forward KL to the host's distribution t + i - 1 positions on, or cross-entropy on its sampled token.",
)
@click.option(
    "--inner",
    type=click.IntRange(1, MAX_HEAD_INNER),
    default=None,
    help="Width of each head's hidden layer [default: the host's hidden size].",
)
@vocab_option("heads", "bpd:DIR (by default; its card names N)")
@prompt_options
@step_options(HeadsConfig)
@training_options(HeadsConfig, "host")
@runtime_options(dtype_help="Dtype of the frozen host; the heads always train in fp32.")
@json_option
def train(n_heads: int, out: str, resume: bool, dtype: str, device: str, as_json: bool, **options: Any) -> None:
    """Train H - 1 block-draft heads on a model's own continuations (blockwise parallel decoding).

    Head i reads the model's final hidden state after position t and predicts token t + i: a
    residual feed-forward block into the model's frozen output layer. The data are the model's
    own continuations of the profiling split's prompts less the --reserve that profile reads (left to profile;
    the validation split is never trained on), sampled once with its top-k distribution at every
    position and cached; one pass per batch gives its hidden states. A checkpoint is saved in --out/checkpoint every
    --checkpoint-every steps and on Ctrl-C; --resume continues it. --out gets the heads
    (heads.safetensors), their card (heads.json, README.md) with each head's held-out acceptance
    and the greedy block efficiency; use it as bpd:DIR directly below the model.

    Example:

        hsd-plan heads train --model smollm2-135m --heads 4 --out heads/smollm2

        hsd-plan generate --chain bpd:heads/smollm2:k=4:p=2:rescore=ngram,smollm2-135m --widths 3 --prompt "Explain tides." --check

        hsd-plan heads train --model qwen2.5-coder-0.5b --vocab 16384 --prompts humaneval --out heads/qwen05
    """
    dtype = resolve_dtype_choice(dtype, device)
    config = HeadsConfig.from_options(heads=n_heads, dtype=dtype, **options)
    trainer = HeadsTrainer(config, Path(out), ModelLoader(device=device, dtype=dtype), resume=resume)
    report = run_training(trainer, "training heads", lambda loss: {"loss": f"{loss:.4f}"})
    emit(report, as_json, _format)


def _format(r: HeadsReport) -> str:
    per_head = ", ".join(
        f"head {i}: {g:.3f}/{s:.3f}" for i, g, s in zip(range(2, r.config.heads + 1), r.acceptance["greedy"], r.acceptance["sample"])
    )
    return (
        f"{r.steps} steps in {r.train_wall_s:.0f} s ({r.positions:,} head positions); final loss {r.final_loss:.4f}\n"
        f"held-out acceptance greedy/T={r.config.temperature:g}: {per_head} ({r.eval_prompts})\n"
        f"greedy block efficiency {r.acceptance['block_greedy']:.3f} (untrained {r.initial['block_greedy']:.3f})\n"
        f"heads saved in {r.out}; use bpd:{r.out} directly below {r.config.model}"
    )
