"""What every trainer's run shares: its folder (new, or a checkpoint to resume) and the key of the
data engine's corpus it trains on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ..errors import DistillError
from ..prompts import PromptSet
from .data import CorpusKey, model_digest

__all__ = ["CHECKPOINT", "STATE", "check_run_folder", "corpus_key"]

CHECKPOINT = "checkpoint"  # the folder of a run's checkpoint, inside its --out
STATE = "state.pt"


def check_run_folder(out: Path, resume: bool) -> Path:
    """The checkpoint file of the run in ``out``; refuses, before anything is written, ``resume``
    without a checkpoint and a new run into a folder that is not empty."""
    state_file = out / CHECKPOINT / STATE
    if resume and not state_file.is_file():
        raise DistillError(f"no checkpoint in {out / CHECKPOINT} to resume; run without --resume to start")
    if not resume and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DistillError(f"{out} exists and is not empty; choose a new --out, or add --resume to continue its run")
    return state_file


def corpus_key(spec: str, model: nn.Module, prompts: PromptSet, config: Any) -> CorpusKey:
    """The corpus key of teacher ``spec`` (loaded as ``model``) on ``prompts`` (the training split)
    with ``config``'s data settings (samples per prompt, length, temperature, top-k, seed)."""
    return CorpusKey(
        target=spec,
        weights=model_digest(model),
        prompts=prompts.name,
        prompts_hash=prompts.content_hash,
        samples_per_prompt=config.samples_per_prompt,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_k=config.top_k,
        seed=config.seed,
    )
