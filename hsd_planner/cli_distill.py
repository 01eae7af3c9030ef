"""``hsd-plan distill``: a thin wrapper over :mod:`hsd_planner.distill`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hsd_runtime import ModelLoader

from .distill import DistillConfig, Distiller, parse_init, running_average
from .options import json_option, runtime_options

__all__ = ["distill"]


def _default(name: str):
    return DistillConfig.model_fields[name].default


@click.command()
@click.option("--target", default=_default("target"), show_default=True, help="The target model spec to distill.")
@click.option("--init", "init", required=True, help="layers=K: the student starts from the target's first K decoder layers.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory for the student (must be new or empty, unless --resume).")
@click.option("--divergence", type=click.Choice(["fkl", "rkl", "jsd", "tvd"]), default=_default("divergence"), show_default=True,
              help="Forward KL, reverse KL, Jensen-Shannon (beta 0.5) or total variation.")
@click.option("--data", type=click.Choice(["on-policy", "target", "mixed"]), default=_default("data"), show_default=True,
              help="Continuations sampled from the student, from the target, or either with probability 1/2.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), default=None,
              help="JSONL ('prompt' or Spec-Bench 'turns') or text file, one prompt per line [default: the built-in set].")
@click.option("--category", default=None, help="Keep only JSONL rows of this category.")
@click.option("--steps", type=click.IntRange(min=1), default=_default("steps"), show_default=True, help="Optimizer steps in all.")
@click.option("--batch-size", type=click.IntRange(min=1), default=_default("batch_size"), show_default=True, help="Prompts per step.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=_default("max_new_tokens"), show_default=True,
              help="Length of each generated continuation.")
@click.option("--lr", type=click.FloatRange(0, min_open=True), default=_default("lr"), show_default=True, help="AdamW learning rate.")
@click.option("--temperature", type=click.FloatRange(0, min_open=True), default=_default("temperature"), show_default=True,
              help="Sampling temperature of the continuations and of the divergence.")
@click.option("--seed", type=int, default=_default("seed"), show_default=True, help="Seed of the run: the same seed reproduces it.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=_default("checkpoint_every"), show_default=True,
              help="Save a checkpoint every N steps (and at the end).")
@click.option("--resume", is_flag=True, help="Continue the run checkpointed in --out (same settings; --steps may grow).")
@runtime_options(dtype_help="Dtype of the frozen target; the student always trains in fp32.")
@json_option
def distill(target, init, out, divergence, data, prompts_file, category, steps, batch_size, max_new_tokens, lr, temperature,
            seed, checkpoint_every, resume, dtype, device, as_json) -> None:
    """Train a student drafter toward a target by knowledge distillation (DistillSpec).

    The student is a copy of the target's first K decoder layers, final norm and embeddings
    (embeddings and head frozen, the rest trained in fp32). Each step samples --batch-size
    prompts of the profiling split (the validation split is never trained on), generates a
    continuation of each from the student (on-policy), the target, or either (mixed), and
    minimises the divergence between the target's and the student's next-token distributions
    over it. DistillSpec (Zhou et al. 2023) found forward KL and total variation best for greedy
    decoding. A checkpoint is saved in --out/checkpoint every --checkpoint-every steps and on
    Ctrl-C; --resume continues it. The student is saved in --out as a Hugging Face model
    directory with a card (README.md, distill.json) holding its acceptance on held-out prompts;
    use --out as a model spec in profile, solve, validate and generate.

    Example:

        hsd-plan distill --target smollm2-135m --init layers=4 --out students/l4-fkl --dtype bf16

        hsd-plan generate --chain students/l4-fkl,smollm2-135m --widths 4 --prompt "Explain tides." --check
    """
    from tqdm import tqdm

    config = DistillConfig(
        target=target, layers=parse_init(init), divergence=divergence, data=data, prompts=prompts_file, category=category,
        steps=steps, batch_size=batch_size, max_new_tokens=max_new_tokens, lr=lr, temperature=temperature, seed=seed,
        checkpoint_every=checkpoint_every, dtype=dtype,
    )
    distiller = Distiller(config, Path(out), ModelLoader(device=device, dtype=dtype), resume=resume)
    bar = tqdm(desc="distilling", total=config.steps, initial=distiller.step, unit="step", file=sys.stderr, disable=None)

    def progress(_) -> None:
        avg = running_average(distiller.log)
        bar.set_postfix(loss=f"{avg.loss:.4f}", greedy=f"{avg.greedy:.3f}", sampled=f"{avg.sampled:.3f}", refresh=False)
        bar.update(1)

    try:
        distiller.train(progress=progress)
        bar.close()
        card = distiller.finish()
    except KeyboardInterrupt:
        bar.close()
        distiller.save_checkpoint()
        raise click.ClickException(f"interrupted at step {distiller.step}; rerun with --resume to continue") from None
    if as_json:
        click.echo(json.dumps(card))
        return
    click.echo(f"{card['steps']} steps in {card['train_wall_s']:.0f} s; final loss (moving average) {card['final_loss']:.4f}")
    click.echo(f"held-out acceptance: greedy {card['acceptance_greedy']:.3f}, at T={config.temperature:g} {card['acceptance_sampled']:.3f} "
               f"({card['eval_prompts']})")
    click.echo(f"student saved in {out} (card: {Path(out) / 'README.md'})")
