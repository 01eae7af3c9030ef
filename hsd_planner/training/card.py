"""What a distillation produced: its step log, its typed report and the student's model card."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import DistillConfig

__all__ = ["DistillReport", "StepLog", "model_card"]


@dataclass
class StepLog:
    """One training step: its loss and the student's acceptance on the step's continuations."""

    step: int
    loss: float
    greedy: float  # fraction of positions where the argmaxes agree
    sampled: float  # mean of 1 - TV(p, q) at the temperature: the speculative-sampling acceptance


@dataclass(frozen=True)
class DistillReport:
    """The result of :meth:`Distiller.finish`: the run's settings, its cost and the student's acceptance."""

    out: str
    config: DistillConfig
    steps: int
    train_prompts: str
    train_wall_s: float
    final_loss: float  # moving average
    acceptance_greedy: float  # on held-out prompts
    acceptance_sampled: float  # at the run's temperature
    eval_prompts: str
    log: list[StepLog]
    initial_greedy: float = float("nan")  # the student as built, on the same held-out prompts
    initial_sampled: float = float("nan")
    positions: int = 0  # continuation positions trained on (each with the target's distribution)
    corpus_sequences: int = 0  # sequences of target data (0: on-policy only)
    corpus_s: float = 0.0  # time the data pipeline took to make them (0: read from its cache)

    @property
    def positions_per_s(self) -> float:
        """Teacher-signal positions trained on per second of training."""
        return self.positions / self.train_wall_s if self.train_wall_s > 0 else 0.0

    def to_dict(self) -> dict:
        """The card's JSON (``distill.json``): the settings flattened beside the results."""
        return {
            "out": self.out,
            **self.config.model_dump(exclude={"checkpoint_every"}),
            "steps": self.steps,
            **{
                k: getattr(self, k)
                for k in (
                    "train_prompts",
                    "train_wall_s",
                    "final_loss",
                    "acceptance_greedy",
                    "acceptance_sampled",
                    "initial_greedy",
                    "initial_sampled",
                    "eval_prompts",
                    "positions",
                    "positions_per_s",
                    "corpus_sequences",
                    "corpus_s",
                )
            },
            "log": [asdict(e) for e in self.log],
        }


def _corpus(report: DistillReport) -> str:
    c = report.config
    if c.data == "on-policy":
        return "none (on-policy: every sequence sampled from the student as it trains)"
    made = f"made in {report.corpus_s:.0f} s" if report.corpus_s else "read from the cache"
    kept = "every logit" if c.top_k == 0 else f"its top {c.top_k} logits and log-partition"
    return f"{report.corpus_sequences} sequences ({c.samples_per_prompt} per prompt) sampled from the target, {kept} per position, {made}"


def model_card(report: DistillReport) -> str:
    """The Markdown card of a distilled student."""
    c = report.config
    rows = [
        ("target", f"`{c.target}`"),
        (
            "student",
            f"the target's first {c.layers} decoder layers, final norm and frozen embeddings and head"
            if c.init_model is None
            else f"`{c.init_model}`, all but its frozen embeddings and head trained",
        ),
        ("divergence", c.divergence),
        ("data", f"{c.data} ({report.train_prompts}, validation split excluded)"),
        ("target data", _corpus(report)),
        ("steps x training batch", f"{report.steps} x {c.train_batch} sequences, up to {c.max_new_tokens} new tokens each"),
        ("prompt tokens the student read", f"the last {c.max_context}" if c.max_context else "all"),
        ("output layer", f"trimmed to {c.vocab:,} tokens (draft with `{report.out}:vocab={c.vocab}`)" if c.vocab else "whole"),
        ("positions trained on", f"{report.positions:,} ({report.positions_per_s:,.0f} per second of training)"),
        ("optimizer", f"AdamW, lr {c.lr:g}"),
        ("temperature", f"{c.temperature:g}"),
        ("seed", str(c.seed)),
        ("target dtype", c.dtype),
        ("training wall time", f"{report.train_wall_s:.1f} s"),
        ("final loss (moving average)", f"{report.final_loss:.4f}"),
        ("acceptance, greedy", f"{report.acceptance_greedy:.3f} (as built: {report.initial_greedy:.3f})"),
        (f"acceptance at T = {c.temperature:g}", f"{report.acceptance_sampled:.3f} (as built: {report.initial_sampled:.3f})"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (
        f"# Distilled drafter for {c.target}\n\n"
        "A student trained toward its target by knowledge distillation (DistillSpec, Zhou et al. 2023) with "
        "`hsd-plan distill`, to draft for it in speculative decoding. Acceptance is measured on held-out "
        f"prompts ({report.eval_prompts}): greedy, the fraction of positions where the argmaxes agree; "
        "at the temperature, the mean of 1 - TV(p, q).\n\n"
        f"| setting | value |\n|---|---|\n{table}\n\n"
        "Use it as a model spec, e.g.\n\n"
        f'```\nhsd-plan generate --chain {report.out}{f":vocab={c.vocab}" if c.vocab else ""},{c.target} --widths 4 --prompt "..." --check\n```\n'
    )
