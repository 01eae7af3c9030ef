"""``hsd-plan profile``: latency curves and pairwise acceptance, committed one by one.

Every measurement is its own transaction, so an interrupted profile keeps what it finished and a
rerun of the same command skips it (``force`` re-measures, replacing each row as it goes).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import hsd_planner.profiling.contention as contention  # the module, not the package, which imports this one
from hsd_runtime import CachePool, ModelLoader, ModelSpec, check_same_tokenizer, parse_spec, positions_needed
from hsd_runtime.learned.bpd import load_bpd
from hsd_runtime.learned.steering import steer_model
from hsd_runtime.models.loading import context_limit
from hsd_runtime.terms.kinds import BLOCK_HEADS, STEERED, DrafterKind, kind_of
from hsd_runtime.terms.spec import same_model

from ..errors import ChainError, PromptError
from ..prompts import PromptSet, encode_prompt
from ..store import Engine
from ..store.measurements import latency_curves, record_floor_probe, register_run, set_host_cost
from ..store.records import SettingRecord, WorkloadRecord
from .config import ProfileConfig, ProfiledModel, ProfileOutcome
from .continuations import ASSIST_WIDTH, Assistant, check_stored_continuations
from .floor import pass_floor_ms, pass_traffic, probe_floor
from .guard import Guard
from .hardware import detect_hardware
from .pairs import AcceptanceRun, Prompt, Verification, measure_acceptance
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
    if all(not kind_of(s).own_model for s in specs):
        raise ChainError("--models needs at least one model besides ngram and bpd")
    candidates = [ProfiledModel(s, m) for s, m in zip(specs, loader.load_chain(specs))]
    width = check_same_tokenizer([c.loaded for c in candidates if c.loaded is not None])
    for c in candidates:
        if c.kind.host is not None:
            BINDINGS[c.kind](c, candidates, width, loader)
    # stable sort: cheapest first, ties keep the order given
    out = sorted(candidates, key=lambda c: c.cost_rank)
    if not out[-1].kind.verifies:  # ngram and bpd rank first: only a steered model can be last here
        raise ChainError(f"{out[-1].spec} is steered by a larger model, and the largest candidate is the target; list its verifier")
    return out


def _bind_steering(cand: ProfiledModel, candidates: list[ProfiledModel], width: int, loader: ModelLoader) -> None:
    """Load a steered candidate's steering; its verifier must be listed too."""
    cand.loaded = steer_model(cand.loaded_model)
    trained = parse_spec(cand.loaded.model.steerer.card.verifier)
    verifier = next((c for c in candidates if c.kind.verifies and same_model(trained, c.spec)), None)
    if verifier is None:
        raise ChainError(f"{cand.spec} is steered by {trained}; list that model in --models too")
    cand.host = str(verifier.spec)


def _bind_heads(cand: ProfiledModel, candidates: list[ProfiledModel], width: int, loader: ModelLoader) -> None:
    """Load a ``bpd:`` candidate's heads and bind them to their host, which must be listed too."""
    drafter = load_bpd(cand.spec, loader, [c.loaded for c in candidates if c.loaded is not None])
    if drafter.paths > 1:
        raise ChainError(f"{cand.spec}: the planner prices one drafted path per round; profile it with p=1 (generate runs p > 1)")
    host = next((c for c in candidates if c.kind.own_model and drafter.reads(c.spec)), None)
    if host is None:
        raise ChainError(f"{cand.spec} holds heads for {drafter.card.host}; list that model in --models too")
    drafter.bind(host.loaded_model.model, width)
    cand.heads, cand.host = drafter, str(host.spec)


# how a candidate of a kind that needs the level above it is bound to that level, which must be listed too
BINDINGS: dict[DrafterKind, Callable[[ProfiledModel, list[ProfiledModel], int, ModelLoader], None]] = {
    BLOCK_HEADS: _bind_heads,
    STEERED: _bind_steering,
}


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
    db: Engine,
    config: ProfileConfig,
    prompts: PromptSet,
    loader: ModelLoader,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
    prepared: PreparedProfile | None = None,
    note: Callable[[str], None] | None = None,
) -> ProfileOutcome:
    """Measure what the database lacks for ``config`` on ``prompts``.

    ``total(n)`` is called once with the number of work units and ``progress(1)`` after each.
    ``prepared`` is :func:`prepare_profile` of the same arguments, when the caller ran it before
    opening the database (so that a refusal creates no database); None prepares here. ``note``:
    told in one line when other work contends for the cores (:mod:`.guard`).
    """
    prep = prepared or prepare_profile(config, prompts, loader)
    candidates, encoded, contexts = prep.candidates, prep.encoded, prep.contexts
    if config.acceptance and not config.force:
        check_stored_continuations(db, prompts.content_hash, [c for c in candidates if c.kind.own_model])
    hardware = detect_hardware(loader.device, loader.kernels)
    keys, ids = register_run(
        db,
        hardware,
        WorkloadRecord(prompts.name, prompts.content_hash, len(prompts.prompts)),
        [len(ids) for ids in encoded],  # the workload's own contexts, for solves that do not name one
        SettingRecord(config.mode, config.temperature, config.top_p, config.dtype, config.max_new_tokens, config.lenience),
        [(str(c.spec), c.facts, source_fingerprint(str(c.spec))) for c in candidates],
        replace=config.force,
    )
    out = ProfileOutcome(hardware_id=keys.hardware_id, workload_id=keys.workload_id, setting_id=keys.setting_id)
    for c, row_id in zip(candidates, ids):
        c.row_id = out.model_ids[str(c.spec)] = row_id
    verifications = _verifications(candidates, config) if config.acceptance else []
    points = latency_points(config, candidates, contexts)
    if total:
        total(len(points) * config.repeats + len(prompts.prompts) * sum(1 + len(v.drafters) for v in verifications))
    step = progress or (lambda _n: None)

    # every engine's passes run on the process's thread count (llama.cpp's too: docs/engines.md)
    guard = Guard(contention.probe(hardware.threads), config.allow_busy, note=note)
    out.busy_checked = guard.available
    sweep = Sweep(db, config, out, points, step, _floors(db, config, out, candidates, loader), guard)
    # half the rounds before acceptance (whose drafting picks the fastest candidate from these
    # curves), the rest spread between the verifiers' acceptance passes, which take minutes
    first = -(-config.repeats // 2) if verifications else config.repeats
    sweep.to(first)
    assist = Assistant(
        latency_curves(db, out.hardware_id, {c.row_id: c.spec.run_dtype(config.dtype) for c in candidates}),
        statistics.median(len(ids) for ids in encoded) + config.max_new_tokens // 2,
    )
    acceptance = AcceptanceRun(db, config, out, assist, step)
    # prompt by prompt, every verifier's continuation and its drafters' passes over it, on one cache
    # per model: a drafter's pass over a verifier's continuation keeps the prompt its own
    # continuation (or its assisting) prefilled and feeds only the continuation. The caches go
    # with the prompt, each (llama.cpp) holding just the positions it needs
    for k, ids in enumerate(encoded if verifications else []):
        prompt = Prompt(k, ids, CachePool(positions_needed(len(ids), config.max_new_tokens, [ASSIST_WIDTH])))
        for verification in verifications:
            measure_acceptance(acceptance, verification, prompt)
        del prompt
        sweep.to(first + -(-(config.repeats - first) * (k + 1) // len(encoded)))
    sweep.finish()
    dtypes = {c.row_id: c.spec.run_dtype(config.dtype) for c in candidates}
    for row_id, samples in out.host_samples.items():  # after every curve's rows exist: stored on each of them
        set_host_cost(db, row_id, out.hardware_id, dtypes[row_id], statistics.median(samples))
    return out


def _verifications(candidates: list[ProfiledModel], config: ProfileConfig) -> list[Verification]:
    """Each verifier with the cheaper candidates measured against it: every kind profiled as a
    verifier but the cheapest (a steered model's own distribution depends on the level above it:
    it verifies nothing here), each with every cheaper candidate that drafts for it (one bound to
    its host or verifier only for that one). A model of random weights (``weights=random``) is
    timed only: what it drafts or verifies means nothing."""
    out = []
    for j, v in enumerate(candidates):
        if j == 0 or not v.kind.verifies or v.spec.random_weights:
            continue
        drafters = [d for d in candidates[:j] if d.host in (None, str(v.spec)) and not d.spec.random_weights]
        # a lenience relaxes the target's test only (the runtime's rule): the largest model's pairs
        out.append(Verification(v, drafters, config.lenience if j == len(candidates) - 1 else 1.0))
    return out


def _floors(
    db: Engine, config: ProfileConfig, out: ProfileOutcome, candidates: list[ProfiledModel], loader: ModelLoader
) -> Callable[[ProfiledModel, int, int], float | None]:
    """Probe the machine's floor (kept with the hardware row); return the floor of a pass (None:
    ngram, and a steered model's projection, n = 0)."""
    models = [c for c in candidates if c.loaded is not None and c.loaded.engine == "torch"]
    if not models:  # llama.cpp, static: their kernels are not torch's, the floor probe says nothing of them
        return lambda c, ctx, n: None
    probe = probe_floor(loader.device, sorted({c.spec.run_dtype(config.dtype) for c in models}), loader.kernels)
    record_floor_probe(db, out.hardware_id, probe)
    traffic = {c.row_id: pass_traffic(c.loaded.model) for c in models}
    return lambda c, ctx, n: pass_floor_ms(traffic[c.row_id], n, ctx, probe) if c.row_id in traffic and n else None
