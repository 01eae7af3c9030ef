"""hsd_runtime: load models, draft, verify and run hierarchies of speculative decoding.

The runtime knows nothing of SQL or printing: it returns tokens and per-level stats.
"""

from .drafters import DraftContext, Drafter, ModelDrafter, Proposal, VerifierLevel
from .errors import (
    ChainError,
    HSDError,
    ModelNotFoundError,
    ModelSpecError,
    PackageMissingError,
    PromptError,
    TokenizerMismatchError,
)
from .hierarchy import Hierarchy, build_hierarchy
from .loading import LoadedModel, ModelLoader, check_same_tokenizer, resolve_device
from .ngram import NgramDrafter, ngram_lookup
from .sampling import SamplingConfig, warp
from .spec import ModelSpec, parse_chain, parse_spec
from .stats import GenerationResult, LevelStats
from .verify import verify_greedy, verify_sample

__all__ = [
    "ChainError",
    "DraftContext",
    "Drafter",
    "GenerationResult",
    "HSDError",
    "Hierarchy",
    "LevelStats",
    "LoadedModel",
    "ModelDrafter",
    "ModelLoader",
    "ModelNotFoundError",
    "ModelSpec",
    "ModelSpecError",
    "NgramDrafter",
    "PackageMissingError",
    "PromptError",
    "Proposal",
    "SamplingConfig",
    "TokenizerMismatchError",
    "VerifierLevel",
    "build_hierarchy",
    "check_same_tokenizer",
    "ngram_lookup",
    "parse_chain",
    "parse_spec",
    "resolve_device",
    "verify_greedy",
    "verify_sample",
    "warp",
]
