"""Click options of the trainers (``distill``, ``heads train``, ``steer train``), defaults read from their config classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hsd_runtime.terms.limits import MAX_BATCH, MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE

from ..limits import MAX_COUNT, MAX_LENGTH
from .options import FiniteRange

__all__ = ["max_context_option", "step_options", "training_options", "vocab_option"]

F = TypeVar("F", bound=Callable)


def max_context_option(defaults: Any, drafter: str) -> Callable[[F], F]:
    """``--max-context``: the prompt tokens the trained ``drafter`` reads (the teacher reads all)."""
    return click.option(
        "--max-context",
        type=click.IntRange(0, MAX_LENGTH),
        default=defaults.field_default("max_context"),
        show_default=True,
        help=f"Prompt tokens the {drafter} reads in training, the last ones (0: all); the teacher's signal covers the whole prompt.",
    )


def vocab_option(drafter: str, draft_as: str) -> Callable[[F], F]:
    """``--vocab N``: train the ``drafter`` through its output layer trimmed to N tokens, as it
    will draft (``draft_as``, the spec that drafts through the same layer)."""
    return click.option(
        "--vocab",
        type=click.IntRange(1, MAX_COUNT),
        default=None,
        help=f"Train the {drafter} through the output layer trimmed to its N lowest token ids (end-of-sequence kept), "
        f"as {draft_as} drafts, toward the teacher's law on those N tokens. For a large vocabulary that layer is most "
        "of a small drafter's work [default: the whole layer].",
    )


def step_options(defaults: Any, batch_help: str = "Continuations per step.", lr_help: str = "AdamW learning rate.") -> Callable[[F], F]:
    """A trainer's ``--steps``, ``--train-batch`` (``batch_help``: its minibatch, sequences per step) and ``--lr`` (``lr_help``),
    defaults read from its config class ``defaults``."""
    default, count = defaults.field_default, click.IntRange(1, MAX_COUNT)
    steps = click.option("--steps", type=count, default=default("steps"), show_default=True, help="Optimizer steps in all.")
    batch = click.option("--train-batch", type=count, default=default("train_batch"), show_default=True, help=batch_help)
    lr = click.option("--lr", type=FiniteRange(0, min_open=True), default=default("lr"), show_default=True, help=lr_help)
    return lambda f: steps(batch(lr(f)))


def training_options(defaults: Any, teacher: str) -> Callable[[F], F]:
    """The data pipeline's and the run's options of a trainer (``distill``, ``heads train``), from
    ``--samples-per-prompt`` to ``--resume``, defaults read from its config class ``defaults``;
    ``teacher`` names the model whose continuations and signal the corpus holds."""

    default = defaults.field_default

    def wrap(f: F) -> F:
        options = [
            click.option(
                "--reserve",
                type=click.IntRange(0, MAX_COUNT),
                default=default("reserve"),
                show_default=True,
                help="The N profiling prompts that profile --max-prompts N reads are not trained on: "
                "profile --max-prompts N (or fewer) on the same prompts measures the result on prompts it never saw.",
            ),
            click.option(
                "--samples-per-prompt",
                type=click.IntRange(1, MAX_COUNT),
                default=default("samples_per_prompt"),
                show_default=True,
                help=f"Continuations the {teacher} samples of each training prompt, once (cached).",
            ),
            click.option(
                "--top-k",
                type=click.IntRange(0, MAX_COUNT),
                default=default("top_k"),
                show_default=True,
                help=f"{teacher.capitalize()} logits kept per position (with the log-partition; the rest is one tail bucket); 0 keeps all.",
            ),
            click.option(
                "--gen-batch",
                type=click.IntRange(1, MAX_BATCH),
                default=default("gen_batch"),
                show_default=True,
                help=f"Sequences per batched sampling and per {teacher} pass.",
            ),
            click.option(
                "--cache",
                type=click.Path(file_okay=False),
                default=None,
                help="Folder of cached corpora (continuations and their signal) [default: corpora/ in the model cache, $HSD_PLAN_CACHE].",
            ),
            click.option(
                "--max-new-tokens",
                type=click.IntRange(1, MAX_LENGTH),
                default=default("max_new_tokens"),
                show_default=True,
                help="Length of each generated continuation.",
            ),
            click.option(
                "--temperature",
                type=FiniteRange(MIN_TEMPERATURE, MAX_TEMPERATURE),
                default=default("temperature"),
                show_default=True,
                help="Sampling temperature of the continuations and of the loss.",
            ),
            click.option(
                "--seed",
                type=click.IntRange(0, MAX_SEED),
                default=default("seed"),
                show_default=True,
                help="Seed of the run: the same seed reproduces it.",
            ),
            click.option(
                "--checkpoint-every",
                type=click.IntRange(1, MAX_COUNT),
                default=default("checkpoint_every"),
                show_default=True,
                help="Save a checkpoint every N steps (and at the end).",
            ),
            click.option("--resume", is_flag=True, help="Continue the run checkpointed in --out (same settings; --steps may grow)."),
        ]
        for option in reversed(options):
            f = option(f)
        return f

    return wrap
