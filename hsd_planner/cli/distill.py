"""``hsd-plan distill``: a thin wrapper over :mod:`hsd_planner.training`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hsd_runtime import ModelLoader

from ..choices import DISTILL_DATA, DIVERGENCE_NAMES
from ..training import DistillConfig, Distiller, DistillReport, StepLog, parse_init, running_average
from .loader import resolve_dtype_choice
from .options import json_option, prompt_options, runtime_options
from .render import emit
from .training_options import max_context_option, step_options, training_options, vocab_option
from .training_run import run_training

__all__ = ["distill"]


_default = DistillConfig.field_default


@click.command()
@click.option("--target", default=_default("target"), show_default=True, help="The target model spec to distill.")
@click.option(
    "--init",
    "init",
    required=True,
    help="layers=K: the student starts from the target's first K decoder layers; or a model spec of the target's tokenizer, trained whole.",
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for the student (must be new or empty, unless --resume)."
)
@click.option(
    "--divergence",
    type=click.Choice(DIVERGENCE_NAMES),
    default=_default("divergence"),
    show_default=True,
    help="Forward KL, reverse KL, Jensen-Shannon (beta 0.5) or total variation.",
)
@click.option(
    "--data",
    type=click.Choice(DISTILL_DATA),
    default=_default("data"),
    show_default=True,
    help="Continuations sampled from the student, from the target, or either with probability 1/2.",
)
@prompt_options
@step_options(DistillConfig, batch_help="Sequences per step (every continuation position of each is trained on).")
@max_context_option(DistillConfig, "student")
@vocab_option("student", "DIR:vocab=N")
@training_options(DistillConfig, "target")
@runtime_options(dtype_help="Dtype of the frozen target; the student always trains in fp32.")
@json_option
def distill(init: str, out: str, resume: bool, dtype: str, device: str, as_json: bool, **options: Any) -> None:
    """Train a student drafter toward a target by knowledge distillation (DistillSpec).

    The student is a copy of the target's first K decoder layers, final norm and embeddings (--init
    layers=K), or of another model of the target's tokenizer (--init SPEC, e.g. the 0.5B toward the
    1.5B); embeddings and head stay frozen, the rest trains in fp32. Each step takes --train-batch
    sequences - continuations of prompts of the profiling split less the --reserve that
    profile measures on (the validation split is never trained on) - sampled from the student
    (on-policy), from the target (target data: --samples-per-prompt per prompt, sampled once with
    the target's top-k distribution at every position and cached for every later run), or either
    (mixed) - and minimises the divergence between the target's and the student's next-token
    distributions at every position of them (the student reads the last --max-context prompt tokens;
    its passes are grouped by length). DistillSpec (Zhou et al. 2023) found forward KL and total
    variation best for greedy decoding. A checkpoint is saved in --out/checkpoint every
    --checkpoint-every steps and on Ctrl-C; --resume continues it. The student is saved in --out as
    a Hugging Face model directory with a card (README.md, distill.json) holding its acceptance on
    held-out prompts; use --out as a model spec in profile, solve, validate and generate.

    Example:

        hsd-plan distill --target smollm2-135m --init layers=4 --out students/l4-fkl

        hsd-plan distill --target qwen2.5-coder-1.5b --init qwen2.5-coder-0.5b --prompts humaneval --out students/0.5b

        hsd-plan generate --chain students/l4-fkl,smollm2-135m --widths 4 --prompt "Explain tides." --check
    """
    dtype = resolve_dtype_choice(dtype, device)
    layers, init_model = parse_init(init)
    config = DistillConfig.from_options(layers=layers, init_model=init_model, dtype=dtype, **options)
    distiller = Distiller(config, Path(out), ModelLoader(device=device, dtype=dtype), resume=resume)

    def postfix(_: StepLog) -> dict[str, str]:
        avg = running_average(distiller.log)
        return {"loss": f"{avg.loss:.4f}", "greedy": f"{avg.greedy:.3f}", "sampled": f"{avg.sampled:.3f}"}

    report = run_training(distiller, "distilling", postfix)
    emit(report, as_json, _format)


def _format(r: DistillReport) -> str:
    return (
        f"{r.steps} steps in {r.train_wall_s:.0f} s ({r.positions:,} positions, {r.positions_per_s:,.0f}/s); "
        f"final loss (moving average) {r.final_loss:.4f}\n"
        f"held-out acceptance: greedy {r.acceptance_greedy:.3f} (as built {r.initial_greedy:.3f}), "
        f"at T={r.config.temperature:g} {r.acceptance_sampled:.3f} (as built {r.initial_sampled:.3f}) ({r.eval_prompts})\n"
        f"student saved in {r.out} (card: {Path(r.out) / 'README.md'})"
    )
