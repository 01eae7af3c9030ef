"""Prompt-lookup drafting: propose what followed the first occurrence of the current suffix.

The drafter matches the last ``n`` tokens (then ``n - 1``, ..., down to ``min_size``, 1 by
default) against everything before them, prompt and generated text alike, and proposes the
tokens that followed the earliest match. A larger ``min_size`` drafts less often and on surer
matches, which pays where a verification pass over several tokens costs several one-token
passes (llama.cpp on a CPU), since a round without a proposal is a one-token pass.
(Earliest rather than latest: on Spec-Bench rag prompts the earliest match, usually in the source
document, gave a mean accepted length of 2.0 against 1.5; see BENCHMARKS.md.) It is
deterministic, so its q is one-hot, and it may propose nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..terms.errors import ChainError
from ..terms.limits import DEFAULT_NGRAM_ORDER
from .drafters import DraftContext, Proposal
from .results import LevelStats

if TYPE_CHECKING:
    from .cache import CachedModel

__all__ = ["NgramDrafter", "ngram_lookup"]


def ngram_lookup(tokens: list[int], n: int, count: int, min_size: int = 1) -> list[int]:
    """Up to ``count`` tokens that followed the earliest match of the longest suffix (<= n, and
    >= ``min_size``: shorter matches propose nothing).

    >>> ngram_lookup([1, 2, 3, 9, 1, 2], n=2, count=3)
    [3, 9, 1]
    >>> ngram_lookup([6, 1, 6, 2, 9, 6], n=2, count=2)
    [1, 6]
    >>> ngram_lookup([1, 2, 3], n=2, count=3)
    []
    >>> ngram_lookup([6, 1, 6, 2, 9, 6], n=2, count=2, min_size=2)  # only "6" recurs, not "9 6"
    []
    """
    seq = np.asarray(tokens, dtype=np.int64)
    for size in range(min(n, len(seq) - 1), max(min_size, 1) - 1, -1):
        suffix = seq[-size:]
        # windows over seq[:-1] start at s <= len - 1 - size, so a continuation always exists
        windows = sliding_window_view(seq[:-1], size)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if len(hits):
            start = int(hits[0]) + size
            return seq[start : start + count].tolist()
    return []


class NgramDrafter:
    """Level 0 without a model: n-gram prompt lookup of order ``n``, drafting on a suffix match of
    at least ``min_size`` tokens."""

    reads_host = False
    tree_refusal = "ngram drafts chains only; give level 0 a number or make it a model"
    placement = "ngram can only be the lowest level of a chain (it cannot verify)"
    rows_refusal: str | None = None  # a lookup per row

    def __init__(self, n: int = DEFAULT_NGRAM_ORDER, name: str = "ngram", min_size: int = 1) -> None:
        self.n = n
        self.min_size = min_size
        self.stats = LevelStats(model=name)

    def prefill(self, prompts: list[list[int]]) -> None:
        """Nothing to cache: the lookup reads the context each time."""

    def attach(self, host: CachedModel) -> None:
        """The lookup reads no hidden rows: refused."""
        raise ChainError(f"{self.stats.model} reads no hidden rows of the level above")

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """Up to ``n`` tokens per active row (none where its suffix recurs nowhere); one pass counted for all rows."""
        t0 = time.perf_counter()
        out = [Proposal(ngram_lookup(t, self.n, n, self.min_size)) if a else None for t, a in zip(ctx.rows, ctx.active)]
        self.stats.forward_passes += 1
        elapsed = time.perf_counter() - t0
        self.stats.time_s += elapsed
        self.stats.forward_s += elapsed  # the lookup is this level's pass
        return out
