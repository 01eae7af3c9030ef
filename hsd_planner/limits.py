"""Bounds of the numbers a user types or an import holds, checked before anything is written.

The runtime's own bounds (widths, tree nodes, temperatures, seeds) are :mod:`hsd_runtime.limits`.
"""

from __future__ import annotations

__all__ = ["MAX_COUNT", "MAX_LENGTH", "MAX_REPEATS", "SQLITE_INT_MAX"]

SQLITE_INT_MAX = 2**63 - 1  # the largest integer SQLite stores (a row id, a count)
MAX_LENGTH = 10**7  # tokens: a prompt, a continuation, a context length, a pass (far beyond any model's context)
MAX_COUNT = 10**6  # how many of something a run does: prompts, steps, plans listed, a batch
MAX_REPEATS = 1000  # timed rounds per latency point, validation runs per prompt
