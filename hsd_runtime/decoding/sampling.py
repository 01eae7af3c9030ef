"""Decoding settings and the one place logits become the distribution every level samples from.

Temperature, top-k and top-p are applied identically at every level, so "the target's
distribution" means the target's logits warped by these settings; speculative output follows it
exactly.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..terms.choices import Mode
from ..terms.errors import ModelOutputError
from ..terms.limits import MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE

__all__ = ["SamplingConfig", "draw", "warp"]


class SamplingConfig(BaseModel):
    """How tokens are chosen: greedy (argmax) or sampled from warped distributions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = "greedy"
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    # e of the lossy verification rule (hsd_runtime.decoding.verify); 1 is the exact rule, and the default
    lenience: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _lenience_samples(self) -> SamplingConfig:
        if self.lenience != 1.0 and self.greedy:
            raise ValueError(
                f"lenience {self.lenience} relaxes speculative sampling; greedy decoding has no probabilities to relax (use mode sample)"
            )
        return self

    @property
    def greedy(self) -> bool:
        return self.mode == "greedy"

    @property
    def lossy(self) -> bool:
        """Whether the output may differ from the target's law (a lenience below 1)."""
        return self.lenience != 1.0


def warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Turn logits ``[n, V]`` into probabilities ``[n, V]`` (float32) under ``cfg``.

    >>> warp(torch.tensor([[0.0, 0.0, -1e9]]), SamplingConfig(mode="sample")).tolist()
    [[0.5, 0.5, 0.0]]
    """
    scores = logits.float() / cfg.temperature
    if cfg.top_k is not None and cfg.top_k < scores.shape[-1]:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if cfg.top_p is not None and cfg.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass before it
        # already does. The most likely token is always kept.
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= cfg.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token drawn from the distribution ``probs`` ``[V]``.

    Every sampled token goes through here, so a model whose weights hold NaN or inf (a diverged
    training run) is reported as such instead of as torch's complaint about its input.
    """
    try:
        return int(torch.multinomial(probs, 1, generator=generator))
    except RuntimeError as exc:
        if "probability tensor" not in str(exc):
            raise
        raise ModelOutputError(
            "a model computed probabilities that are not finite (NaN or infinite weights, e.g. from a diverged training run); "
            "check the models of the chain"
        ) from None
