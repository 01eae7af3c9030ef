"""Pooling per-prompt acceptance sums into a pair's acceptance: ratios of sums, as tokens per round are.

A profile stores, per prompt, sums that combine exactly across prompts (see
:class:`hsd_planner.store.schema.AcceptancePrompt`); pooling any multiset of prompts - the whole
workload, or a bootstrap resample that draws a prompt twice - gives that multiset's acceptance.
:class:`PromptTable` holds one pair's sums as arrays (a row per prompt) and pools many multisets at
once, each a row of prompt counts: a thousand bootstrap resamples are a few matrix products.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["Pooled", "PromptSums", "PromptTable", "pool_rows"]


class PromptSums(Protocol):
    """One prompt's acceptance sums (a stored row, or :class:`hsd_planner.store.records.PromptAcceptance`)."""

    @property
    def positions(self) -> int: ...
    @property
    def alpha_sum(self) -> float: ...
    @property
    def run_sum(self) -> list[float]: ...
    @property
    def run_count(self) -> list[int]: ...
    @property
    def visit_sum(self) -> list[list[float]] | None: ...
    @property
    def visit_count(self) -> list[float] | None: ...


class Pooled(NamedTuple):
    """One pair's acceptance pooled over a multiset of prompts (the fields of
    :class:`hsd_planner.plan.PairAcceptance`, and the positions they pool)."""

    alpha: float
    positions: int
    run_lengths: list[float]
    visited: list[list[float] | None] | None  # [b - 1][g]: P_b(G >= g)
    drafted: list[list[float] | None] | None  # [b - 1][l]: P_b(L >= l)
    siblings: list[float] | None  # A(k), k = 1..K


class PromptTable:
    """One pair's per-prompt sums as arrays, P prompts by the sums' lengths, pooled over any
    weighting of the prompts (:meth:`pool`).

    Rows may come from different versions of the profiler: a row that predates visited sums (or
    drafted, or sibling sums) makes that part of every pool None, so old and new measurements are
    never mixed; one measured before censored starts counted has no ``visit_base``, and its base at
    g is its sum at g - 1 (its count at g = 0), which gives back its old estimate sum[g] / count.
    """

    def __init__(self, rows: Sequence[PromptSums]) -> None:
        self.prompts = len(rows)
        self._positions = np.array([r.positions for r in rows], dtype=np.int64)
        self._alpha = np.array([r.alpha_sum for r in rows], dtype=float)
        g_len = max((len(r.run_sum) for r in rows), default=0)
        # (P, G) each, zero past a row's own runs (a row adds nothing where it has no sum)
        self._run_sum = np.array([_padded(r.run_sum, g_len) for r in rows], dtype=float).reshape(len(rows), g_len)
        self._run_count = np.array([_padded(r.run_count, g_len) for r in rows], dtype=float).reshape(len(rows), g_len)
        self._visited = _visited_arrays(rows)
        self._drafted = _drafted_arrays(rows)
        self._siblings = _sibling_arrays(rows)

    def pool(self, weights: np.ndarray, widths: int | None = None) -> list[Pooled]:
        """One :class:`Pooled` per row of ``weights`` (R, P): how many times each prompt counts;
        its visited and drafted tables up to width ``widths`` only, where given (a bootstrap that
        predicts plans no wider needs no more, and a thousand copies of 64 tables fill gigabytes).

        >>> from types import SimpleNamespace as R
        >>> row = R(positions=2, alpha_sum=1.0, run_sum=[2.0, 1.0], run_count=[2, 2], visit_sum=None, visit_count=None)
        >>> [p.run_lengths for p in PromptTable([row]).pool(np.array([[1.0], [3.0]]))]
        [[1.0, 0.5], [1.0, 0.5]]
        """
        w = np.asarray(weights, dtype=float).reshape(-1, self.prompts)
        positions = w @ self._positions
        alpha = np.divide(w @ self._alpha, positions, out=np.zeros(len(w)), where=positions > 0)
        sums, counts = w @ self._run_sum, w @ self._run_count
        visited = _pool_visited(self._visited and self._visited[:widths], w)
        drafted = _pool_drafted(self._drafted and self._drafted[:widths], w)
        siblings = _pool_siblings(self._siblings, w)
        return [
            Pooled(
                alpha=float(alpha[i]),
                positions=round(float(positions[i])),
                run_lengths=(sums[i][counts[i] > 0] / counts[i][counts[i] > 0]).tolist(),
                visited=visited[i] if visited is not None else None,
                drafted=drafted[i] if drafted is not None else None,
                siblings=siblings[i] if siblings is not None else None,
            )
            for i in range(len(w))
        ]


def _padded(values: Sequence[float], length: int) -> list[float]:
    """``values`` with zeros up to ``length``."""
    return [*values, *([0.0] * (length - len(values)))]


def _visited_arrays(rows: Sequence[PromptSums]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per width b, the rows' visited sums and bases (P, b + 1) each; None when a row predates them.
    The widths are those every row has; a row with no count at a width adds nothing there."""
    measured = [(r.visit_sum, r.visit_count, getattr(r, "visit_base", None)) for r in rows]
    if not rows or any(v is None or c is None for v, c, _ in measured):
        return None
    out = []
    for b in range(1, min(len(v or []) for v, _, _ in measured) + 1):
        sums, bases = [], []
        for v, c, base in measured:
            if not (v and c):
                sums.append([0.0] * (b + 1))
                bases.append([0.0] * (b + 1))
                continue
            sums.append(list(v[b - 1][: b + 1]))
            bases.append(list(base[b - 1][: b + 1]) if base is not None else [c[b - 1], *v[b - 1][:b]])
        out.append((np.array(sums, dtype=float), np.array(bases, dtype=float)))
    return out


def _drafted_arrays(rows: Sequence[object]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per width b, the rows' rounds drafting l or more (P, b + 1) and their rounds (P,); None
    when a row has none (a model drafter, which always proposes b, or a row measured before)."""
    drafted = [(getattr(r, "visit_drafted", None), getattr(r, "visit_count", None)) for r in rows]
    if not drafted or any(d is None or c is None for d, c in drafted):
        return None
    out = []
    for b in range(1, min(len(d or []) for d, _ in drafted) + 1):
        held = np.array([list(d[b - 1][: b + 1]) if d else [0.0] * (b + 1) for d, _ in drafted], dtype=float)
        out.append((held, np.array([c[b - 1] if c else 0.0 for _, c in drafted], dtype=float)))
    return out


def _sibling_arrays(rows: Sequence[object]) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows' sibling sums (P, K) and counts (P,), K the shortest stored curve; None when a row
    has none (the n-gram drafter, or a row measured before sibling sums were): a curve over part
    of the prompts would not match the pair's alpha and run lengths."""
    found = [(getattr(r, "siblings_sum", None), getattr(r, "siblings_count", None)) for r in rows]
    measured = [(s, c) for s, c in found if s and c is not None]
    if not found or len(measured) < len(found):
        return None
    k_max = min(len(s) for s, _ in measured)
    return np.array([s[:k_max] for s, _ in measured], dtype=float), np.array([c for _, c in measured], dtype=float)


def _pool_visited(arrays: list[tuple[np.ndarray, np.ndarray]] | None, w: np.ndarray) -> list[list[list[float] | None]] | None:
    """P_b(G >= g) per row of ``w`` (None without visited sums), the product-limit estimate of
    :func:`hsd_planner.profiling.acceptance.visited_run_sums` over the pooled sums and bases.
    Past the longest run any start saw (a continuation shorter than b), the table goes on
    geometrically, as :class:`hsd_planner.plan.rounds.RunLengths` extends a table."""
    if arrays is None:
        return None
    per_b: list[list[list[float] | None]] = []
    for sums_b, bases_b in arrays:  # (P, b + 1) each
        sums, bases = w @ sums_b, w @ bases_b  # (R, b + 1)
        seen = bases[:, 1:] > 0
        steps = np.minimum(1.0, np.divide(sums[:, 1:], bases[:, 1:], out=np.zeros_like(sums[:, 1:]), where=seen))
        table = np.ones_like(sums)
        if seen.all():  # every g seen by some start: the product of the steps
            table[:, 1:] = np.cumprod(steps, axis=1)
        else:
            for g in range(1, sums.shape[1]):
                if g >= 2:  # no start saw g positions with a run that long: the last step's ratio again
                    ratio = np.divide(table[:, g - 1], table[:, g - 2], out=np.zeros(len(w)), where=table[:, g - 2] > 0)
                else:
                    ratio = np.zeros(len(w))
                table[:, g] = table[:, g - 1] * np.where(seen[:, g - 1], steps[:, g - 1], ratio)
        per_b.append([row if base0 > 0 else None for row, base0 in zip(table.tolist(), bases[:, 0].tolist())])
    return [[b[i] for b in per_b] for i in range(len(w))]


def _pool_drafted(arrays: list[tuple[np.ndarray, np.ndarray]] | None, w: np.ndarray) -> list[list[list[float] | None]] | None:
    """P_b(L >= l) per row of ``w`` (None without drafted sums): the pooled rounds a width-b decoder drafted l or more of, over its rounds."""
    if arrays is None:
        return None
    per_b: list[list[list[float] | None]] = []
    for held_b, weight_b in arrays:  # (P, b + 1), (P,)
        held, weight = w @ held_b, w @ weight_b
        p = _monotone(np.divide(held, weight[:, None], out=np.zeros_like(held), where=weight[:, None] > 0), increasing=False)
        per_b.append([row if total > 0 else None for row, total in zip(p.tolist(), weight.tolist())])
    return [[b[i] for b in per_b] for i in range(len(w))]


def _pool_siblings(arrays: tuple[np.ndarray, np.ndarray] | None, w: np.ndarray) -> list[list[float] | None] | None:
    """A(k) per row of ``w`` (None without sibling sums): pooled sibling sums over pooled counts, non-decreasing."""
    if arrays is None:
        return None
    sums_k, counts = arrays
    sums, total = w @ sums_k, w @ counts
    a = _monotone(np.divide(sums, total[:, None], out=np.zeros_like(sums), where=total[:, None] > 0), increasing=True)
    return [row if t > 0 else None for row, t in zip(a.tolist(), total.tolist())]


def _monotone(p: np.ndarray, increasing: bool) -> np.ndarray:
    """Each row of ``p`` clamped to [0, 1] and made monotone from its first value on, as
    :func:`hsd_planner.plan.rounds.monotone_probabilities` does one list."""
    clamped = np.clip(p, 0.0, 1.0)
    return np.maximum.accumulate(clamped, axis=1) if increasing else np.minimum.accumulate(clamped, axis=1)


def pool_rows(rows: Sequence[PromptSums]) -> Pooled:
    """Every part of one pair's acceptance pooled over per-prompt rows, each counted once (rows may
    repeat): what the store keeps as the pair's aggregate.

    >>> from types import SimpleNamespace as R
    >>> row = R(positions=2, alpha_sum=1.0, run_sum=[2.0, 1.0], run_count=[2, 2], visit_sum=None, visit_count=None)
    >>> pool_rows([row, row])[:4]  # alpha, positions, run lengths, visited
    (0.5, 4, [1.0, 0.5], None)
    >>> old = R(positions=1, alpha_sum=1.0, run_sum=[], run_count=[], visit_sum=[[2.0, 1.0]], visit_count=[2.0], visit_base=None)
    >>> new = R(positions=1, alpha_sum=1.0, run_sum=[], run_count=[], visit_sum=[[3.0, 1.0]], visit_count=[3.0], visit_base=[[3.0, 3.0]])
    >>> [pool_rows(rows).visited for rows in ([old], [new], [old, new])]
    [[[1.0, 0.5]], [[1.0, 0.3333333333333333]], [[1.0, 0.4]]]

    Drafted: P_b(L >= l), l = 0..b, of a lookup drafter's proposal length L over the rounds a
    width-b decoder visits (``visit_drafted`` over ``visit_count``); None when any prompt has none
    (a model drafter, which always proposes b, or a row measured before).

    >>> drafted = [R(**vars(old), visit_drafted=[[2.0, 1.0]]), R(**vars(old), visit_drafted=[[2.0, 2.0]])]
    >>> pool_rows(drafted).drafted, pool_rows([old]).drafted
    ([[1.0, 0.75]], None)

    Siblings: A(k), k = 1..K, ``sum siblings_sum[k - 1] / sum siblings_count``, clamped to [0, 1]
    and non-decreasing as every sibling curve is; None when any prompt has no sums (the n-gram
    drafter, or a row measured before siblings were): a curve over part of the prompts would not
    match the pair's alpha and run lengths. K is the shortest stored curve.

    >>> sibs = [R(**vars(row), siblings_sum=[1.0, 2.0], siblings_count=2), R(**vars(row), siblings_sum=[0.0, 1.0], siblings_count=2)]
    >>> pool_rows(sibs).siblings, pool_rows([*sibs, row]).siblings
    ([0.25, 0.75], None)
    """
    return PromptTable(rows).pool(np.ones((1, len(rows))))[0]
