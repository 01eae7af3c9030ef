"""DistillSpec: train a student drafter toward its target (Zhou et al. 2023, "DistillSpec").

The student is a real copy of the target's first K decoder layers, final norm and embeddings
(``num_hidden_layers = K``); the embeddings and the output head stay frozen, the decoder layers
and the final norm are trained in fp32. Each step takes ``batch_size`` prompts of the profiling
split (the validation split is never trained on), generates a continuation of each - from the
student (on-policy), from the target, or either with probability 1/2 (mixed) - then
teacher-forces both models over prompt + continuation and minimises the divergence between the
target's and the student's next-token distributions at the continuation's positions.

Sequences are processed one at a time and their gradients accumulated (no padding, no masks),
weighted by their length, so the step's loss is the mean over all continuation positions.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from hsd_runtime import ModelLoader, SamplingConfig, parse_spec

from ..errors import DistillError, ModelOutputError
from ..profiling.acceptance import acceptance_from_logits, teacher_forced_logits
from ..prompts import encode_prompt, load_prompts, split
from .card import DistillReport, StepLog, model_card
from .config import DistillConfig
from .divergences import divergence
from .student import build_student, sample, student_acceptance

__all__ = ["Distiller", "running_average"]

EVAL_PROMPTS = 8  # held-out prompts the saved student's acceptance is measured on
EMA_DECAY = 0.9  # of the running loss and acceptance shown while training
_CHECKPOINT = "checkpoint"
_STATE = "state.pt"
# changing these on --resume does not change what the run computes
_RESUMABLE = {"steps", "checkpoint_every"}


def running_average(log: list[StepLog], decay: float = EMA_DECAY) -> StepLog:
    """The exponential moving average of ``log`` (its first entry starts the average)."""
    avg = copy.copy(log[0])
    for entry in log[1:]:
        avg = StepLog(
            step=entry.step,
            loss=decay * avg.loss + (1 - decay) * entry.loss,
            greedy=decay * avg.greedy + (1 - decay) * entry.greedy,
            sampled=decay * avg.sampled + (1 - decay) * entry.sampled,
        )
    return avg


@contextmanager
def _out_of_memory_as_error(config: DistillConfig) -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:  # torch.OutOfMemoryError is one; the CPU allocator raises a plain one
        text = str(exc)
        if not (isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "not enough memory" in text):
            raise
        raise DistillError(
            f"out of memory at batch size {config.batch_size} and {config.max_new_tokens} new tokens; lower --batch-size or --max-new-tokens"
        ) from None


def _without_dtype(spec: str) -> str:
    parsed = parse_spec(spec)
    return str(parsed.model_copy(update={"options": tuple(kv for kv in parsed.options if kv[0] != "dtype")}))


class Distiller:
    """One distillation run into ``out``: build or resume, :meth:`train`, then :meth:`finish`.

    Raises :class:`DistillError` before writing anything when the input is bad: ``out`` exists and
    is not empty without ``resume``, ``resume`` without a checkpoint or with other settings, an
    incompatible target or K out of range.
    """

    def __init__(self, config: DistillConfig, out: Path, loader: ModelLoader, resume: bool = False) -> None:
        self.config = config
        self.out = Path(out)
        state_file = self.out / _CHECKPOINT / _STATE
        if resume and not state_file.is_file():
            raise DistillError(f"no checkpoint in {self.out / _CHECKPOINT} to resume; run without --resume to start")
        if not resume and self.out.exists() and (not self.out.is_dir() or any(self.out.iterdir())):
            raise DistillError(f"{self.out} exists and is not empty; choose a new --out, or add --resume to continue its run")
        prompts = load_prompts(config.prompts, config.category)
        self.train_set = split(prompts, "profile", config.max_prompts)
        self.eval_set = split(prompts, "validate", EVAL_PROMPTS)
        # the student is copied from the target's state dict, which packed layers do not keep
        loader = loader.with_kernels("plain")
        with _out_of_memory_as_error(config):
            self.target = loader.load(config.target)
            target_dtype = parse_spec(config.target).dtype or loader.default_dtype
            # the student starts from fp32 weights even when the target runs in bf16 or fp16
            source = (
                self.target
                if target_dtype == "fp32"
                else ModelLoader(str(loader.device), "fp32", prepack=False).load(_without_dtype(config.target))
            )
            self.student = build_student(source.model, config.layers)
        tokenizer = self.target.tokenizer
        self.train_ids = [encode_prompt(tokenizer, p) for p in self.train_set.prompts]
        self.eval_ids = [encode_prompt(tokenizer, p) for p in self.eval_set.prompts]
        self.trainable = [(n, p) for n, p in self.student.named_parameters() if p.requires_grad]
        # no weight decay: the student starts from pretrained weights, and decay would pull the norms' gains to 0
        self.optimizer = torch.optim.AdamW([p for _, p in self.trainable], lr=config.lr, weight_decay=0.0)
        self.rng = np.random.default_rng(config.seed)
        self.step = 0
        self.log: list[StepLog] = []
        self.wall_s = 0.0  # training time, summed over resumed runs
        self.target_samples: dict[int, list[int]] = {}  # prompt index -> the target's continuation (frozen target)
        if resume:
            self._load_checkpoint(state_file)

    # --- checkpoints -------------------------------------------------------------------------

    def _state(self) -> dict:
        return {
            "config": self.config.model_dump(),
            "prompts_hash": self.train_set.content_hash,
            "step": self.step,
            "student": {n: p.detach().cpu() for n, p in self.trainable},
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "log": [asdict(e) for e in self.log],
            "wall_s": self.wall_s,
            "target_samples": self.target_samples,
        }

    def save_checkpoint(self) -> Path:
        """Write the run's state to ``out/checkpoint/state.pt`` atomically; return its path.

        The file is written under a temporary name and renamed over the old one, so a kill
        mid-write leaves the previous checkpoint intact.
        """
        folder = self.out / _CHECKPOINT
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{_STATE}.tmp"
        torch.save(self._state(), tmp)
        os.replace(tmp, folder / _STATE)
        return folder / _STATE

    def _load_checkpoint(self, path: Path) -> None:
        try:
            state = torch.load(path, map_location=self.student.device, weights_only=True)
            old = DistillConfig(**state["config"])
        except Exception as exc:  # a truncated or foreign file fails in pickle, zip or key lookups alike
            raise DistillError(
                f"the checkpoint {path} cannot be read ({type(exc).__name__}); delete {path.parent} to start over, or choose a new --out"
            ) from None
        differ = [
            f"{k} {getattr(old, k)!r}"
            for k in DistillConfig.model_fields
            if k not in _RESUMABLE and getattr(old, k) != getattr(self.config, k)
        ]
        if state["prompts_hash"] != self.train_set.content_hash:
            differ.append("other prompts")
        if differ:
            raise DistillError(
                f"the checkpoint in {path.parent} was made with other settings ({', '.join(differ)}); rerun with those, or choose a new --out"
            )
        params = dict(self.trainable)
        with torch.no_grad():
            for name, value in state["student"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.step = state["step"]
        self.log = [StepLog(**e) for e in state["log"]]
        self.wall_s = state["wall_s"]
        self.target_samples = state["target_samples"]

    # --- training ----------------------------------------------------------------------------

    def _continuations(self, picks: np.ndarray, coins: np.ndarray, seeds: np.ndarray) -> list[list[int]]:
        """One continuation per picked prompt, from the student or the target per ``config.data``."""
        c = self.config
        out = []
        for index, coin, seed in zip(picks.tolist(), coins.tolist(), seeds.tolist()):
            ids = self.train_ids[index]
            if c.data == "on-policy" or (c.data == "mixed" and coin < 0.5):
                sampling = SamplingConfig(mode="sample", temperature=c.temperature, seed=seed)
                try:
                    out.append(sample(self.student, self.target, ids, c.max_new_tokens, sampling))
                except ModelOutputError:  # the last update overflowed the student's activations
                    raise self._diverged("the student's probabilities are no longer finite") from None
                continue
            if index not in self.target_samples:
                # the target is frozen: its continuation of a prompt is drawn once, seeded by the prompt
                sampling = SamplingConfig(mode="sample", temperature=c.temperature, seed=c.seed + index)
                self.target_samples[index] = sample(self.target.model, self.target, ids, c.max_new_tokens, sampling)
            out.append(self.target_samples[index])
        return out

    def train_step(self) -> StepLog:
        """Generate the step's continuations, accumulate the divergence's gradient, update the student."""
        c = self.config
        n = len(self.train_ids)
        # every draw is made whatever the data mode, so the RNG stream depends only on the seed
        picks = self.rng.choice(n, size=c.batch_size, replace=n < c.batch_size)
        coins = self.rng.random(c.batch_size)
        seeds = self.rng.integers(2**31, size=c.batch_size)
        continuations = self._continuations(picks, coins, seeds)
        positions = sum(len(x) for x in continuations)
        width = self.target.logits_width
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = greedy_sum = sampled_sum = 0.0
        for index, continuation in zip(picks.tolist(), continuations):
            ids = self.train_ids[index]
            p = teacher_forced_logits(self.target.model, ids, continuation, width)  # [m, V] fp32, no grad
            q = teacher_forced_logits(self.student, ids, continuation, width, grad=True)  # [m, V] with grad
            loss = divergence(c.divergence, p, q, c.temperature)
            if not torch.isfinite(loss):
                raise self._diverged(f"the loss is {float(loss)}")
            (loss * len(continuation) / positions).backward()  # weighted: the step's loss is the mean over positions
            q = q.detach()
            loss_sum += float(loss.detach()) * len(continuation)
            # acceptance as profile measures it: argmax agreement, and 1 - TV at the temperature
            greedy_sum += float(acceptance_from_logits(q, p, SamplingConfig()).sum())
            sampled_sum += float(acceptance_from_logits(q, p, SamplingConfig(mode="sample", temperature=c.temperature)).sum())
        self.optimizer.step()
        if not all(bool(torch.isfinite(w).all()) for w in self.student.parameters() if w.requires_grad):
            raise self._diverged("the update made the student's weights non-finite")
        self.step += 1
        entry = StepLog(self.step, loss_sum / positions, greedy_sum / positions, sampled_sum / positions)
        self.log.append(entry)
        return entry

    def _diverged(self, what: str) -> DistillError:
        """Training stops rather than save or evaluate a student whose numbers are no longer finite."""
        return DistillError(
            f"step {self.step + 1}: {what} (--lr {self.config.lr:g}); nothing of this step was saved: "
            "lower --lr, and --resume from the last checkpoint or start again"
        )

    def train(self, progress: Callable[[StepLog], None] | None = None) -> None:
        """Run steps until ``config.steps``, checkpointing every ``checkpoint_every`` steps and at the end.

        ``progress`` is called after every step with the step's log. On KeyboardInterrupt the
        caller may :meth:`save_checkpoint`: the state is that of the last finished step, unless
        the interrupt hit the optimizer's update itself.
        """
        with _out_of_memory_as_error(self.config):
            while self.step < self.config.steps:
                t0 = time.perf_counter()
                entry = self.train_step()
                self.wall_s += time.perf_counter() - t0
                if progress is not None:
                    progress(entry)
                if self.step % self.config.checkpoint_every == 0 and self.step < self.config.steps:
                    self.save_checkpoint()
        self.save_checkpoint()

    # --- the result --------------------------------------------------------------------------

    def finish(self) -> DistillReport:
        """After :meth:`train`: measure held-out acceptance, save the student and its card into ``out``; return the report."""
        c = self.config
        with _out_of_memory_as_error(c):
            greedy, sampled = student_acceptance(self.target, self.student, self.eval_ids, c.max_new_tokens, c.temperature, c.seed)
        self.student.save_pretrained(self.out)
        self.target.tokenizer.save_pretrained(self.out)
        report = DistillReport(
            out=str(self.out),
            config=c,
            steps=self.step,
            train_prompts=self.train_set.name,
            train_wall_s=self.wall_s,
            final_loss=running_average(self.log).loss,
            acceptance_greedy=greedy,
            acceptance_sampled=sampled,
            eval_prompts=f"{len(self.eval_ids)} prompts of {self.eval_set.name}",
            log=list(self.log),
        )
        (self.out / "distill.json").write_text(json.dumps(report.to_dict(), indent=1))
        (self.out / "README.md").write_text(model_card(report))
        return report
