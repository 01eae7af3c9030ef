"""What every trainer's run shares: its folder (new, or a checkpoint to resume), its prompt splits,
the key of the data pipeline's corpus it trains on, and the step loop with its checkpoints
(:class:`TrainingRun`, the base of the distiller, the heads trainer and the steering trainer).

The output folder and the corpus cache are checked before any model is loaded, so a folder that
cannot be written is refused in one line at once rather than after minutes of work; every file a
run writes goes through a private folder and a rename (:func:`hsd_runtime.learned.trained.write_files`),
whole or not at all, with the mode the umask allows.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from hsd_runtime.learned.trained import write_files
from hsd_runtime.models.files import check_folder, open_input, stat_path

from ..errors import DistillError
from ..limits import MAX_CHECKPOINT_BYTES
from ..prompts import PromptSet, load_prompts, split, write_trained_prompts
from .config import TrainingConfig
from .corpus import CorpusKey, check_cache, model_digest

__all__ = ["CHECKPOINT", "EVAL_PROMPTS", "PASS_GROUP", "STATE", "TrainingRun", "check_run_folder", "corpus_key", "corpus_request"]

CHECKPOINT = "checkpoint"  # the folder of a run's checkpoint, inside its --out
STATE = "state.pt"
# sequences per pass of a trained drafter within a step, grouped by length (a padded pass pays for
# its longest row); measured on Spec-Bench (16 sequences, prompts cut to 256 tokens, a 4-layer
# SmolLM2 student), the step's forward and backward passes: 3.1 s in one padded pass, 2.2 s in
# groups of 8, 2.1 s in groups of 4
PASS_GROUP = 4
EVAL_PROMPTS = 8  # held-out prompts (of the validation split) a run's result is measured on
# settings older checkpoints name otherwise: their names now
RENAMED = {"batch_size": "train_batch"}


def renamed(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved settings under their names now."""
    return {RENAMED.get(key, key): value for key, value in saved.items()}


# changing these on --resume does not change what the run computes
RESUMABLE = frozenset({"steps", "checkpoint_every", "gen_batch", "cache"})
StepT = TypeVar("StepT")
ReportT = TypeVar("ReportT")


def check_run_folder(out: Path, resume: bool) -> Path:
    """The checkpoint file of the run in ``out``; refuses, before anything is written: an ``out``
    that is not a folder and cannot be made one, or that this user may not write into
    (:func:`hsd_runtime.models.files.check_folder`), ``resume`` without a checkpoint (or with a FIFO or
    a folder in its place), and a new run into a folder that is not empty."""
    exists = check_folder(out, "--out")
    state_file = out / CHECKPOINT / STATE
    if resume and stat_path(state_file, "the checkpoint") is None:
        raise DistillError(f"no checkpoint in {out / CHECKPOINT} to resume; run without --resume to start")
    if resume:
        open_input(state_file, "the checkpoint", MAX_CHECKPOINT_BYTES).close()  # regular and bounded, or one line now
    elif exists and any(out.iterdir()):
        raise DistillError(f"{out} exists and is not empty; choose a new --out, or add --resume to continue its run")
    return state_file


def _key_fields(spec: str, prompts: PromptSet, config: Any) -> dict[str, Any]:
    """What a corpus key holds besides the teacher's weights."""
    return {
        "target": spec,
        "prompts": prompts.name,
        "prompts_hash": prompts.content_hash,
        "samples_per_prompt": config.samples_per_prompt,
        "max_new_tokens": config.max_new_tokens,
        "temperature": config.temperature,
        "top_k": config.top_k,
        "seed": config.seed,
    }


def corpus_key(spec: str, model: nn.Module, prompts: PromptSet, config: Any) -> CorpusKey:
    """The corpus key of teacher ``spec`` (loaded as ``model``) on ``prompts`` (the training split)
    with ``config``'s data settings (samples per prompt, length, temperature, top-k, seed)."""
    return CorpusKey(weights=model_digest(model), **_key_fields(spec, prompts, config))


def corpus_request(spec: str, prompts: PromptSet, config: Any) -> str:
    """Where the corpus of :func:`corpus_key` lives in the cache (:attr:`CorpusKey.request`),
    known before the teacher is loaded: the request leaves the weights out."""
    return CorpusKey(weights="", **_key_fields(spec, prompts, config)).request


class TrainingRun(ABC, Generic[StepT, ReportT]):
    """One training run into ``out``: build or resume, :meth:`train`, then :meth:`finish`.

    The base keeps what every trainer shares: the run folder (checked before anything is written),
    the training split (the profiling split less the prompts left to ``profile``) and the validation
    split to measure on, the seeded RNG every draw comes from, the step count, training time and
    positions trained on, the step loop with a checkpoint every ``checkpoint_every`` steps and at
    the end, and resuming from it (refused with one line when the checkpoint is unreadable or was
    made with other settings). A trainer sets ``optimizer``, implements :meth:`train_step`,
    :meth:`prepare` :meth:`finish` and its part of the checkpoint, and calls :meth:`resume` at the
    end of its constructor.

    ``teacher`` is the spec of the model whose corpus the run trains on (None: none, on-policy):
    its place in the cache is checked here with ``out``, before the trainer loads any model.
    """

    optimizer: torch.optim.Optimizer

    def __init__(self, config: TrainingConfig, out: Path, resume: bool, teacher: str | None = None) -> None:
        self.config = config
        self.out = Path(out)
        state_file = check_run_folder(self.out, resume)
        self._resume_from = state_file if resume else None
        prompts = load_prompts(config.prompts, config.category)
        # the profiling split less what `profile --max-prompts reserve` reads (prompts.split)
        self.train_set = split(prompts, "train", config.max_prompts, config.reserve)
        self.eval_set = split(prompts, "validate", EVAL_PROMPTS)
        if teacher is not None:
            root = Path(config.cache) if config.cache else None
            check_cache(root, corpus_request(teacher, self.train_set, config), "--cache" if config.cache else "the corpus cache")
        self.rng = np.random.default_rng(config.seed)
        self.step = 0
        self.wall_s = 0.0  # training time, summed over resumed runs
        self.positions = 0  # positions trained on, summed over resumed runs

    # --- what a trainer adds -----------------------------------------------------------------

    @abstractmethod
    def prepare(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """Make (or read from the cache) what the steps train on; nothing is done twice."""

    @abstractmethod
    def train_step(self) -> StepT:
        """One optimizer step; what it returns is passed to :meth:`train`'s ``progress``."""

    @abstractmethod
    def finish(self) -> ReportT:
        """After :meth:`train`: measure the result on the held-out prompts, save it into ``out``, report."""

    @abstractmethod
    def _own_state(self) -> dict[str, Any]:
        """The trainer's part of a checkpoint: its trained weights and its log."""

    @abstractmethod
    def _load_own_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_own_state`'s part of ``state``."""

    def _read_config(self, saved: dict[str, Any]) -> TrainingConfig:
        """The settings a checkpoint was made with (a trainer fills in fields older runs lacked:
        runs from before the reserve trained on the whole profiling split; older runs named the
        minibatch ``batch_size``)."""
        return type(self.config)(**{"reserve": 0, **renamed(saved)})

    def mixed_precision(self, device: torch.device, when: bool = True) -> torch.autocast:
        """bf16 autocast around the passes of what trains (its weights, the optimizer and the loss
        stay fp32) when the frozen model runs in bf16 (``--dtype``) and ``when``: about twice the
        matmul rate where bf16 is native."""
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=when and self.config.dtype == "bf16")

    def _guard(self) -> AbstractContextManager[None]:
        """Around the step loop: a trainer turns its failures (out of memory) into one-line errors."""
        return nullcontext()

    # --- shared ------------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Write the run's state to ``out/checkpoint/state.pt`` atomically, and the record of its
        training prompts to ``out/trained_prompts.json``; return the state's path.

        The file is written under a temporary name and renamed over the old one, so a kill
        mid-write leaves the previous checkpoint intact.
        """
        state = {
            "config": self.config.model_dump(),
            "prompts_hash": self.train_set.content_hash,
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "wall_s": self.wall_s,
            "positions": self.positions,
        } | self._own_state()
        folder = self.out / CHECKPOINT
        write_files(folder, "the checkpoint", lambda stage: torch.save(state, stage / STATE))
        record = self.train_set, self.config.reserve  # what profile checks its prompts against
        write_files(self.out, "the training-prompt record", lambda stage: write_trained_prompts(stage, *record))
        return folder / STATE

    def write_readme(self, text: str, whose: str) -> None:
        """Write ``text``, the human-readable card, as ``README.md`` in the run's folder, whole or not
        at all (``whose`` card it is names it in the one-line error)."""
        write_files(self.out, f"{whose} README.md", lambda stage: (stage / "README.md").write_text(text))

    def resume(self) -> None:
        """Continue from the checkpoint when the run was opened with ``resume`` (else nothing)."""
        path = self._resume_from
        if path is None:
            return
        try:
            with open_input(path, "the checkpoint", MAX_CHECKPOINT_BYTES) as fh:  # never a FIFO swapped in since the check
                state = torch.load(fh, map_location="cpu", weights_only=True)
            old = self._read_config(state["config"])
        except Exception as exc:  # a truncated or foreign file fails in pickle, zip or key lookups alike
            raise DistillError(
                f"the checkpoint {path} cannot be read ({type(exc).__name__}); delete {path.parent} to start over, or choose a new --out"
            ) from None
        fields = type(self.config).model_fields
        differ = [f"{k} {getattr(old, k)!r}" for k in fields if k not in RESUMABLE and getattr(old, k) != getattr(self.config, k)]
        if state["prompts_hash"] != self.train_set.content_hash:
            differ.append("other prompts")
        if differ:
            raise DistillError(
                f"the checkpoint in {path.parent} was made with other settings ({', '.join(differ)}); rerun with those, or choose a new --out"
            )
        self._load_own_state(state)
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.step, self.wall_s, self.positions = state["step"], state["wall_s"], state.get("positions", 0)

    def train(self, progress: Callable[[StepT], None] | None = None) -> None:
        """Run steps until ``config.steps``, checkpointing every ``checkpoint_every`` steps and at the end.

        ``progress`` is called after every step with what the step returned. On KeyboardInterrupt
        the caller may :meth:`save_checkpoint`: the state is that of the last finished step,
        unless the interrupt hit the optimizer's update itself.
        """
        self.prepare()
        with self._guard():
            while self.step < self.config.steps:
                t0 = time.perf_counter()
                entry = self.train_step()
                self.wall_s += time.perf_counter() - t0
                if progress is not None:
                    progress(entry)
                if self.step % self.config.checkpoint_every == 0 and self.step < self.config.steps:
                    self.save_checkpoint()
        self.save_checkpoint()
