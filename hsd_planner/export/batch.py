"""A solve's batch schedule in the terms of a serving stack that takes one: one drafter, and k
per range of batch sizes (0: no speculation there).

vLLM reads ``num_speculative_tokens_per_batch_size`` ([[start, end, k], ...], inclusive ranges,
the first from 1, the last range's k beyond it) and TensorRT-LLM ``draft_len_schedule`` ({key: k}:
a batch of s requests drafts the k of the smallest key >= s, nothing above the largest key, and
the smallest key's k is ``max_draft_len``, the largest). Neither switches its drafter by batch size, so the
drafter is the one the stack's plan at batch size 1 uses, and each batch size the solve covered
gets that drafter's best width there, or 0 where no width beats autoregressive decoding of the
batch (:func:`~hsd_planner.plan.batch.drafter_schedule`). A batch size between two solved ones
takes the smaller one's k.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..plan import Plan
from ..plan.batch import drafter_schedule, schedule_of
from ..store.plans import SolvedPlan

__all__ = ["stack_schedule", "trtllm_schedule"]


def stack_schedule(stored: SolvedPlan, exported: Plan, batch_sizes: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """``((start, end, k), ...)`` for the drafter of ``exported`` over ``batch_sizes`` (empty when
    ``exported`` runs no drafter or no batch size was solved)."""
    if not exported.depth or not batch_sizes:
        return ()
    solve = stored.solve
    best = drafter_schedule(
        stored.profile, exported.chain[0], batch_sizes, solve.t_max, solve.acceptance_model, stored.contexts, solve.max_new_tokens
    )
    return tuple((r.min_batch, r.max_batch, int(r.plan.widths[0]) if r.plan.widths else 0) for r in schedule_of(best))


def trtllm_schedule(schedule: Sequence[tuple[int, int, int]]) -> dict[int, int]:
    """``draft_len_schedule`` of ranges: each range's end as its key. TensorRT-LLM takes the
    first key's k as ``max_draft_len``, so no later k may exceed it: a larger one is lowered to it
    (the solver's k there is at most what a batch of the first range drafts).

    >>> trtllm_schedule([(1, 3, 4), (4, 7, 2), (8, 16, 0)])
    {3: 4, 7: 2, 16: 0}
    >>> trtllm_schedule([(1, 1, 3), (2, 7, 5)])
    {1: 3, 7: 3}
    """
    first = schedule[0][2]
    return {end: min(k, first) for _, end, k in schedule}
