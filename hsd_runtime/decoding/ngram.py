"""Prompt-lookup drafting: propose what followed the first occurrence of the current suffix.

The drafter matches the last ``n`` tokens (then ``n - 1``, ..., down to ``min_size``, 1 by
default) against everything before them, prompt and generated text alike, and proposes the
tokens that followed the earliest match. A larger ``min_size`` drafts less often and on surer
matches, which pays where a verification pass over several tokens costs several one-token
passes (llama.cpp on a CPU), since a round without a proposal is a one-token pass.
(Earliest rather than latest: on Spec-Bench rag prompts the earliest match, usually in the source
document, gave a mean accepted length of 2.0 against 1.5; see BENCHMARKS.md.) It is
deterministic, so its q is one-hot, and it may propose nothing.

``rule=llama-server`` drafts as llama-server's ``ngram-simple`` does (read from llama.cpp's
``common_ngram_simple_draft``, tree of 2026-10-01), so that a plan profiled with it is the plan
the server runs: the last n tokens must recur exactly, the latest occurrence is copied, nothing is
drafted unless at least n tokens follow it and the text holds more than n + k + 1 tokens, and a
width k < n drafts nothing. ``rule=ngram-mod``, ``rule=ngram-map-k`` and ``rule=ngram-map-k4v``
are the server's lookups that keep state between rounds (:mod:`.ngram_mod`, :mod:`.ngram_map`):
one per generation row, told each round what it accepted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..terms.errors import ChainError
from ..terms.limits import DEFAULT_NGRAM_ORDER
from ..terms.spec import MAP_K4V_RULE, MOD_RULE, ModelSpec
from .cache import common_prefix
from .drafters import DraftContext, Proposal
from .ngram_map import KeyMap
from .ngram_mod import ModTable
from .results import LevelStats

if TYPE_CHECKING:
    from .cache import CachedModel

__all__ = ["NgramDrafter", "ngram_lookup", "server_lookup", "stateful_table"]


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


def server_lookup(tokens: list[int], n: int, count: int, gate: int | None = None) -> list[int]:
    """What llama-server's ``ngram-simple`` (size-n ``n``, size-m ``count``) drafts after ``tokens``
    (the text so far, its last token the one just sampled): up to ``count`` tokens that followed
    the latest earlier occurrence of the last ``n`` tokens; nothing when fewer than ``n`` of them
    would be copied, or when the text before the last token holds no more than n + ``gate`` + 1
    tokens (``gate``: the size-m of that check, ``count`` unless given).

    >>> server_lookup([5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 1, 2], n=2, count=3)  # the latest "1 2" is followed by 3 4 7
    [3, 4, 7]
    >>> server_lookup([5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 1, 2], n=2, count=1)  # fewer than n would be copied
    []
    >>> server_lookup([1, 2, 3, 1, 2], n=2, count=2)  # a text too short for the check
    []
    """
    cur = len(tokens) - 1  # llama.cpp's history excludes the token just sampled
    if cur <= n + (count if gate is None else gate) + 1:
        return []
    seq = np.asarray(tokens, dtype=np.int64)
    # windows start at j = 1 .. cur - n - 1 (position 0 is llama.cpp's "no match"), so a match
    # ends before the current suffix begins and is followed by at least one token
    windows = sliding_window_view(seq[1 : cur - 1], n)
    hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
    if not len(hits):
        return []
    start = int(hits[-1]) + 1 + n  # the token after the latest match
    copy = min(count, cur - start)
    return seq[start : start + copy].tolist() if copy >= n else []


def stateful_table(rule: str, n: int, width: int, min_hits: int = 1) -> ModTable | KeyMap:
    """A fresh state of llama-server's lookup ``rule`` (``ngram-mod``, ``ngram-map-k`` or
    ``ngram-map-k4v``) with keys of ``n`` tokens, drafting up to ``width`` tokens a round (a
    ``ngram-map-k`` key's m-gram: ``--spec-ngram-map-k-size-m``)."""
    if rule == MOD_RULE:
        return ModTable(n)
    return KeyMap(n, width, values=rule == MAP_K4V_RULE, min_hits=min_hits)


class NgramDrafter:
    """Level 0 without a model: n-gram prompt lookup of order ``n``, drafting on a suffix match of
    at least ``min_size`` tokens (``server``: llama-server's ``ngram-simple`` rule instead,
    :func:`server_lookup`; ``stateful``: one of its lookups that keep state, ``ngram-mod``,
    ``ngram-map-k`` or ``ngram-map-k4v``, a :func:`stateful_table` per row, ``ngram-mod``
    dropping a walk that ended before ``n_min`` tokens)."""

    reads_host = False
    tree_refusal = "ngram drafts chains only; give level 0 a number or make it a model"
    placement = "ngram can only be the lowest level of a chain (it cannot verify)"
    rows_refusal: str | None = None  # a lookup per row

    def __init__(
        self,
        n: int = DEFAULT_NGRAM_ORDER,
        name: str = "ngram",
        min_size: int = 1,
        server: bool = False,
        stateful: str | None = None,
        n_min: int = 0,
        min_hits: int = 1,
    ) -> None:
        self.n = n
        self.min_size = min_size
        self.server = server
        self.stateful = stateful
        self.n_min = n_min
        self.min_hits = min_hits
        self.stats = LevelStats(model=name)
        # a stateful rule, per row: its prompt, its table (made at the first proposal, which gives
        # the width), and the row's length and draft at the last proposal (to count what that
        # round accepted, as the server's accept call does)
        self._prompts: list[list[int]] = []
        self._tables: list[ModTable | KeyMap] = []
        self._last: list[tuple[int, list[int]] | None] = []

    @classmethod
    def of(cls, spec: ModelSpec) -> NgramDrafter:
        """The lookup an ``ngram`` spec names (its n, min=, rule=, nmin= and hits=)."""
        return cls(
            n=spec.ngram_order,
            name=str(spec),
            min_size=spec.ngram_min,
            server=spec.server_rule,
            stateful=spec.ngram_rule if spec.keeps_state else None,
            n_min=spec.n_min,
            min_hits=spec.min_hits,
        )

    def lookup(self, tokens: list[int], count: int) -> list[int]:
        """What this drafter proposes after ``tokens`` when asked for ``count`` tokens (not for a
        stateful rule, whose draft depends on its past rounds: see :meth:`propose`)."""
        return server_lookup(tokens, self.n, count) if self.server else ngram_lookup(tokens, self.n, count, self.min_size)

    def prefill(self, prompts: list[list[int]]) -> None:
        """Nothing to cache, but for a stateful rule: a new state per row, begun at the first proposal."""
        if self.stateful:
            self._prompts, self._tables = [list(p) for p in prompts], []

    def _begin(self, width: int) -> None:
        """A fresh state per row, begun on its prompt (llama-server's ``begin``)."""
        assert self.stateful is not None
        self._tables = [stateful_table(self.stateful, self.n, width, self.min_hits) for _ in self._prompts]
        for table, prompt in zip(self._tables, self._prompts):
            table.begin(prompt)
        self._last = [None] * len(self._prompts)

    def _stateful_draft(self, row: int, tokens: list[int], count: int) -> list[int]:
        """Row ``row``'s draft after ``tokens``: first the last round's acceptance (the draft's
        tokens the text kept, short of the round's own last token), then the lookup."""
        table, last = self._tables[row], self._last[row]
        if last is not None and len(tokens) > last[0]:
            new = tokens[last[0] :]
            table.accept(min(common_prefix(last[1], new), len(new) - 1))
        draft = table.draft(tokens[:-1], tokens[-1], count, self.n_min)
        self._last[row] = (len(tokens), draft)
        return draft

    def attach(self, host: CachedModel) -> None:
        """The lookup reads no hidden rows: refused."""
        raise ChainError(f"{self.stats.model} reads no hidden rows of the level above")

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """Up to ``n`` tokens per active row (none where its suffix recurs nowhere); one pass counted for all rows."""
        t0 = time.perf_counter()
        if self.stateful:
            if len(self._prompts) != len(ctx.rows):  # no prefill told this level its prompts
                self._prompts, self._tables = [t[:-1] for t in ctx.rows], []
            if not self._tables:
                self._begin(n)
            out = [Proposal(self._stateful_draft(i, t, n)) if a else None for i, (t, a) in enumerate(zip(ctx.rows, ctx.active))]
        else:
            out = [Proposal(self.lookup(t, n)) if a else None for t, a in zip(ctx.rows, ctx.active)]
        self.stats.forward_passes += 1
        elapsed = time.perf_counter() - t0
        self.stats.time_s += elapsed
        self.stats.forward_s += elapsed  # the lookup is this level's pass
        return out
