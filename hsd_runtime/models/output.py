"""Calling a transformers model: its output layer applied to hidden states (the logits its own
forward would compute), and the keyword that hands it a KV cache.

Used by the torch engine's caches (logits of the rows it keeps hidden states for) and by everything
that reads a host's hidden states (block-draft heads, their training, profiling of the heads).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["activation_dtype", "additive_mask", "apply_output_layer", "cache_argument"]


def apply_output_layer(model: Any, states: torch.Tensor, width: int) -> torch.Tensor:
    """The host's logits ``[..., width]`` for inputs ``[..., d]`` of its output layer, in the
    model's dtype and soft-capped, exactly as its own forward computes them."""
    logits = model.get_output_embeddings()(states.to(activation_dtype(model)))[..., :width]
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def activation_dtype(model: Any) -> torch.dtype:
    """The dtype of a model's activations: its first floating-point weight's (an int8 copy computes
    in fp32 like its embeddings); what its output layer's input and an additive mask are in."""
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive attention mask of ``allowed`` (booleans, any shape, on its device): 0 where
    attention is allowed, the dtype's minimum elsewhere (added to the scores by eager and SDPA
    attention alike)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


@functools.cache
def _cache_name(forward: Callable[..., Any]) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_argument(module: nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword that hands ``module`` (a transformers causal LM or its decoder) its KV cache:
    ``cache`` where its forward takes it (transformers 5.24 on), else ``past_key_values``."""
    return {_cache_name(type(module).forward): cache}
