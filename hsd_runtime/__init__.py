"""hsd_runtime: load models, draft, verify and run hierarchies of speculative decoding.

The runtime knows nothing of SQL or printing: it returns tokens and per-level stats. Its rooms,
each importing only the rooms listed before it:

- :mod:`.terms`: the torch-free vocabulary - model specs and the table of drafter kinds they name,
  tree shapes and drafted trees, the closed sets of values, the bounds of numbers, the errors (the
  planner reads these without torch).
- :mod:`.models`: loading a spec (packaged models, int8 copies, trimmed heads, prepacked weights,
  GGUF files), devices and dtypes, and the engines a model runs on, torch (with its ragged layout
  for b rows), static and llama.cpp, behind one seam (:mod:`.models.engine`).
- :mod:`.decoding`: the core, the same on every engine - the cached model over rows, sampling,
  verification (chains and RRS trees), the model and n-gram drafters, the hierarchy's loop over one
  or more prompts in lockstep, and its results.
- :mod:`.learned`: drafters with trained weights - block-draft heads (BPD) and steering.
- :mod:`.build`: specs to hierarchy members, the one module that makes every drafter kind.

Public names are imported from the package itself, on first use (PEP 562), so that the torch-free
room can be imported where torch is not installed.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS = {
    "DraftContext": "decoding.drafters",
    "Drafter": "decoding.drafters",
    "ModelDrafter": "decoding.drafters",
    "Proposal": "decoding.drafters",
    "VerifierLevel": "decoding.drafters",
    "ChainError": "terms.errors",
    "HSDError": "terms.errors",
    "ModelNotFoundError": "terms.errors",
    "ModelOutputError": "terms.errors",
    "ModelSpecError": "terms.errors",
    "PackageMissingError": "terms.errors",
    "PathError": "terms.errors",
    "PromptError": "terms.errors",
    "TokenizerMismatchError": "terms.errors",
    "GgufModel": "models.llamacpp",
    "Hierarchy": "decoding.hierarchy",
    "CachePool": "decoding.cache",
    "build_hierarchy": "build",
    "LoadedModel": "models.loading",
    "auto_dtype": "models.device",
    "cpu_capability": "models.device",
    "Int8Linear": "models.quantize",
    "quantized_copy": "models.quantize",
    "QUANTS": "terms.spec",
    "ModelLoader": "models.loading",
    "check_same_tokenizer": "models.loading",
    "head_rows": "models.loading",
    "trimmed_model": "models.views",
    "EngineModel": "models.engine",
    "engine_model": "models.torch_engine",
    "TrimmedHead": "models.trim",
    "PackedLinear": "models.packing",
    "can_prepack": "models.packing",
    "prepack": "models.packing",
    "resolve_device": "models.device",
    "NgramDrafter": "decoding.ngram",
    "BpdDrafter": "learned.bpd",
    "BlockHeads": "learned.heads",
    "SteeredDrafter": "learned.steering",
    "Steerer": "learned.steering",
    "SteeringCard": "learned.steering",
    "ngram_lookup": "decoding.ngram",
    "server_lookup": "decoding.ngram_simple",
    "SamplingConfig": "decoding.sampling",
    "warp": "decoding.sampling",
    "DTYPES": "terms.spec",
    "Dtype": "terms.spec",
    "ModelSpec": "terms.spec",
    "parse_chain": "terms.spec",
    "parse_spec": "terms.spec",
    "GenerationResult": "decoding.results",
    "LevelStats": "decoding.results",
    "TreeShape": "terms.shape",
    "Width": "terms.shape",
    "parse_width": "terms.shape",
    "positions_needed": "terms.shape",
    "DraftTree": "terms.tree",
    "rrs_node": "decoding.rrs",
    "verify_tree_greedy": "decoding.rrs",
    "verify_tree_sample": "decoding.rrs",
    "verify_greedy": "decoding.verify",
    "verify_sample": "decoding.verify",
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
    from .build import build_hierarchy
    from .decoding.drafters import DraftContext, Drafter, ModelDrafter, Proposal, VerifierLevel
    from .decoding.hierarchy import Hierarchy
    from .decoding.ngram import NgramDrafter, ngram_lookup
    from .decoding.ngram_simple import server_lookup
    from .decoding.results import GenerationResult, LevelStats
    from .decoding.rrs import rrs_node, verify_tree_greedy, verify_tree_sample
    from .decoding.sampling import SamplingConfig, warp
    from .decoding.verify import verify_greedy, verify_sample
    from .learned.steering import SteeredDrafter, Steerer, SteeringCard
    from .models.device import auto_dtype, cpu_capability, resolve_device
    from .models.engine import EngineModel
    from .models.llamacpp import GgufModel
    from .models.loading import LoadedModel, ModelLoader, check_same_tokenizer, head_rows
    from .models.packing import PackedLinear, can_prepack, prepack
    from .models.quantize import Int8Linear, quantized_copy
    from .models.torch_engine import engine_model
    from .models.trim import TrimmedHead
    from .models.views import trimmed_model
    from .terms.errors import (
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
    from .terms.shape import TreeShape, Width, parse_width
    from .terms.spec import DTYPES, QUANTS, Dtype, ModelSpec, parse_chain, parse_spec
    from .terms.tree import DraftTree
