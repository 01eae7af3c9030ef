"""The run of a trainer behind a CLI command (``distill``, ``heads train``, ``steer train``):
progress bars, and Ctrl-C turned into a checkpoint and one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from .render import Bars

if TYPE_CHECKING:
    from ..training.runs import TrainingRun

__all__ = ["run_training"]

StepT = TypeVar("StepT")
ReportT = TypeVar("ReportT")


def run_training(trainer: TrainingRun[StepT, ReportT], label: str, postfix: Callable[[StepT], dict[str, str]]) -> ReportT:
    """Prepare the trainer's data (a bar per stage), train it (a bar of steps, ``postfix`` of each
    step's result beside it) and return what its ``finish`` reports.

    Ctrl-C while preparing keeps nothing unfinished (the corpus cache holds only whole corpora);
    while training it saves a checkpoint of the last finished step. Both end with one line.
    """
    bars = Bars()
    try:
        trainer.prepare(bars.stages())
    except KeyboardInterrupt:
        bars.close()
        raise click.ClickException("interrupted while preparing the data; nothing was trained") from None
    bars.start(label, trainer.config.steps)
    bars.step(trainer.step)

    def progress(entry: StepT) -> None:
        bars.postfix(**postfix(entry))
        bars.step(1)

    try:
        trainer.train(progress=progress)
        bars.close()
        return trainer.finish()
    except KeyboardInterrupt:
        bars.close()
        trainer.save_checkpoint()
        raise click.ClickException(f"interrupted at step {trainer.step}; rerun with --resume to continue") from None
