"""Steering a drafter with its verifier's hidden states (SD²; Berdoz, Rheinboldt, Wattenhofer 2025).

The data are the verifier's own continuations from the data pipeline's corpus (:mod:`.corpus`): at
every continuation position, the verifier's distribution (top-k logits and the log-partition)
and, from one more frozen pass per batch kept in memory, its taps (the inputs of the layers the
steering reads). Each step draws one staleness offset o in 1..``stale`` (a drafted token is up to
k positions past the verification that set its vectors) and runs the drafter over a batch of
sequences with position t steered by the taps of position t - o; the loss is the divergence
(forward KL by default) between the verifier's distribution and the steered drafter's, over the
continuation positions. The projection trains in fp32; the drafter stays frozen
(``finetune="none"``, gradients flow through it) or trains with it (``full``, saved beside the
steering as a model directory, which the steering then names as its drafter).

The card reports, on held-out prompts (the validation split), the accepted tokens per block of
``stale`` drafts against the verifier's own greedy and sampled continuations, steered and
unsteered (the same drafter without vectors), as the runtime drafts them: token i of a block
steered from i + 1 positions back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from hsd_runtime import LoadedModel, ModelLoader, SamplingConfig, parse_spec
from hsd_runtime.learned.steering import (
    Steerer,
    SteeringCard,
    SteeringForm,
    SteeringProjection,
    default_taps,
    save_steering,
    stale_sources,
    steered_model,
    steering_delta,
)
from hsd_runtime.learned.trained import write_files

from ..choices import Divergence
from ..errors import DistillError
from ..limits import MAX_STALE, MAX_STEER_RANK
from ..profiling.acceptance import acceptance_from_logits, model_conditionals, start_survival, steered_acceptance, teacher_forced_logits
from ..prompts import encode_prompt
from .config import DrafterTrainingConfig, TorchSpec
from .corpus import Corpus, build_corpus, corpus_hidden
from .divergences import sparse_divergence
from .runs import PASS_GROUP, TrainingRun, corpus_key
from .sampling import by_length, last_tokens
from .student import HeldOut, own_student
from .teacher import continuation_logits

__all__ = ["SteerConfig", "SteerReport", "SteerTrainer", "block_acceptance"]

DRAFTER_DIR = "drafter"  # where a fine-tuned drafter is saved, inside --out


class SteerConfig(DrafterTrainingConfig):
    """Everything that determines a steering run; every default lives here (the shared ones in :class:`DrafterTrainingConfig`)."""

    drafter: TorchSpec  # the model steered (a spec)
    verifier: TorchSpec = "smollm2-135m"  # the model whose hidden states steer it
    form: SteeringForm = "lowrank"
    rank: int = Field(64, ge=1, le=MAX_STEER_RANK)  # of W_g, lowrank only
    stale: int = Field(4, ge=1, le=MAX_STALE)  # k: drafted tokens per block, the largest staleness trained
    divergence: Divergence = "fkl"
    finetune: Literal["none", "full"] = "none"
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False)  # the projection's
    drafter_lr: float = Field(1e-5, gt=0, allow_inf_nan=False)  # the drafter's, with finetune=full


@dataclass(frozen=True)
class SteerReport:
    """What a run produced: its cost and the held-out accepted tokens per block, as the card keeps them."""

    out: str
    config: SteerConfig
    steps: int
    train_wall_s: float
    positions: int
    final_loss: float
    acceptance: dict  # mode -> {"steered", "unsteered"}: accepted tokens per block of `stale`, and alpha at offset 1
    corpus_sequences: int
    corpus_s: float
    eval_prompts: str
    drafter: str  # the drafter the steering is for (the fine-tuned one with finetune=full)

    def to_dict(self) -> dict:
        """The report as JSON (``--json``), the settings nested."""
        return {k: v for k, v in self.__dict__.items() if k != "config"} | {"config": self.config.model_dump()}


def _per_block(c: torch.Tensor, k: int) -> tuple[float, int]:
    """Sum over starts t with k positions ahead of the accepted tokens of a block of k (sum_g S_t(g)), and their count."""
    m = c.shape[0] - k + 1
    if m <= 0:
        return 0.0, 0
    survival = start_survival(c[:m, :k])  # [m, k + 1]
    return float(survival[:, 1:].sum()), m


def block_acceptance(drafter: Any, verifier: LoadedModel, held: HeldOut, k: int) -> dict:
    """Held-out accepted tokens per block of ``k`` drafts, steered and unsteered, greedy and at the
    held-out temperature, and the acceptance of the first drafted token (module docstring)."""
    out: dict = {}
    for mode in ("greedy", "sample"):
        sampling = SamplingConfig(mode=mode, temperature=held.temperature)
        sums = {"steered": [0.0, 0], "unsteered": [0.0, 0]}
        alpha = {"steered": [0.0, 0], "unsteered": [0.0, 0]}
        for ids, cont, p in zip(held.prompts, held.continuations[mode], held.target_logits[mode]):
            if not cont:
                continue
            plain = model_conditionals(acceptance_from_logits(teacher_forced_logits(drafter, ids, cont, p.shape[-1]), p, sampling), k)
            steer = steered_acceptance(drafter, verifier.model, ids, cont, p, sampling, k)[0]
            for name, c in (("steered", steer), ("unsteered", plain)):
                total, count = _per_block(c, k)
                sums[name][0] += total
                sums[name][1] += count
                alpha[name][0] += float(c[1:, 0].sum())  # row 0 is read unsteered in both
                alpha[name][1] += len(c) - 1
        out[mode] = {name: float(s / max(n, 1)) for name, (s, n) in sums.items()} | {
            f"alpha_{name}": float(s / max(n, 1)) for name, (s, n) in alpha.items()
        }
    return out


class SteerTrainer(TrainingRun[float, SteerReport]):
    """One steering run into ``out``: build or resume, :meth:`train`, then :meth:`finish`."""

    config: SteerConfig

    def __init__(self, config: SteerConfig, out: Path, loader: ModelLoader, resume: bool = False) -> None:
        if parse_spec(config.drafter).steer or parse_spec(config.verifier).steer:
            raise DistillError("give the drafter and the verifier without steer=: this run makes the steering")
        super().__init__(config, out, resume, teacher=config.verifier)
        plain = loader.with_kernels("plain")  # back-propagated through: plain kernels
        self.verifier = plain.load(config.verifier)
        drafter = plain.load(config.drafter)
        if drafter.fingerprint != self.verifier.fingerprint:
            raise DistillError(f"{config.drafter} and {config.verifier} do not share a tokenizer; steering needs one vocabulary")
        tok = self.verifier.tokenizer
        self.train_ids = [encode_prompt(tok, p) for p in self.train_set.prompts]
        self.eval_ids = [encode_prompt(tok, p) for p in self.eval_set.prompts]
        torch.manual_seed(config.seed)
        # the drafter's own model (a trainable copy with finetune=full), and its steered copy sharing its weights
        self.verifier.model.requires_grad_(False)
        self.base: Any = own_student(drafter.model) if config.finetune == "full" else drafter.model.requires_grad_(False)
        base = self.base
        self.card = self._card(base)
        self.projection = SteeringProjection(self.card).to(loader.device).train()
        self.drafter = steered_model(base, Steerer(self.projection, self.card))
        groups = [{"params": list(self.projection.parameters()), "lr": config.lr}]
        if config.finetune == "full":
            groups.append({"params": [p for p in base.parameters() if p.requires_grad], "lr": config.drafter_lr})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=0.0)
        self.losses: list[float] = []
        self.corpus: Corpus | None = None
        self.corpus_s = 0.0
        self.taps: torch.Tensor | None = None  # [R, len(taps) d]: the verifier's taps at every corpus row
        self.held: HeldOut | None = None
        self.resume()

    def _write_drafter(self, folder: Path) -> None:
        """The fine-tuned drafter (a Hugging Face model directory with the verifier's tokenizer), in ``folder``."""
        self.base.save_pretrained(folder)
        self.verifier.tokenizer.save_pretrained(folder)

    def _card(self, drafter: Any) -> SteeringCard:
        c = self.config
        vcfg, dcfg = self.verifier.model.config, drafter.config
        if c.form != "simple" and not hasattr(drafter.model.layers[0].mlp, "up_proj"):
            raise DistillError(f"{c.drafter} has no SwiGLU up projection to steer; use --form simple")
        return SteeringCard(
            drafter=str(self.out / DRAFTER_DIR) if c.finetune == "full" else c.drafter,
            verifier=c.verifier,
            taps=default_taps(int(vcfg.num_hidden_layers)),
            verifier_hidden=int(vcfg.hidden_size),
            drafter_layers=int(dcfg.num_hidden_layers),
            width=int(dcfg.hidden_size if c.form == "simple" else dcfg.intermediate_size),
            form=c.form,
            rank=c.rank if c.form == "lowrank" else 0,
        )

    def prepare(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """The corpus (or its cache), the verifier's taps at every row of it and the held-out
        continuations; nothing is done twice."""
        c = self.config
        if self.held is None:
            self.held = HeldOut.make(self.verifier, self.eval_ids, c.max_new_tokens, c.temperature, c.seed)
        if self.corpus is None:
            key = corpus_key(c.verifier, self.verifier.model, self.train_set, c)
            t0 = time.perf_counter()
            self.corpus, cached = build_corpus(
                self.verifier, key, self.train_ids, c.gen_batch, Path(c.cache) if c.cache else None, progress
            )
            self.corpus_s = 0.0 if cached else time.perf_counter() - t0
        if self.taps is None:
            self.taps = self._corpus_taps(progress)

    def _corpus_taps(self, progress: Callable[[str, int, int], None] | None) -> torch.Tensor:
        """The verifier's taps at every corpus row ``[R, len(taps) d]``."""
        assert self.corpus is not None
        step = None if progress is None else (lambda done, total: progress("verifier taps", done, total))
        return corpus_hidden(self.verifier.model, self.corpus, self.config.gen_batch, self.card.taps, step)

    # --- checkpoints -------------------------------------------------------------------------

    def _own_state(self) -> dict[str, Any]:
        return {
            "projection": {k: v.detach().cpu() for k, v in self.projection.state_dict().items()},
            "drafter": {k: v.detach().cpu() for k, v in self.base.state_dict().items()} if self.config.finetune == "full" else None,
            "losses": self.losses,
        }

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.projection.load_state_dict(state["projection"])
        if state["drafter"] is not None:
            self.base.load_state_dict(state["drafter"])
        self.losses = state["losses"]

    # --- training ----------------------------------------------------------------------------

    def train_step(self) -> float:
        """One step over ``train_batch`` corpus sequences, all steered from one random offset back
        (drafter passes grouped by length; the groups' gradients add up to the step's)."""
        c, corpus = self.config, self.corpus
        assert corpus is not None
        seqs = self.rng.choice(len(corpus.prompts), size=c.train_batch, replace=len(corpus.prompts) < c.train_batch).tolist()
        offset = int(self.rng.integers(1, c.stale + 1))
        seqs = [s for s in seqs if corpus.continuations[s]]
        if not seqs:
            self.step += 1
            self.losses.append(float("nan"))
            return float("nan")
        prompts = [last_tokens(corpus.prompts[s], c.max_context) for s in seqs]
        total = sum(len(corpus.continuations[s]) for s in seqs)
        self.optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for group in by_length([len(p) + len(corpus.continuations[s]) for s, p in zip(seqs, prompts)], PASS_GROUP):
            part, positions = self._group_loss([seqs[i] for i in group], [prompts[i] for i in group], offset)
            part = part * (positions / total)  # the step's loss is the mean over all its positions
            if not torch.isfinite(part):
                raise DistillError(f"step {self.step + 1}: the loss is {float(part.detach())} (--lr {c.lr:g}); lower --lr and start again")
            part.backward()
            loss += float(part.detach())
        self.optimizer.step()
        self.step += 1
        self.positions += total
        self.losses.append(loss)
        return loss

    def _group_loss(self, seqs: list[int], prompts: list[list[int]], offset: int) -> tuple[torch.Tensor, int]:
        """The mean divergence over the continuation positions of corpus sequences ``seqs`` (their
        prompts cut to ``prompts``), each position t steered by the taps of t - ``offset``; and the
        number of positions."""
        c, corpus, taps = self.config, self.corpus, self.taps
        assert corpus is not None and taps is not None
        conts = [corpus.continuations[s] for s in seqs]
        sources, where_seq, where_pos, rows = [], [], [], []
        for b, (s, p, cont) in enumerate(zip(seqs, prompts, conts)):
            src = stale_sources(len(cont), offset)
            steered = torch.nonzero(src >= 0)[:, 0]  # [n] rows t >= 1
            sources.append(corpus.offsets[s] + src[steered])
            where_seq.append(torch.full_like(steered, b))
            where_pos.append(len(p) - 1 + steered)
            rows.append(torch.arange(corpus.offsets[s], corpus.offsets[s] + len(cont)))
        device = next(self.projection.parameters()).device
        length = max(len(p) + len(x) for p, x in zip(prompts, conts))
        steerer = self.drafter.steerer
        steerer.delta = steering_delta(
            self.projection, taps[torch.cat(sources)].to(device).float(), (torch.cat(where_seq), torch.cat(where_pos)), (len(seqs), length)
        )
        try:
            # a fine-tuned drafter is an fp32 copy, run as a distilled student is; a frozen one runs in its own dtype
            with self.mixed_precision(device, when=c.finetune == "full"):
                q = continuation_logits(self.drafter, prompts, conts, self.verifier.logits_width, grad=True)  # [R, V]
        finally:
            steerer.clear()
        return sparse_divergence(c.divergence, corpus.signal.take(torch.cat(rows)), q, c.temperature), q.shape[0]

    def finish(self) -> SteerReport:
        """Measure the steering on the held-out prompts, save it (and a fine-tuned drafter) and its card into ``out``."""
        self.prepare()
        assert self.held is not None
        self.projection.eval()
        acceptance = block_acceptance(self.drafter, self.verifier, self.held, self.config.stale)
        finite = [x for x in self.losses[-20:] if x == x]
        report = SteerReport(
            out=str(self.out),
            config=self.config,
            steps=self.step,
            train_wall_s=self.wall_s,
            positions=self.positions,
            final_loss=float(np.mean(finite)) if finite else float("nan"),
            acceptance=acceptance,
            corpus_sequences=len(self.corpus.prompts) if self.corpus is not None else 0,
            corpus_s=self.corpus_s,
            eval_prompts=f"{len(self.eval_ids)} prompts of {self.eval_set.name}",
            drafter=self.card.drafter,
        )
        card = self.card.model_copy(
            update={
                "training": {k: v for k, v in report.to_dict().items() if k not in ("acceptance", "out")},
                "acceptance": {"held_out": acceptance, "block": self.config.stale, "prompts": report.eval_prompts},
            }
        )
        if self.config.finetune == "full":
            write_files(self.out / DRAFTER_DIR, "the fine-tuned drafter", self._write_drafter)
        save_steering(self.out, self.projection, card)
        self.write_readme(steer_card_text(report), "the steering's")
        return report


def steer_card_text(r: SteerReport) -> str:
    """The human-readable card of a steering directory (``README.md``)."""
    c = r.config
    rows = "\n".join(
        f"| {mode} | {r.acceptance[mode]['unsteered']:.3f} | **{r.acceptance[mode]['steered']:.3f}** | "
        f"{r.acceptance[mode]['alpha_unsteered']:.3f} | {r.acceptance[mode]['alpha_steered']:.3f} |"
        for mode in ("greedy", "sample")
    )
    return f"""# Steering of {r.drafter} by {c.verifier}

A {c.form} projection ({"rank " + str(c.rank) + ", " if c.form == "lowrank" else ""}drafter {c.finetune if c.finetune == "full" else "frozen"})
from the inputs of the verifier's layers to one vector per drafter layer, set after each
verification. Use as `{r.drafter}:steer={r.out}` directly below `{c.verifier}` in a chain.

Trained {r.steps} steps ({r.positions:,} positions, {r.train_wall_s:.0f} s) with {c.divergence} on
{r.corpus_sequences} continuations of the verifier ({c.samples_per_prompt} per prompt of the
profiling split), staleness 1..{c.stale}, lr {c.lr:g}, training batch {c.train_batch}. Final loss {r.final_loss:.4f}.

Held-out ({r.eval_prompts}), against the verifier's own continuations: accepted tokens per block
of {c.stale} drafts, and the acceptance of a drafted token one position after its verification
("sample" is T = {c.temperature:g}):

| decoding | per block, unsteered | per block, steered | alpha, unsteered | alpha, steered |
|---|---|---|---|---|
{rows}
"""
