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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from hsd_runtime import HSDError, Hierarchy, LoadedModel, ModelLoader, SamplingConfig, parse_spec

from .divergences import divergence
from .generation import encode_prompt
from .measure import acceptance_from_logits, teacher_forced_logits
from .workloads import load_prompts, split

__all__ = [
    "DistillConfig",
    "DistillError",
    "Distiller",
    "StepLog",
    "build_student",
    "model_card",
    "parse_init",
    "running_average",
    "student_acceptance",
]

EVAL_PROMPTS = 8  # held-out prompts the saved student's acceptance is measured on
EMA_DECAY = 0.9  # of the running loss and acceptance shown while training
_CHECKPOINT = "checkpoint"
_STATE = "state.pt"
# changing these on --resume does not change what the run computes
_RESUMABLE = {"steps", "checkpoint_every"}


class DistillError(HSDError):
    """A distillation that cannot start or go on (bad input, no checkpoint, out of memory)."""


class DistillConfig(BaseModel):
    """Everything that determines a distillation run; every default lives here."""

    model_config = ConfigDict(extra="forbid")

    target: str = "smollm2-135m"
    layers: int  # K: the student keeps the target's first K decoder layers (checked against the target)
    divergence: Literal["fkl", "rkl", "jsd", "tvd"] = "fkl"
    data: Literal["on-policy", "target", "mixed"] = "on-policy"
    prompts: str | None = None  # prompt file; None: the built-in set
    category: str | None = None
    steps: int = Field(300, ge=1)
    batch_size: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    lr: float = Field(1e-4, gt=0)
    temperature: float = Field(1.0, gt=0)
    seed: int = 0
    checkpoint_every: int = Field(50, ge=1)
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"  # the frozen target's; the student trains in fp32


@dataclass
class StepLog:
    """One training step: its loss and the student's acceptance on the step's continuations."""

    step: int
    loss: float
    greedy: float  # fraction of positions where the argmaxes agree
    sampled: float  # mean of 1 - TV(p, q) at the temperature: the speculative-sampling acceptance


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


def parse_init(text: str) -> int:
    """``"layers=K"`` -> K, the number of the target's decoder layers the student starts from."""
    key, _, value = text.partition("=")
    if key.strip() != "layers" or not value.strip().isdigit():
        raise DistillError(f"--init {text!r} is not of the form layers=K (the student starts from the target's first K decoder layers)")
    return int(value)


def build_student(target: nn.Module, k: int) -> nn.Module:
    """A new fp32 model of the target's class with its first ``k`` decoder layers, copied.

    Embeddings, final norm and head are copied too; the input embeddings and the output head are
    frozen (``requires_grad=False``), everything else (decoder layers, final norm) is trainable.
    """
    decoder = getattr(target, target.base_model_prefix, None)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise DistillError(
            f"cannot distill {type(target).__name__}: it is not a transformer decoder with model.layers (Llama, Gemma, Qwen, ... are)"
        )
    if not 1 <= k < len(layers):
        raise DistillError(f"--init layers={k} is out of range: the target has {len(layers)} decoder layers, use 1..{len(layers) - 1}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = k
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types[:k])
    prefix = f"{target.base_model_prefix}.layers."
    kept = {
        name: tensor
        for name, tensor in target.state_dict().items()
        if not name.startswith(prefix) or int(name[len(prefix) :].split(".")[0]) < k
    }
    student = type(target)(cfg)
    student.load_state_dict(kept)  # strict: every student tensor comes from the target
    student.generation_config = copy.deepcopy(target.generation_config)
    student.to(device=next(target.parameters()).device, dtype=torch.float32)
    for frozen in (student.get_input_embeddings(), student.get_output_embeddings()):
        frozen.weight.requires_grad_(False)
    # eval mode throughout: no dropout, so a seed reproduces the run and the student trains as it will draft
    return student.eval()


def _student_logits(student: nn.Module, prompt: list[int], continuation: list[int], width: int) -> torch.Tensor:
    """Student logits ``[len(continuation), width]`` with gradient; row t predicts ``continuation[t]``."""
    device = next(student.parameters()).device
    ids = torch.tensor([prompt + continuation], device=device)  # [1, L + m]
    m = len(continuation)
    return student(input_ids=ids, use_cache=False, logits_to_keep=m + 1).logits[0, :m, :width]


def _sample(model: nn.Module, loaded: LoadedModel, ids: list[int], n: int, sampling: SamplingConfig) -> list[int]:
    """Up to ``n`` new tokens of ``model`` after ``ids`` (fewer when it emits an end-of-sequence token)."""
    alone = Hierarchy([model], [], logits_width=loaded.logits_width, eos_token_ids=loaded.eos_token_ids)
    return alone.generate(ids, n, sampling).tokens


def student_acceptance(
    target: LoadedModel, student: nn.Module, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int = 0
) -> tuple[float, float]:
    """(greedy, sampled at ``temperature``) acceptance of ``student`` by ``target``, as ``profile`` measures it.

    The target's own continuation of each prompt (greedy, resp. sampled) is generated, both models
    are teacher-forced over it, and the per-position acceptance is pooled over all prompts.
    """
    out = []
    for mode in ("greedy", "sample"):
        total, count = 0.0, 0
        for i, ids in enumerate(prompts):
            sampling = SamplingConfig(mode=mode, temperature=temperature, seed=seed + i)
            continuation = _sample(target.model, target, ids, max_new_tokens, sampling)
            p = teacher_forced_logits(target.model, ids, continuation, target.logits_width)
            q = teacher_forced_logits(student, ids, continuation, target.logits_width)
            a = acceptance_from_logits(q, p, sampling)
            total, count = total + float(a.sum()), count + len(a)
        out.append(total / count)
    return out[0], out[1]


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
        self.train_set = split(prompts, "profile")
        self.eval_set = split(prompts, "validate", EVAL_PROMPTS)
        with _out_of_memory_as_error(config):
            self.target = loader.load(config.target)
            target_dtype = parse_spec(config.target).dtype or loader.default_dtype
            # the student starts from fp32 weights even when the target runs in bf16 or fp16
            source = self.target if target_dtype == "fp32" else ModelLoader(str(loader.device), "fp32").load(_without_dtype(config.target))
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
        self.wall_s = 0.0  # training time, summed over resumed sessions
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
        state = torch.load(path, map_location=self.student.device, weights_only=True)
        old = DistillConfig(**state["config"])
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
                out.append(_sample(self.student, self.target, ids, c.max_new_tokens, sampling))
                continue
            if index not in self.target_samples:
                # the target is frozen: its continuation of a prompt is drawn once, seeded by the prompt
                sampling = SamplingConfig(mode="sample", temperature=c.temperature, seed=c.seed + index)
                self.target_samples[index] = _sample(self.target.model, self.target, ids, c.max_new_tokens, sampling)
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
            q = _student_logits(self.student, ids, continuation, width).float()  # [m, V] with grad
            loss = divergence(c.divergence, p, q, c.temperature)
            (loss * len(continuation) / positions).backward()  # weighted: the step's loss is the mean over positions
            q = q.detach()
            loss_sum += float(loss.detach()) * len(continuation)
            # acceptance as profile measures it: argmax agreement, and 1 - TV at the temperature
            greedy_sum += float(acceptance_from_logits(q, p, SamplingConfig()).sum())
            sampled_sum += float(acceptance_from_logits(q, p, SamplingConfig(mode="sample", temperature=c.temperature)).sum())
        self.optimizer.step()
        self.step += 1
        entry = StepLog(self.step, loss_sum / positions, greedy_sum / positions, sampled_sum / positions)
        self.log.append(entry)
        return entry

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

    def finish(self) -> dict:
        """After :meth:`train`: measure held-out acceptance, save the student and its card into ``out``; return the card."""
        c = self.config
        with _out_of_memory_as_error(c):
            greedy, sampled = student_acceptance(self.target, self.student, self.eval_ids, c.max_new_tokens, c.temperature, c.seed)
        self.student.save_pretrained(self.out)
        self.target.tokenizer.save_pretrained(self.out)
        card = {
            "out": str(self.out),
            **c.model_dump(exclude={"checkpoint_every"}),
            "steps": self.step,
            "train_prompts": self.train_set.name,
            "train_wall_s": self.wall_s,
            "final_loss": running_average(self.log).loss,
            "acceptance_greedy": greedy,
            "acceptance_sampled": sampled,
            "eval_prompts": f"{len(self.eval_ids)} prompts of {self.eval_set.name}",
            "log": [asdict(e) for e in self.log],
        }
        (self.out / "distill.json").write_text(json.dumps(card, indent=1))
        (self.out / "README.md").write_text(model_card(card))
        return card


def model_card(card: dict) -> str:
    """The Markdown card of a distilled student, from the dict :meth:`Distiller.finish` returns."""
    rows = [
        ("target", f"`{card['target']}`"),
        ("student", f"the target's first {card['layers']} decoder layers, final norm and frozen embeddings and head"),
        ("divergence", card["divergence"]),
        ("data", f"{card['data']} ({card['train_prompts']}, validation split excluded)"),
        ("steps x batch size", f"{card['steps']} x {card['batch_size']}, {card['max_new_tokens']} new tokens per sequence"),
        ("optimizer", f"AdamW, lr {card['lr']:g}"),
        ("temperature", f"{card['temperature']:g}"),
        ("seed", str(card["seed"])),
        ("target dtype", card["dtype"]),
        ("training wall time", f"{card['train_wall_s']:.1f} s"),
        ("final loss (moving average)", f"{card['final_loss']:.4f}"),
        ("acceptance, greedy", f"{card['acceptance_greedy']:.3f}"),
        (f"acceptance at T = {card['temperature']:g}", f"{card['acceptance_sampled']:.3f}"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (
        f"# Distilled drafter for {card['target']}\n\n"
        "A student trained toward its target by knowledge distillation (DistillSpec, Zhou et al. 2023) with "
        "`hsd-plan distill`, to draft for it in speculative decoding. Acceptance is measured on held-out "
        f"prompts ({card['eval_prompts']}): greedy, the fraction of positions where the argmaxes agree; "
        "at the temperature, the mean of 1 - TV(p, q).\n\n"
        f"| setting | value |\n|---|---|\n{table}\n\n"
        "Use it as a model spec, e.g.\n\n"
        f"```\nhsd-plan generate --chain {card['out']},{card['target']} --widths 4 --prompt \"...\" --check\n```\n"
    )
