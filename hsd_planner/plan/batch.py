"""Batch schedules: the best plan per batch size, and the ranges of batch sizes a server switches
plans by.

A batch size is a parameter of one solve (:attr:`SolveConfig.batch_size`; the lockstep model is
:func:`~hsd_planner.plan.latency.batch_latency`): a schedule is a loop of solves over the batch
sizes asked for. Where autoregressive decoding wins, speculation has stopped paying and the
schedule says 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..choices import AcceptanceModel
from ..errors import SolverError
from .config import SOLVE_DEFAULTS, SolveConfig
from .planner import predict, solve
from .plans import Plan
from .profile import Profile

__all__ = ["BatchSolution", "ScheduleRange", "drafter_schedule", "schedule_of", "solve_batches", "stops_paying"]


@dataclass(frozen=True)
class ScheduleRange:
    """The plan to run while the batch holds ``min_batch``..``max_batch`` sequences."""

    min_batch: int
    max_batch: int
    plan: Plan

    def to_dict(self) -> dict:
        """The range as ``solve --json`` prints it."""
        plan = self.plan.to_dict()
        return {"min_batch": self.min_batch, "max_batch": self.max_batch, "chain": plan["chain"], "widths": plan["widths"]}


def schedule_of(best: Sequence[tuple[int, Plan]]) -> list[ScheduleRange]:
    """Ranges of batch sizes from the best plan at each of ascending batch sizes: a batch size's
    plan holds up to the next one measured, and neighbours with the same plan merge.

    >>> from hsd_planner.plan.latency import Prediction
    >>> p = lambda *w: Plan(("d", "t")[: len(w) + 1] if w else ("t",), w, Prediction(1.0, 1.0, 1.0))
    >>> [(r.min_batch, r.max_batch, r.plan.widths) for r in schedule_of([(1, p(4)), (2, p(4)), (4, p(2)), (8, p())])]
    [(1, 3, (4,)), (4, 7, (2,)), (8, 8, ())]
    """
    out: list[ScheduleRange] = []
    for i, (b, plan) in enumerate(best):
        end = best[i + 1][0] - 1 if i + 1 < len(best) else b
        if out and (out[-1].plan.chain, out[-1].plan.widths) == (plan.chain, plan.widths):
            out[-1] = ScheduleRange(out[-1].min_batch, end, out[-1].plan)
        else:
            out.append(ScheduleRange(b, end, plan))
    return out


def stops_paying(best: Sequence[tuple[int, Plan]]) -> int | None:
    """The smallest of ascending batch sizes from which on the best plan is autoregressive
    decoding (None: speculation pays at the largest batch size solved)."""
    out = None
    for b, plan in reversed(best):
        if plan.depth:
            break
        out = b
    return out


@dataclass(frozen=True)
class BatchSolution:
    """The best plan per batch size (ascending), and the schedule they make."""

    best: list[tuple[int, Plan]]

    @property
    def schedule(self) -> list[ScheduleRange]:
        """The ranges of batch sizes, each with its plan."""
        return schedule_of(self.best)

    @property
    def stops_paying(self) -> int | None:
        """The smallest batch size solved from which on no speculation pays (None: it pays at all)."""
        return stops_paying(self.best)

    def to_dict(self) -> dict:
        """Per batch size its plan and throughput, the schedule, and where speculation stops paying."""
        sizes = [{"batch_size": b, **p.to_dict(), "predicted_tokens_per_s": 1000.0 * b / p.prediction.ms_per_token} for b, p in self.best]
        return {"batch_sizes": sizes, "schedule": [r.to_dict() for r in self.schedule], "speculation_stops_paying_at": self.stops_paying}


def solve_batches(
    profile: Profile, batch_sizes: Sequence[int], config: SolveConfig = SOLVE_DEFAULTS, contexts: int | Sequence[int] | None = None
) -> BatchSolution:
    """:func:`solve` with ``config`` (chains only) at each of ``batch_sizes``: the best plan of each."""
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise SolverError(f"batch sizes are at least 1, got {', '.join(map(str, batch_sizes)) or 'none'}")
    # top_k 1: a schedule keeps the best plan of each batch size only
    configs = {b: config.model_copy(update={"batch_size": b, "trees": False, "top_k": 1}) for b in sizes}
    return BatchSolution([(b, solve(profile, c, contexts).best) for b, c in configs.items()])


def drafter_schedule(
    profile: Profile,
    drafter: str,
    batch_sizes: Sequence[int],
    t_max: int,
    acceptance: AcceptanceModel,
    context_len: int | Sequence[int],
    max_new_tokens: int | None = None,
) -> list[tuple[int, Plan]]:
    """Per batch size, the best plan with one fixed ``drafter`` over the target: its best width k,
    or autoregressive decoding (k = 0) where no width pays; what a serving stack that runs one
    drafter with a batch-size table of k can express. Ranked for generations of ``max_new_tokens``
    (None: the steady state), as the solve was."""
    target = profile.target
    out = []
    for b in sorted(set(batch_sizes)):
        best = Plan((target,), (), predict(profile, [target], [], acceptance, context_len, max_new_tokens, batch_size=b))
        for k in range(1, t_max + 1):
            pred = predict(profile, [drafter, target], [k], acceptance, context_len, max_new_tokens, batch_size=b)
            if pred.ms_per_token < best.prediction.ms_per_token:
                best = Plan((drafter, target), (k,), pred)
        out.append((b, best))
    return out
