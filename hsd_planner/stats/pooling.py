"""Pooling per-prompt acceptance sums into a pair's acceptance: ratios of sums, as tokens per round are.

A profile stores, per prompt, sums that combine exactly across prompts (see
:class:`hsd_planner.store.schema.AcceptancePrompt`); pooling any multiset of prompts - the whole
workload, or a bootstrap resample that draws a prompt twice - gives that multiset's acceptance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..plan.rounds import monotone_probabilities

__all__ = ["PromptSums", "pool_prompts", "pool_siblings"]


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


def pool_prompts(rows: Sequence[PromptSums]) -> tuple[float, int, list[float], list[list[float] | None] | None]:
    """(alpha, positions, run_lengths, visited) pooled over per-prompt rows. Rows may repeat.

    >>> from types import SimpleNamespace as R
    >>> row = R(positions=2, alpha_sum=1.0, run_sum=[2.0, 1.0], run_count=[2, 2], visit_sum=None, visit_count=None)
    >>> pool_prompts([row, row])
    (0.5, 4, [1.0, 0.5], None)
    """
    positions = sum(r.positions for r in rows)
    g_len = max(len(r.run_sum) for r in rows)
    sums = [sum(r.run_sum[g] for r in rows if g < len(r.run_sum)) for g in range(g_len)]
    counts = [sum(r.run_count[g] for r in rows if g < len(r.run_count)) for g in range(g_len)]
    run_lengths = [s / c for s, c in zip(sums, counts) if c > 0]
    alpha = sum(r.alpha_sum for r in rows) / positions if positions else 0.0
    return alpha, positions, run_lengths, _visited(rows)


def _visited(rows: Sequence[PromptSums]) -> list[list[float] | None] | None:
    """P_b(G >= g) pooled over prompts; None when a prompt predates visited sums, so old and new
    measurements are never mixed."""
    visit_sums, visit_counts = [r.visit_sum for r in rows], [r.visit_count for r in rows]
    if any(v is None for v in visit_sums) or any(c is None for c in visit_counts):
        return None
    sums_by_prompt = [v for v in visit_sums if v is not None]
    counts_by_prompt = [c for c in visit_counts if c is not None]
    out: list[list[float] | None] = []
    for b in range(1, min(len(v) for v in sums_by_prompt) + 1):
        weight = sum(c[b - 1] for c in counts_by_prompt)
        sums = [sum(v[b - 1][g] for v in sums_by_prompt) for g in range(b + 1)]
        out.append([x / weight for x in sums] if weight > 0 else None)
    return out


def pool_siblings(rows: Sequence[object]) -> list[float] | None:
    """A(k), k = 1..K, pooled over per-prompt rows: ``sum siblings_sum[k - 1] / sum siblings_count``,
    clamped to [0, 1] and non-decreasing as every sibling curve is.

    None when any prompt has no sums (the n-gram drafter, or a row measured before siblings
    were): a curve over part of the prompts would not match the pair's alpha and run lengths.
    Rows may repeat (a bootstrap resample). K is the shortest stored curve.

    >>> from types import SimpleNamespace as R
    >>> pool_siblings([R(siblings_sum=[1.0, 2.0], siblings_count=2), R(siblings_sum=[0.0, 1.0], siblings_count=2)])
    [0.25, 0.75]
    """
    sums: list[list[float]] = []
    total = 0
    for r in rows:
        k_sums, count = getattr(r, "siblings_sum", None), getattr(r, "siblings_count", None)
        if not k_sums or count is None:
            return None
        sums.append(k_sums)
        total += count
    if total <= 0:
        return None
    k_max = min(len(k_sums) for k_sums in sums)
    return monotone_probabilities([sum(k_sums[k] for k_sums in sums) / total for k in range(k_max)], increasing=True)
