"""The runtime's closed sets of values, defined once and torch-free: model dtypes and decoding modes.

Each is a ``Literal`` type with the tuple of its values (for option choices); the bounds and
defaults of numbers live in :mod:`.limits`.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["DTYPES", "MODES", "Dtype", "Mode"]

Dtype = Literal["fp32", "bf16", "fp16"]  # weights and activations of a model
DTYPES: tuple[str, ...] = get_args(Dtype)

Mode = Literal["greedy", "sample"]  # argmax at every level, or sampling from warped distributions
MODES: tuple[str, ...] = get_args(Mode)
