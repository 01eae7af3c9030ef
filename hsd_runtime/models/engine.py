"""The engines a level's model runs on, behind one seam.

A model asks its engine's questions through :class:`EngineModel`: which engine it runs on, how
many rows its output layer scores, how many positions it attends over, where its logits come back,
and a fresh KV cache (:meth:`EngineModel.open_cache`). :func:`~.torch_engine.engine_model` gives
any chain member's: a bare transformers module goes behind :class:`~.torch_engine.TorchModel`, a
model of another engine implements the protocol itself. Nothing outside the engine modules looks at
a model's type to tell its engine.

A cache (:class:`EngineCache`) holds one model's keys and values over one token sequence and
answers three requests: feed tokens at given positions and return the logits of the last rows,
forget every position from a length on, and for draft trees, feed nodes that share the cached
prefix and later keep one path of them. Everything above the seam - the cache bookkeeping of
:class:`~hsd_runtime.decoding.cache.CachedModel`, verification, RRS, sampling, the n-gram drafter, the
hierarchy loop and its counters, profiling's timed passes and teacher-forced logits - is the same
for every engine.

- :mod:`.torch_engine`: a transformers model in PyTorch (any device, dtype, int8 copies, trimmed
  heads, block-draft heads and steering, which read its hidden states).
- :mod:`.static_engine`: a Llama-family transformers model over preallocated caches, its passes
  captured as CUDA graphs on a GPU.
- :mod:`.llamacpp`: a GGUF file run by llama.cpp through its Python binding (CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..terms.choices import ENGINES, Engine

if TYPE_CHECKING:  # this module stays torch-free: the llama-server tools read the pin below
    import torch

    from ..terms.tree import DraftTree

__all__ = ["ENGINES", "LLAMA_CPP_PYTHON", "EngineCache", "EngineModel", "EngineRows", "TreeFeed", "hidden_refusal", "rows_refusal"]

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

    def prepare(self, widest: int) -> None:
        """Make every pass of up to ``widest`` tokens ready now (the static engine captures their
        CUDA graphs), so that none is made in a timed decode; nothing where passes need no setup."""


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


@runtime_checkable
class EngineModel(Protocol):
    """One loaded model on its engine: what the engine-neutral code asks of a chain's member.

    End-of-sequence tokens are no part of it: they come from the tokenizer and the model's
    generation config, which the loader reads (:attr:`~.loading.LoadedModel.eos_token_ids`).
    """

    @property
    def engine(self) -> Engine:
        """The engine that runs its passes (one of :data:`ENGINES`)."""

    @property
    def n_vocab(self) -> int:
        """Rows of its output layer: the logits width, which may exceed the tokenizer's by padding."""

    @property
    def context_limit(self) -> int | None:
        """The positions it attends over (None where it declares no bound)."""

    @property
    def device(self) -> torch.device:
        """Where its logits come back."""

    @property
    def n_params(self) -> int:
        """Its weights, int8 and packed layers counted (they hold no dense weight)."""

    @property
    def num_layers(self) -> int:
        """Its decoder layers."""

    @property
    def allocates_cells(self) -> bool:
        """Whether its caches allocate their positions when opened (``cells`` sizes them, and a draft
        tree's nodes take cells of their own) rather than growing as they are fed."""

    def open_cache(self, width: int, cells: int | None = None, keep_hidden: bool = False, layers: tuple[int, ...] = ()) -> EngineCache:
        """A fresh KV cache returning ``width`` logits columns per row.

        ``cells``: the positions a cache that allocates them holds (None: :attr:`context_limit`);
        ``keep_hidden``: keep the final hidden state of every row returned, or with ``layers`` the
        inputs of those decoder layers (what block-draft heads and steering read). An engine that
        keeps no hidden rows raises :class:`~hsd_runtime.terms.errors.ChainError` for it."""

    def open_rows(self, width: int, rows: int) -> EngineRows:
        """A fresh KV cache over ``rows`` sequences decoded in lockstep, ``width`` logits columns per
        row. An engine that decodes one sequence at a time raises :class:`~hsd_runtime.terms.errors.ChainError`."""


def hidden_refusal(name: str) -> str:
    """Why the model ``name`` cannot open a cache that keeps hidden rows (an engine other than torch)."""
    return f"{name}: block-draft heads and steering read hidden states, which the torch engine alone keeps"


def rows_refusal(name: str) -> str:
    """Why the model ``name`` cannot decode more than one prompt at a time (an engine other than torch)."""
    return f"{name}: batches of more than one prompt run on the torch engine only; decode one prompt at a time"
