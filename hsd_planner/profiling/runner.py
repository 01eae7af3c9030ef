"""``hsd-plan profile``: latency curves and pairwise acceptance, committed one by one.

Every measurement is its own transaction, so an interrupted profile keeps what it finished and a
rerun of the same command skips it (``force`` re-measures, replacing each row as it goes).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hsd_runtime import CachePool, ModelLoader, ModelSpec, SamplingConfig, check_same_tokenizer, parse_spec, positions_needed
from hsd_runtime.learned.bpd import load_bpd
from hsd_runtime.learned.steering import steer_model
from hsd_runtime.models.loading import context_limit
from hsd_runtime.terms.spec import same_model

from ..errors import ChainError, PromptError
from ..prompts import PromptSet, encode_prompt
from ..store import Engine
from ..store.measurements import latency_curves, measured_prompts, record_floor_probe, register_run, save_prompt_acceptance, set_host_cost
from ..store.records import PromptAcceptance, PromptPairKey, SettingRecord, WorkloadRecord
from .acceptance import (
    acceptance_from_logits,
    bpd_acceptance,
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
from .continuations import ASSIST_WIDTH, Assistant, check_stored_continuations, verifier_continuation
from .floor import pass_floor_ms, pass_traffic, probe_floor
from .hardware import detect_hardware
from .siblings import sibling_acceptance, sibling_sums
from .sources import source_fingerprint
from .sweep import Sweep, latency_points

__all__ = ["PreparedProfile", "prepare_profile", "run_profile", "workload_context_lens"]


def workload_context_lens(prompt_tokens: list[int], max_new_tokens: int) -> list[int]:
    """Context lengths to time at: 64 and 512, and the longest prompt plus its continuation
    (rounded up to a multiple of 256) when that is longer, so the cost curves cover the workload
    instead of being extrapolated (at 783 tokens the extrapolation from 64 and 512 was 28% low).

    >>> workload_context_lens([40, 700], 64)
    [64, 512, 768]
    """
    longest = max(prompt_tokens, default=0) + max_new_tokens
    return [64, 512] + ([-(-longest // 256) * 256] if longest > 512 else [])


@dataclass
class PreparedProfile:
    """What a profile run measures, loaded and checked before anything is written: the
    candidates (cheapest first), the encoded prompts and the context lengths to time at."""

    candidates: list[ProfiledModel]
    encoded: list[list[int]]
    contexts: list[int]

    @property
    def target(self) -> ModelSpec:
        """The dearest candidate: the only one no other candidate verifies."""
        return self.candidates[-1].spec


def _load(config: ProfileConfig, loader: ModelLoader) -> list[ProfiledModel]:
    specs = [parse_spec(s) for s in config.models]
    seen = set()
    for spec in specs:
        if str(spec) in seen:
            raise ChainError(f"model {spec} is listed twice in --models")
        seen.add(str(spec))
    if config.acceptance and len(specs) < 2:
        raise ChainError("acceptance needs at least two models (a drafter and a verifier); add one, or pass --skip-acceptance")
    if all(not s.is_model for s in specs):
        raise ChainError("--models needs at least one model besides ngram and bpd")
    candidates = [ProfiledModel(s, m) for s, m in zip(specs, loader.load_chain(specs))]
    width = check_same_tokenizer([c.loaded for c in candidates if c.loaded is not None])
    for c in candidates:
        if c.spec.is_bpd:
            _bind_heads(c, candidates, width, loader)
        elif c.spec.steer is not None:
            _bind_steering(c, candidates)
    # stable sort: cheapest first, ties keep the order given
    out = sorted(candidates, key=lambda c: c.cost_rank)
    if out[-1].spec.steer is not None:
        raise ChainError(f"{out[-1].spec} is steered by a larger model, and the largest candidate is the target; list its verifier")
    return out


def _bind_steering(cand: ProfiledModel, candidates: list[ProfiledModel]) -> None:
    """Load a steered candidate's steering; its verifier must be listed too."""
    assert cand.loaded is not None
    cand.loaded = steer_model(cand.loaded)
    trained = parse_spec(cand.loaded.model.steerer.card.verifier)
    verifier = next((c for c in candidates if c.loaded is not None and c.spec.steer is None and same_model(trained, c.spec)), None)
    if verifier is None:
        raise ChainError(f"{cand.spec} is steered by {trained}; list that model in --models too")
    cand.host = str(verifier.spec)


def _bind_heads(cand: ProfiledModel, candidates: list[ProfiledModel], width: int, loader: ModelLoader) -> None:
    """Load a ``bpd:`` candidate's heads and bind them to their host, which must be listed too."""
    drafter = load_bpd(cand.spec, loader, [c.loaded for c in candidates if c.loaded is not None])
    if drafter.paths > 1:
        raise ChainError(f"{cand.spec}: the planner prices one drafted path per round; profile it with p=1 (generate runs p > 1)")
    host = next((c for c in candidates if c.loaded is not None and drafter.reads(c.spec)), None)
    if host is None:
        raise ChainError(f"{cand.spec} holds heads for {drafter.card.host}; list that model in --models too")
    assert host.loaded is not None
    drafter.bind(host.loaded.model, width)
    cand.heads, cand.host = drafter, str(host.spec)


def prepare_profile(config: ProfileConfig, prompts: PromptSet, loader: ModelLoader) -> PreparedProfile:
    """Load the candidates and encode the prompts; refuse, before any write, what cannot be measured.

    Every prompt with its continuation (and the drafts that generate it) must fit the shortest
    context of the candidates, and so must every timed pass (context length plus n). Contexts
    chosen automatically are capped to fit; ones given with --context-lens are refused instead.
    """
    candidates = _load(config, loader)
    if any(b > 1 for b in config.batch_sizes) and any(c.loaded is not None and c.loaded.engine != "torch" for c in candidates):
        raise ChainError(
            "--batch-sizes above 1 are profiled on the torch engine only; drop them, or profile llama.cpp with --batch-sizes 1"
        )
    tokenizer = next(c.loaded.tokenizer for c in candidates if c.loaded is not None)  # one tokenizer: checked in _load
    encoded = [encode_prompt(tokenizer, p) for p in prompts.prompts]
    limits = [context_limit(c.loaded.model) for c in candidates if c.loaded is not None]
    limit = min((x for x in limits if isinstance(x, int)), default=None)
    widest = max(config.latency_grid)
    contexts = config.context_lens or workload_context_lens([len(ids) for ids in encoded], config.max_new_tokens)
    if limit is not None:
        longest = max(range(len(encoded)), key=lambda k: len(encoded[k]))
        needed = positions_needed(len(encoded[longest]), config.max_new_tokens, [ASSIST_WIDTH])
        if needed > limit:
            raise PromptError(
                f"prompt {longest + 1} of {prompts.name} has {len(encoded[longest])} tokens; with {config.max_new_tokens} new tokens "
                f"and the drafts it needs {needed} positions, more than the models' context of {limit}: "
                "shorten the prompt or lower --max-new-tokens"
            )
        if widest >= limit:
            raise ChainError(f"--latency-grid {widest} is not below the models' context of {limit}")
        if config.context_lens is None:
            contexts = sorted({min(ctx, limit - widest) for ctx in contexts})
        elif max(contexts) + widest > limit:
            raise ChainError(
                f"--context-lens {max(contexts)} plus the largest --latency-grid n ({widest}) is more than the models' context of "
                f"{limit}; use context lengths up to {limit - widest}"
            )
    return PreparedProfile(candidates, encoded, contexts)


def run_profile(
    engine: Engine,
    config: ProfileConfig,
    prompts: PromptSet,
    loader: ModelLoader,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
    prepared: PreparedProfile | None = None,
) -> ProfileOutcome:
    """Measure what the database lacks for ``config`` on ``prompts``.

    ``total(n)`` is called once with the number of work units and ``progress(1)`` after each.
    ``prepared`` is :func:`prepare_profile` of the same arguments, when the caller ran it before
    opening the database (so that a refusal creates no database); None prepares here.
    """
    prep = prepared or prepare_profile(config, prompts, loader)
    candidates, encoded, contexts = prep.candidates, prep.encoded, prep.contexts
    if config.acceptance and not config.force:
        check_stored_continuations(engine, prompts.content_hash, [c for c in candidates if c.loaded is not None])
    keys, ids = register_run(
        engine,
        detect_hardware(loader.device, loader.kernels),
        WorkloadRecord(prompts.name, prompts.content_hash, len(prompts.prompts)),
        [len(ids) for ids in encoded],  # the workload's own contexts, for solves that do not name one
        SettingRecord(config.mode, config.temperature, config.top_p, config.dtype, config.max_new_tokens, config.lenience),
        [(str(c.spec), c.facts, source_fingerprint(str(c.spec))) for c in candidates],
        replace=config.force,
    )
    out = ProfileOutcome(hardware_id=keys.hardware_id, workload_id=keys.workload_id, setting_id=keys.setting_id)
    for c, row_id in zip(candidates, ids):
        c.row_id = out.model_ids[str(c.spec)] = row_id
    # a steered model's own distribution depends on the level above it: it verifies nothing here
    # a model of random weights (weights=random) is timed only: what it drafts or verifies means nothing
    verifiers = [
        j for j, c in enumerate(candidates) if c.loaded is not None and c.spec.steer is None and not c.spec.random_weights and j > 0
    ]
    verifiers = verifiers if config.acceptance else []
    # every cheaper candidate drafts for a verifier, block-draft heads for their own host only
    below = {j: [d for d in candidates[:j] if d.host in (None, str(candidates[j].spec)) and not d.spec.random_weights] for j in verifiers}
    points = latency_points(config, candidates, contexts)
    if total:
        total(len(points) * config.repeats + sum(len(prompts.prompts) * (1 + len(below[j])) for j in verifiers))
    step = progress or (lambda _n: None)

    sweep = Sweep(engine, config, out, points, step, _floors(engine, config, out, candidates, loader))
    # half the rounds before acceptance (whose drafting picks the fastest candidate from these
    # curves), the rest spread between the verifiers' acceptance passes, which take minutes
    first = -(-config.repeats // 2) if verifiers else config.repeats
    sweep.to(first)
    assist = Assistant(
        latency_curves(engine, out.hardware_id, {c.row_id: c.spec.run_dtype(config.dtype) for c in candidates}),
        statistics.median(len(ids) for ids in encoded) + config.max_new_tokens // 2,
    )
    # prompt by prompt, every verifier's continuation and its drafters' passes over it, on one cache
    # per model: a drafter's pass over a verifier's continuation keeps the prompt its own
    # continuation (or its assisting) prefilled and feeds only the continuation. The caches go
    # with the prompt, each (llama.cpp) holding just the positions it needs
    for k, ids in enumerate(encoded if verifiers else []):
        pool = CachePool(positions_needed(len(ids), config.max_new_tokens, [ASSIST_WIDTH]))
        for j in verifiers:
            # a lenience relaxes the target's test only (the runtime's rule): the largest model's pairs
            lenience = config.lenience if j == len(candidates) - 1 else 1.0
            _acceptance_for_prompt(engine, config, k, ids, out, below[j], candidates[j], step, assist, pool, lenience)
        del pool
        sweep.to(first + -(-(config.repeats - first) * (k + 1) // len(encoded)))
    sweep.finish()
    dtypes = {c.row_id: c.spec.run_dtype(config.dtype) for c in candidates}
    for row_id, samples in out.host_samples.items():  # after every curve's rows exist: stored on each of them
        set_host_cost(engine, row_id, out.hardware_id, dtypes[row_id], statistics.median(samples))
    return out


def _floors(
    engine: Engine, config: ProfileConfig, out: ProfileOutcome, candidates: list[ProfiledModel], loader: ModelLoader
) -> Callable[[ProfiledModel, int, int], float | None]:
    """Probe the machine's floor (kept with the hardware row); return the floor of a pass (None:
    ngram, and a steered model's projection, n = 0)."""
    models = [c for c in candidates if c.loaded is not None and c.loaded.engine == "torch"]
    if not models:  # llama.cpp, static: their kernels are not torch's, the floor probe says nothing of them
        return lambda c, ctx, n: None
    probe = probe_floor(loader.device, sorted({c.spec.run_dtype(config.dtype) for c in models}), loader.kernels)
    record_floor_probe(engine, out.hardware_id, probe)
    traffic = {c.row_id: pass_traffic(c.loaded.model) for c in models}
    return lambda c, ctx, n: pass_floor_ms(traffic[c.row_id], n, ctx, probe) if c.row_id in traffic and n else None


def _acceptance_for_prompt(
    engine: Engine,
    config: ProfileConfig,
    k: int,
    ids: list[int],
    out: ProfileOutcome,
    drafters: list[ProfiledModel],
    verifier: ProfiledModel,
    step: Callable[[int], None],
    assist: Assistant,
    pool: CachePool,
    lenience: float = 1.0,
) -> None:
    """Teacher-force every cheaper drafter over the verifier's continuation of prompt ``k`` (encoded: ``ids``).

    ``lenience``: the e under which this verifier's acceptance is measured (1 below the target).
    ``pool``: the models' caches for this prompt, shared by the continuations and the drafters' passes.

    The same logits give each model drafter's sibling curve (:mod:`.siblings`). A prompt row
    stored before sibling curves existed keeps none: filling it in needs these passes again, so
    it happens only when the pair is measured again (``force``), and until then the pair's pooled
    curve is None (chains only for that pair).
    """
    sampling = SamplingConfig(mode=config.mode, temperature=config.temperature, top_p=config.top_p, lenience=lenience)
    width = min([verifier.loaded.logits_width] + [d.loaded.logits_width for d in drafters if d.loaded is not None])
    keys = {d.row_id: PromptPairKey(d.row_id, verifier.row_id, out.workload_id, out.setting_id, k) for d in drafters}
    done = measured_prompts(engine, keys.values())
    todo = drafters if config.force else [d for d in drafters if keys[d.row_id] not in done]
    if not todo:
        out.skipped += 1 + len(drafters)
        step(1 + len(drafters))
        return
    # heads and steered drafters draft under their own verifier only, never the continuation (a plain chain)
    assistants = [d for d in drafters if d.heads is None and d.spec.steer is None]
    continuation, rows = verifier_continuation(engine, config, out, verifier, k, ids, assist.choose(assistants, verifier), pool)
    out.measured += rows is not None
    out.skipped += rows is None
    step(1)
    # the rows its generation computed; a stored continuation is teacher-forced again
    p_logits = teacher_forced_logits(verifier.loaded.model, ids, continuation, width) if rows is None else rows[:, :width].float()
    out.skipped += len(drafters) - len(todo)
    step(len(drafters) - len(todo))
    for d in todo:
        siblings: tuple[list[float] | None, int | None] = (None, None)  # the n-gram drafter drafts chains only
        lengths = None  # a model drafts every token it is asked for
        if d.heads is not None:
            c = bpd_acceptance(d.heads, ids, continuation, p_logits, sampling)
        elif d.spec.steer is not None:
            assert d.loaded is not None
            c, q_logits = steered_acceptance(d.loaded.model, verifier.loaded.model, ids, continuation, p_logits, sampling)
            if not sampling.lossy:  # siblings from the first depth's staleness, every depth alike
                siblings = sibling_sums(sibling_acceptance(q_logits, p_logits, sampling, seed=config.seed + k))
        elif d.loaded is None:
            blocks = ngram_blocks(d.spec.ngram_order, ids, continuation, min_size=d.spec.ngram_min)  # one lookup per start
            c, lengths = ngram_acceptance(blocks, p_logits, sampling), [len(b) for b in blocks]
        else:
            q_logits = _pooled_logits(pool, d, ids, continuation, width)
            c = model_conditionals(acceptance_from_logits(q_logits, p_logits, sampling))
            if not sampling.lossy:  # a lenient target verifies chains only: no tree to price
                siblings = sibling_sums(sibling_acceptance(q_logits, p_logits, sampling, seed=config.seed + k))
        survival = start_survival(c)  # [m, G_MAX + 1]
        run_sum, run_count = run_length_sums(survival)
        visited = visited_run_sums(survival, lengths=lengths)
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
        assist.record(d.row_id, verifier.row_id, run_sum[1], len(c))
        save_prompt_acceptance(engine, keys[d.row_id], sums)
        out.measured += 1
        step(1)


def _pooled_logits(pool: CachePool, drafter: ProfiledModel, prompt: list[int], continuation: list[int], width: int) -> torch.Tensor:
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
