"""The engines a level's model runs on, behind one seam.

An engine holds one model's KV cache over one token sequence and answers three requests
(:class:`EngineCache`): feed tokens at given positions and return the logits of the last rows,
forget every position from a length on, and for draft trees, feed nodes that share the cached
prefix and later keep one path of them. Everything above the seam - the cache bookkeeping of
:class:`~hsd_runtime.decoding.cache.CachedModel`, verification, RRS, sampling, the n-gram drafter, the
hierarchy loop and its counters - is the same for every engine.

- :mod:`.torch_engine`: a transformers model in PyTorch (any device, dtype, int8 copies, trimmed
  heads, block-draft heads and steering, which read its hidden states).
- :mod:`.llamacpp`: a GGUF file run by llama.cpp through its Python binding (CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..terms.choices import ENGINES

if TYPE_CHECKING:  # this module stays torch-free: the llama-server tools read the pin below
    import torch

    from ..terms.tree import DraftTree

__all__ = ["ENGINES", "LLAMA_CPP_PYTHON", "EngineCache", "EngineRows", "TreeFeed"]

# the llama-cpp-python release the install step builds (the binding and, from its vendored
# llama.cpp tree of 2026-10, llama-server): part of a llama.cpp profile's hardware key
LLAMA_CPP_PYTHON = "0.3.36"


@dataclass(frozen=True)
class TreeFeed:
    """Draft-tree nodes fed after a pass's linear tokens: ``tree``'s nodes ``first..`` (breadth
    first), the root's children at position ``linear`` (the linear text's length after the pass)."""

    tree: DraftTree
    first: int
    linear: int


class EngineCache(Protocol):
    """One model's KV cache on one engine: what the engine-neutral cache asks of it."""

    width: int  # logits columns returned (the chain's shared vocabulary)
    device: torch.device  # where logits come back

    def feed(self, tokens: list[int], start: int, keep: int, tree: TreeFeed | None = None) -> torch.Tensor:
        """One pass over ``tokens`` at positions ``start..`` (then ``tree``'s new nodes after them);
        the logits ``[keep, width]`` of the last ``keep`` rows fed."""

    def crop(self, keep: int, held: int) -> None:
        """Forget the linear positions ``keep..held - 1`` (no tree hangs in the cache)."""

    def clear(self) -> None:
        """Forget everything (a new prompt)."""

    def keep_path(self, held: int, path: list[int], fed: int) -> bool:
        """Make the tree nodes ``path`` (fed ones, root first) the linear positions ``held..`` and drop
        the other ``fed`` nodes; False where this cache cannot (then :meth:`drop_tree` is called)."""

    def drop_tree(self, fed: int) -> None:
        """Forget the ``fed`` tree nodes that hang after the linear text."""


class EngineRows(Protocol):
    """One model's KV cache over ``rows`` sequences decoded in lockstep (the torch engine's ragged
    layout, :mod:`.torch_rows`): one pass feeds every row its own tokens at its own positions."""

    rows: int
    width: int
    device: torch.device

    def feed_rows(self, tokens: list[list[int]], starts: list[int], keep: int) -> torch.Tensor:
        """One pass: row i feeds ``tokens[i]`` at positions ``starts[i]..`` (what it held from
        ``starts[i]`` on is forgotten); logits ``[rows, keep, width]`` of each row's last ``keep``
        query slots (left padded). A row with no tokens is padding."""

    def clear(self) -> None:
        """Forget everything (new prompts)."""
