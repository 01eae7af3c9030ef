"""``hsd-plan steer train``: steering of a drafter by its verifier (a thin wrapper over :mod:`hsd_planner.training.steer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hsd_runtime import ModelLoader

from ..choices import DIVERGENCE_NAMES
from ..limits import MAX_STALE, MAX_STEER_RANK
from ..training.steer import SteerConfig, SteerReport, SteerTrainer
from .loader import resolve_dtype_choice
from .options import FiniteRange, json_option, prompt_options, runtime_options
from .render import emit
from .training_options import max_context_option, step_options, training_options
from .training_run import run_training

__all__ = ["steer"]


_default = SteerConfig.field_default


@click.group()
def steer() -> None:
    """Steering: a drafter that adds, after each verification, vectors computed from its verifier's
    hidden states (use the result as DRAFTER:steer=DIR directly below the verifier)."""


@steer.command("train")
@click.option("--drafter", required=True, help="The model spec steered (e.g. a distilled student, or smollm2-135m:layers=4).")
@click.option("--verifier", default=_default("verifier"), show_default=True, help="The model spec whose hidden states steer it.")
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for the steering (must be new or empty, unless --resume)."
)
@click.option(
    "--form",
    type=click.Choice(["lowrank", "full", "simple"]),
    default=_default("form"),
    show_default=True,
    help="W_g: low rank (B A), full, or simple (one vector per layer after its MLP).",
)
@click.option(
    "--rank", type=click.IntRange(1, MAX_STEER_RANK), default=_default("rank"), show_default=True, help="Rank of W_g (--form lowrank)."
)
@click.option(
    "--stale",
    type=click.IntRange(1, MAX_STALE),
    default=_default("stale"),
    show_default=True,
    help="Drafted tokens per block: each step steers from 1..STALE positions back, as drafts are.",
)
@click.option(
    "--divergence",
    type=click.Choice(DIVERGENCE_NAMES),
    default=_default("divergence"),
    show_default=True,
    help="What is minimised between the verifier's distribution and the steered drafter's.",
)
@click.option(
    "--finetune",
    type=click.Choice(["none", "full"]),
    default=_default("finetune"),
    show_default=True,
    help="Keep the drafter frozen, or train it with the steering (saved in --out/drafter).",
)
@prompt_options
@step_options(SteerConfig, lr_help="AdamW learning rate of the projection.")
@click.option(
    "--drafter-lr",
    type=FiniteRange(0, min_open=True),
    default=_default("drafter_lr"),
    show_default=True,
    help="AdamW learning rate of the drafter (--finetune full).",
)
@max_context_option(SteerConfig, "drafter")
@training_options(SteerConfig, "verifier")
@runtime_options(dtype_help="Dtype of the frozen verifier (and a frozen drafter); the steering always trains in fp32.")
@json_option
def train(out: str, resume: bool, dtype: str, device: str, as_json: bool, **options: Any) -> None:
    """Train the steering of a drafter by its verifier (SD²: steering pretrained drafters).

    After every verification, the verifier's hidden states entering three of its layers (3, L/2,
    L - 3) at the last position it computed are projected into one vector per drafter layer,
    added inside the drafter's SwiGLU until the next verification. The data are the verifier's
    own continuations of the profiling split's prompts less the --reserve that profile reads (left to profile;
    cached; the validation split is never trained on); one more pass gives its hidden states. A
    checkpoint is saved in --out/checkpoint every --checkpoint-every steps and on Ctrl-C; --resume
    continues it. --out gets the projection (steering.safetensors), its card (steering.json,
    README.md) with the held-out accepted tokens per block, steered and unsteered.

    Example:

        hsd-plan steer train --drafter students/smol-l4 --verifier smollm2-135m --out steer/smol-l4

        hsd-plan generate --chain students/smol-l4:steer=steer/smol-l4,smollm2-135m --widths 4 --prompt "Explain tides." --check
    """
    dtype = resolve_dtype_choice(dtype, device)
    config = SteerConfig.from_options(dtype=dtype, **options)
    trainer = SteerTrainer(config, Path(out), ModelLoader(device=device, dtype=dtype), resume=resume)
    report = run_training(trainer, "training steering", lambda loss: {"loss": f"{loss:.4f}"})
    emit(report, as_json, _format)


def _format(r: SteerReport) -> str:
    a, k = r.acceptance, r.config.stale
    per_mode = "; ".join(
        f"{'greedy' if mode == 'greedy' else f'T={r.config.temperature:g}'} {a[mode]['steered']:.3f} (unsteered {a[mode]['unsteered']:.3f})"
        for mode in ("greedy", "sample")
    )
    return (
        f"{r.steps} steps in {r.train_wall_s:.0f} s ({r.positions:,} positions); final loss {r.final_loss:.4f}\n"
        f"held-out accepted tokens per block of {k}: {per_mode} ({r.eval_prompts})\n"
        f"steering saved in {r.out}; use {r.drafter}:steer={r.out} directly below {r.config.verifier}"
    )
