"""The acceptance step of a profile: on one prompt, a verifier's continuation and the acceptance of
each cheaper drafter over it, committed pair by pair.

Each drafter is measured the way its kind says (:mod:`hsd_runtime.terms.kinds`, ``acceptance``;
the measurements themselves are :mod:`.acceptance`'s), and the same logits give each drafter that
drafts trees its sibling curve (:mod:`.siblings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from hsd_runtime import CachePool, SamplingConfig
from hsd_runtime.terms.kinds import Measure

from ..store import Engine
from ..store.measurements import measured_prompts, save_prompt_acceptance
from ..store.records import PromptAcceptance, PromptPairKey
from .acceptance import (
    TokenAcceptance,
    VisitedSums,
    acceptance_from_logits,
    block_acceptance,
    bpd_acceptance,
    confident_conditionals,
    confident_lengths,
    model_conditionals,
    ngram_acceptance,
    ngram_blocks,
    run_length_sums,
    start_survival,
    steered_acceptance,
    teacher_forced_logits,
    visited_run_sums,
)
from .config import ProfileConfig, ProfiledModel, ProfileOutcome
from .continuations import Assistant, verifier_continuation
from .siblings import sibling_acceptance, sibling_sums
from .stateful import stateful_blocks, stateful_visited

__all__ = ["MEASURES", "AcceptanceRun", "Prompt", "Verification", "measure_acceptance", "pooled_logits"]


@dataclass
class AcceptanceRun:
    """What every prompt's acceptance step shares: the database, the run's config and outcome,
    the chooser of the continuations' drafters and the progress callback (``step(n)``: n units done)."""

    db: Engine
    config: ProfileConfig
    out: ProfileOutcome
    assist: Assistant
    step: Callable[[int], None]


@dataclass(frozen=True)
class Verification:
    """One verifier and the cheaper candidates measured against it, under ``lenience`` (the e of
    lossy verification: the target's, 1 below it)."""

    verifier: ProfiledModel
    drafters: list[ProfiledModel]
    lenience: float = 1.0


class Prompt(NamedTuple):
    """Prompt ``k`` of the workload, encoded (``ids``), with the caches its models share (``pool``:
    the continuations' and the drafters' passes over them)."""

    k: int
    ids: list[int]
    pool: CachePool


class _Teacher(NamedTuple):
    """What every drafter's measurement over one verifier's continuation reads."""

    verifier: ProfiledModel
    prompt: list[int]
    continuation: list[int]
    p_logits: torch.Tensor  # [m, width] fp32: the verifier's row of each continuation token
    width: int  # the logits columns every model of the pair has
    sampling: SamplingConfig
    seed: int  # of the sibling draws: the run's seed plus the prompt's index
    pool: CachePool


class _Measured(NamedTuple):
    """A drafter's conditionals c_t[i] ``[m, G_MAX]``, its sibling sums (None, None: chains only)
    and the lengths of the blocks it proposed (None: it drafts every token it is asked for)."""

    c: torch.Tensor
    siblings: tuple[list[float] | None, int | None] = (None, None)
    lengths: list[int] | None = None
    min_width: int = 1  # narrower widths draft nothing (llama-server's lookup)
    visited: VisitedSums | None = None  # measured by running the rounds (a lookup that keeps state), else from c


def measure_acceptance(run: AcceptanceRun, verification: Verification, prompt: Prompt) -> None:
    """Teacher-force every drafter of ``verification`` over its verifier's continuation of ``prompt``
    (generated, or read where stored) and store each pair's sums the database lacks
    (``force``: all).

    A prompt row stored before sibling curves existed keeps none: filling it in needs these
    passes again, so it happens only when the pair is measured again (``force``), and until then
    the pair's pooled curve is None (chains only for that pair).
    """
    config, out, step, verifier, drafters = run.config, run.out, run.step, verification.verifier, verification.drafters
    sampling = SamplingConfig(mode=config.mode, temperature=config.temperature, top_p=config.top_p, lenience=verification.lenience)
    width = min([verifier.loaded_model.logits_width] + [d.loaded.logits_width for d in drafters if d.loaded is not None])
    keys = {d.row_id: PromptPairKey(d.row_id, verifier.row_id, out.workload_id, out.setting_id, prompt.k) for d in drafters}
    done = measured_prompts(run.db, keys.values())
    todo = drafters if config.force else [d for d in drafters if keys[d.row_id] not in done]
    if not todo:
        out.skipped += 1 + len(drafters)
        step(1 + len(drafters))
        return
    # a kind bound to its host or verifier drafts under it only, never the continuation (a plain
    # chain); a pmin= drafter's model is timed under its own name, when listed, and assists as that
    assistants = [d for d in drafters if d.kind.host is None and not d.kind.stops]
    chosen = run.assist.choose(assistants, verifier)
    continuation, rows = verifier_continuation(run.db, config, out, verifier, prompt.k, prompt.ids, chosen, prompt.pool)
    out.measured += rows is not None
    out.skipped += rows is None
    step(1)
    # the rows its generation computed; a stored continuation is teacher-forced again
    if rows is None:
        p_logits = teacher_forced_logits(verifier.loaded_model.model, prompt.ids, continuation, width)
    else:
        p_logits = rows[:, :width].float()
    out.skipped += len(drafters) - len(todo)
    step(len(drafters) - len(todo))
    teacher = _Teacher(verifier, prompt.ids, continuation, p_logits, width, sampling, config.seed + prompt.k, prompt.pool)
    for d in todo:
        measured = MEASURES[d.kind.acceptance](d, teacher)
        c, siblings = measured.c, measured.siblings
        survival = start_survival(c)  # [m, G_MAX + 1]
        run_sum, run_count = run_length_sums(survival)
        visited = measured.visited or visited_run_sums(survival, lengths=measured.lengths, min_width=measured.min_width)
        sums = PromptAcceptance(
            len(c),
            run_sum[1],
            run_sum,
            run_count,
            visited.sums,
            visited.counts,
            *siblings,
            visit_base=visited.bases,
            visit_drafted=visited.drafted,
        )
        run.assist.record(d.row_id, verifier.row_id, run_sum[1], len(c))
        save_prompt_acceptance(run.db, keys[d.row_id], sums)
        out.measured += 1
        step(1)


def _siblings(q_logits: torch.Tensor, t: _Teacher) -> tuple[list[float] | None, int | None]:
    """The sibling sums of a drafter's rows ``q_logits`` ``[m, width]``; none under a lenient
    verifier, which verifies chains only (no tree to price)."""
    if t.sampling.lossy:
        return None, None
    return sibling_sums(sibling_acceptance(q_logits, t.p_logits, t.sampling, seed=t.seed))


def _by_logits(d: ProfiledModel, t: _Teacher) -> _Measured:
    """A model: its own teacher-forced rows against the verifier's, position by position."""
    q_logits = pooled_logits(t.pool, d, t.prompt, t.continuation, t.width)
    return _Measured(model_conditionals(acceptance_from_logits(q_logits, t.p_logits, t.sampling)), _siblings(q_logits, t))


def _by_confidence(d: ProfiledModel, t: _Teacher) -> _Measured:
    """A model that stops on its confidence (``pmin=``): its rows against the verifier's, each
    start's draft ended where the model's top share first falls below p_min, and dropped where it
    is shorter than ``nmin=`` (nothing accepted; the lengths stay those drafted, whose passes ran,
    and a narrower width drafts nothing); chains only."""
    assert d.spec.p_min is not None
    q_logits = pooled_logits(t.pool, d, t.prompt, t.continuation, t.width)
    lengths = confident_lengths(q_logits, d.spec.p_min)
    kept = [n if n >= d.spec.n_min else 0 for n in lengths]
    c = confident_conditionals(acceptance_from_logits(q_logits, t.p_logits, t.sampling), kept)
    return _Measured(c, lengths=lengths, min_width=max(1, d.spec.n_min))


def _by_blocks(d: ProfiledModel, t: _Teacher) -> _Measured:
    """The n-gram lookup: the block it proposes at each start (one lookup per start), chains only;
    a lookup that keeps state between rounds (``ngram-mod``, ``ngram-map-k``) is measured by
    running its rounds, width by width (:mod:`.stateful`)."""
    spec = d.spec
    if spec.keeps_state:
        accept = TokenAcceptance(t.p_logits, t.sampling)
        blocks = stateful_blocks(spec, t.prompt, t.continuation, accept)
        visited = stateful_visited(spec, t.prompt, t.continuation, accept)
        return _Measured(block_acceptance(blocks, accept), lengths=[len(b) for b in blocks], visited=visited)
    server = spec.server_rule
    blocks = ngram_blocks(spec.ngram_order, t.prompt, t.continuation, min_size=spec.ngram_min, server=server)
    least = spec.ngram_order if server else 1
    return _Measured(ngram_acceptance(blocks, t.p_logits, t.sampling), lengths=[len(b) for b in blocks], min_width=least)


def _by_heads(d: ProfiledModel, t: _Teacher) -> _Measured:
    """Block-draft heads on their host's hidden rows (the host is this verifier), chains only."""
    assert d.heads is not None  # bound by the run's loading
    return _Measured(bpd_acceptance(d.heads, t.prompt, t.continuation, t.p_logits, t.sampling))


def _by_steering(d: ProfiledModel, t: _Teacher) -> _Measured:
    """A steered model under its verifier; siblings from the first depth's staleness, every depth alike."""
    c, q_logits = steered_acceptance(d.loaded_model.model, t.verifier.loaded_model.model, t.prompt, t.continuation, t.p_logits, t.sampling)
    return _Measured(c, _siblings(q_logits, t))


# how a drafter's acceptance is measured, by its kind's ``acceptance`` (hsd_runtime.terms.kinds)
MEASURES: dict[Measure, Callable[[ProfiledModel, _Teacher], _Measured]] = {
    "logits": _by_logits,
    "blocks": _by_blocks,
    "heads": _by_heads,
    "steered": _by_steering,
    "confident": _by_confidence,
}


def pooled_logits(pool: CachePool, drafter: ProfiledModel, prompt: list[int], continuation: list[int], width: int) -> torch.Tensor:
    """:func:`.acceptance.teacher_forced_logits` of ``drafter`` (``[len(continuation), width]``,
    fp32) through its cache in ``pool``: the prompt the drafter prefilled for its own
    continuation, or assisting this one, is kept, and only the continuation is fed."""
    assert drafter.loaded is not None
    cache = pool.get(drafter.loaded.model, str(drafter.spec), width)
    with torch.inference_mode():
        rows = cache.logits(prompt + continuation, len(prompt) - 1)[: len(continuation)].float()  # row t predicts continuation[t]
    # its last use on this prompt but for another verifier's: a llama.cpp context keeps the output
    # rows of its widest pass (100 MB for 129 rows of Qwen's vocabulary), not to be held beside the acceptance's arithmetic
    pool.release(drafter.loaded.model)
    return rows
