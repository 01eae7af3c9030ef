"""hsd_runtime: load models, draft, verify and run hierarchies of speculative decoding.

The runtime knows nothing of SQL or printing: it returns tokens and per-level stats.

Where things are: model specs (:mod:`.spec`); the closed sets of values (:mod:`.choices`: dtypes,
decoding modes) and the bounds and defaults of numbers (:mod:`.limits`); devices and dtypes
(:mod:`.device`); loading, packaged models, int8 copies, trimmed heads and prepacked weights
(:mod:`.loading`, :mod:`.packaged`, :mod:`.quantize`, :mod:`.trim`, :mod:`.packing`); the decoding
itself (:mod:`.cache`, :mod:`.drafters`, :mod:`.verify`, :mod:`.ngram`, :mod:`.sampling`, the
executors for one sequence and for a batch :mod:`.hierarchy` and :mod:`.batched`, :mod:`.stats`);
building a chain from specs, the one place that knows every kind of drafter (:mod:`.build`); the
engines a model runs on, torch and llama.cpp, behind one seam (:mod:`.engines`); draft trees (:mod:`.shape`, :mod:`.tree`, :mod:`.rrs`); block-draft heads on the
level above (:mod:`.heads`, :mod:`.bpd`, :mod:`.lattice`); steering a drafter with the hidden
states of the level above (:mod:`.steering`); trained weights with their card (:mod:`.trained`).

Names are imported on first use (PEP 562), so that the torch-free parts - :mod:`.errors`,
:mod:`.spec`, :mod:`.shape`, :mod:`.choices` and :mod:`.limits` - can be imported where torch
is not installed (the planner API needs only those).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS = {
    "DraftContext": "drafters",
    "Drafter": "drafters",
    "ModelDrafter": "drafters",
    "Proposal": "drafters",
    "VerifierLevel": "drafters",
    "ChainError": "errors",
    "HSDError": "errors",
    "ModelNotFoundError": "errors",
    "ModelOutputError": "errors",
    "ModelSpecError": "errors",
    "PackageMissingError": "errors",
    "PathError": "errors",
    "PromptError": "errors",
    "TokenizerMismatchError": "errors",
    "BatchedHierarchy": "batched",
    "GgufModel": "engines.llamacpp",
    "Hierarchy": "hierarchy",
    "build_hierarchy": "build",
    "LoadedModel": "loading",
    "auto_dtype": "device",
    "cpu_capability": "device",
    "Int8Linear": "quantize",
    "quantized_copy": "quantize",
    "QUANTS": "spec",
    "ModelLoader": "loading",
    "check_same_tokenizer": "loading",
    "head_rows": "loading",
    "trimmed_model": "loading",
    "TrimmedHead": "trim",
    "PackedLinear": "packing",
    "can_prepack": "packing",
    "prepack": "packing",
    "resolve_device": "device",
    "NgramDrafter": "ngram",
    "BpdDrafter": "bpd",
    "BlockHeads": "heads",
    "SteeredDrafter": "steering",
    "Steerer": "steering",
    "SteeringCard": "steering",
    "ngram_lookup": "ngram",
    "SamplingConfig": "sampling",
    "warp": "sampling",
    "DTYPES": "spec",
    "Dtype": "spec",
    "ModelSpec": "spec",
    "parse_chain": "spec",
    "parse_spec": "spec",
    "GenerationResult": "stats",
    "LevelStats": "stats",
    "TreeShape": "shape",
    "Width": "shape",
    "parse_width": "shape",
    "DraftTree": "tree",
    "rrs_node": "rrs",
    "verify_tree_greedy": "rrs",
    "verify_tree_sample": "rrs",
    "verify_greedy": "verify",
    "verify_sample": "verify",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hsd_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static checkers see the eager imports
    from .batched import BatchedHierarchy
    from .build import build_hierarchy
    from .device import auto_dtype, cpu_capability, resolve_device
    from .drafters import DraftContext, Drafter, ModelDrafter, Proposal, VerifierLevel
    from .engines.llamacpp import GgufModel
    from .errors import (
        ChainError,
        HSDError,
        ModelNotFoundError,
        ModelOutputError,
        ModelSpecError,
        PackageMissingError,
        PathError,
        PromptError,
        TokenizerMismatchError,
    )
    from .hierarchy import Hierarchy
    from .loading import LoadedModel, ModelLoader, check_same_tokenizer, head_rows, trimmed_model
    from .ngram import NgramDrafter, ngram_lookup
    from .packing import PackedLinear, can_prepack, prepack
    from .quantize import Int8Linear, quantized_copy
    from .rrs import rrs_node, verify_tree_greedy, verify_tree_sample
    from .sampling import SamplingConfig, warp
    from .shape import TreeShape, Width, parse_width
    from .spec import DTYPES, QUANTS, Dtype, ModelSpec, parse_chain, parse_spec
    from .stats import GenerationResult, LevelStats
    from .steering import SteeredDrafter, Steerer, SteeringCard
    from .tree import DraftTree
    from .trim import TrimmedHead
    from .verify import verify_greedy, verify_sample
