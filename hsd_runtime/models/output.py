"""A model's output layer applied to hidden states: the logits its own forward would compute.

Used by the torch engine (logits of the rows it keeps hidden states for) and by everything that
reads a host's hidden states (block-draft heads, their training, profiling of the heads).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["apply_output_layer"]


def apply_output_layer(model: Any, states: torch.Tensor, width: int) -> torch.Tensor:
    """The host's logits ``[..., width]`` for inputs ``[..., d]`` of its output layer, in the
    model's dtype and soft-capped, exactly as its own forward computes them."""
    logits = model.get_output_embeddings()(states.to(_dtype(model)))[..., :width]
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _dtype(model: Any) -> torch.dtype:
    """The dtype the output layer's input arrives in (the model's activations)."""
    return next(p.dtype for p in model.parameters() if p.is_floating_point())
