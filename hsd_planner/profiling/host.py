"""The decoding loop's host work per pass, read off a generation's counters.

A pass's latency curve times the pass alone. Decoding also spends, per pass of a model level, its
cache bookkeeping (prefix matching, rollbacks, logits rows), the choice of drafted tokens from the
logits (level 0) and the verification rule applied to the batch from below; the loop itself
(rounds, commits, end-of-sequence checks) is charged to the target, once per round. On a GPU,
where a pass costs a millisecond or two, that work decides whether a drafter pays; on the CPU it
is small beside a pass but not zero. Profiling measures it on the generations it runs anyway (the
verifiers' continuations) and stores it with each model's curve (``host_ms``).
"""

from __future__ import annotations

from hsd_runtime import GenerationResult

__all__ = ["host_ms_per_pass"]


def host_ms_per_pass(result: GenerationResult, models: list[bool]) -> list[float | None]:
    """ms of host work per pass of each level of ``result`` (None for a level that is no model,
    per ``models``, or that made no pass): its cache, drafting and verification time over its
    passes, and for the target also the loop's remaining time over its rounds.

    >>> from hsd_runtime.decoding.results import LevelStats
    >>> d = LevelStats(model="d", forward_passes=10, time_s=0.10, forward_s=0.09, cache_s=0.01, draft_s=0.01)
    >>> t = LevelStats(model="t", forward_passes=4, time_s=0.40, forward_s=0.38, cache_s=0.02, verify_s=0.02)
    >>> r = GenerationResult(sequences=[[1] * 12], prompt_lengths=[5], levels=[d, t], prefill_s=0.0, decode_s=0.56, target_rounds=4)
    >>> [round(x, 3) for x in host_ms_per_pass(r, [True, True])]
    [2.0, 17.5]
    """
    levels = result.levels
    charged = sum(x.time_s + x.draft_s + x.verify_s + x.steer_s for x in levels)
    loop = max(0.0, result.decode_s - charged)  # the hierarchy's own work between the levels' calls
    out: list[float | None] = []
    for k, (stats, is_model) in enumerate(zip(levels, models)):
        if not is_model or stats.forward_passes == 0:
            out.append(None)
            continue
        host = stats.cache_s + stats.draft_s + stats.verify_s
        if k == len(levels) - 1 and result.target_rounds:
            host += loop * stats.forward_passes / result.target_rounds
        out.append(1000.0 * host / stats.forward_passes)
    return out
