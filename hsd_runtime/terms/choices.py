"""The runtime's closed sets of values, defined once and torch-free: model dtypes, decoding modes,
engines and the weight quantizations each engine makes.

Each is a ``Literal`` type with the tuple of its values (for option choices); the bounds and
defaults of numbers live in :mod:`.limits`.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["DTYPES", "ENGINES", "GGUF_QUANTS", "MODES", "TORCH_QUANTS", "Dtype", "Engine", "Mode"]

Dtype = Literal["fp32", "bf16", "fp16"]  # weights and activations of a model
DTYPES: tuple[str, ...] = get_args(Dtype)

Mode = Literal["greedy", "sample"]  # argmax at every level, or sampling from warped distributions
MODES: tuple[str, ...] = get_args(Mode)

Engine = Literal["torch", "static", "llamacpp"]  # what runs a model's passes (see hsd_runtime.models.engine)
ENGINES: tuple[str, ...] = get_args(Engine)

TORCH_QUANTS = ("int8",)  # the torch engine's int8 copy (hsd_runtime.models.quantize)
# llama.cpp's file types, made from the GGUF with its quantizer (hsd_runtime.models.llamacpp)
GGUF_QUANTS = ("f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k")
