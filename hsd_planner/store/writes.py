"""Storing one measurement of a profile: a latency point, a continuation, a prompt's acceptance.

Each is written under its natural key in one statement (:mod:`.upsert`), inside the caller's
transaction, so profilers on many machines writing one database never duplicate a row or fail on
one another's, and a rerun or ``--force`` replaces a row in place. A measurement of the same key
by two profilers at once leaves the last one written, whole.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from .repo import aggregate_acceptance
from .schema import AcceptancePrompt, Continuation, Latency
from .server import advisory_lock
from .upsert import upsert

__all__ = ["record_acceptance_prompt", "record_continuation", "record_latency"]


def record_latency(session: Session, key: dict, **values: object) -> None:
    """Store a latency point (``key``: model_id, hardware_id, dtype, n_tokens, context_len, batch_size)."""
    upsert(session, Latency, key, values)


def record_continuation(session: Session, key: dict, tokens: list[int]) -> None:
    """Store a verifier's continuation of a prompt (``key``: verifier_id, workload_id, setting_id, prompt_index)."""
    upsert(session, Continuation, key, {"tokens": tokens})


def record_acceptance_prompt(session: Session, key: dict, **values: object) -> None:
    """Store one prompt's acceptance sums of a pair and pool the pair's workload row again.

    ``key``: drafter_id, verifier_id, workload_id, setting_id, prompt_index. Writers of one pair
    take turns (a lock per pair until commit): pooling reads every prompt stored, so two writers
    pooling at once would each miss the other's prompt and the later would drop it.
    """
    pair = {k: key[k] for k in ("drafter_id", "verifier_id", "workload_id", "setting_id")}
    advisory_lock(session, "hsd-plan acceptance", *pair.values())
    upsert(session, AcceptancePrompt, key, values)
    aggregate_acceptance(session, **pair)
