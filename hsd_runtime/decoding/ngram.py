"""Prompt-lookup drafting: propose what followed the first occurrence of the current suffix.

The drafter matches the last ``n`` tokens (then ``n - 1``, ..., down to ``min_size``, 1 by
default) against everything before them, prompt and generated text alike, and proposes the
tokens that followed the earliest match. A larger ``min_size`` drafts less often and on surer
matches, which pays where a verification pass over several tokens costs several one-token
passes (llama.cpp on a CPU), since a round without a proposal is a one-token pass.
(Earliest rather than latest: on Spec-Bench rag prompts the earliest match, usually in the source
document, gave a mean accepted length of 2.0 against 1.5; see BENCHMARKS.md.) It is
deterministic, so its q is one-hot, and it may propose nothing.

``rule=llama-server`` drafts as llama-server's ``ngram-simple`` does (:mod:`.ngram_simple`), so
that a plan profiled with it is the plan the server runs; a width k < n drafts nothing.
``rule=ngram-mod``, ``rule=ngram-map-k`` and ``rule=ngram-map-k4v`` are the server's lookups that
keep state between rounds (:mod:`.ngram_mod`, :mod:`.ngram_map`), and
``rule=llama-server+ngram-mod`` its list ``ngram-simple,ngram-mod`` (:mod:`.ngram_list`): one
state per generation row, told each round what it accepted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..terms.errors import ChainError
from ..terms.limits import DEFAULT_NGRAM_ORDER
from ..terms.spec import MAP_K4V_RULE, MOD_NGRAM_ORDER, MOD_RULE, SIMPLE_MOD_RULE, ModelSpec
from .cache import common_prefix
from .drafters import DraftContext, Proposal
from .ngram_list import SimpleThenMod
from .ngram_map import KeyMap
from .ngram_mod import ModTable
from .ngram_simple import server_lookup
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


Table = ModTable | KeyMap | SimpleThenMod  # a lookup's state between rounds: begin, draft, accept


def stateful_table(rule: str, n: int, width: int, min_hits: int = 1, n_match: int = MOD_NGRAM_ORDER) -> Table:
    """A fresh state of llama-server's lookup ``rule`` (``ngram-mod``, ``ngram-map-k``,
    ``ngram-map-k4v`` or ``ngram-simple,ngram-mod``) with keys of ``n`` tokens, drafting up to
    ``width`` tokens a round (a ``ngram-map-k`` key's m-gram: ``--spec-ngram-map-k-size-m``;
    ``ngram-simple``'s size-m); ``n_match``: ``ngram-mod``'s n-gram size in the list."""
    if rule == MOD_RULE:
        return ModTable(n)
    if rule == SIMPLE_MOD_RULE:
        return SimpleThenMod(n, n_match, width)
    return KeyMap(n, width, values=rule == MAP_K4V_RULE, min_hits=min_hits)


class NgramDrafter:
    """Level 0 without a model: n-gram prompt lookup of order ``n``, drafting on a suffix match of
    at least ``min_size`` tokens (``server``: llama-server's ``ngram-simple`` rule instead,
    :func:`server_lookup`; ``stateful``: one of its lookups that keep state, ``ngram-mod``,
    ``ngram-map-k``, ``ngram-map-k4v`` or ``ngram-simple,ngram-mod`` (``ngram-mod`` of n-gram size
    ``n_match`` there), a :func:`stateful_table` per row, ``ngram-mod``
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
        n_match: int = MOD_NGRAM_ORDER,
    ) -> None:
        self.n = n
        self.min_size = min_size
        self.server = server
        self.stateful = stateful
        self.n_min = n_min
        self.min_hits = min_hits
        self.n_match = n_match
        self.stats = LevelStats(model=name)
        # a stateful rule, per row: its prompt, its table (made at the first proposal, which gives
        # the width), and the row's length and draft at the last proposal (to count what that
        # round accepted, as the server's accept call does)
        self._prompts: list[list[int]] = []
        self._tables: list[Table] = []
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
            n_match=spec.n_match,
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
        self._tables = [stateful_table(self.stateful, self.n, width, self.min_hits, self.n_match) for _ in self._prompts]
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
