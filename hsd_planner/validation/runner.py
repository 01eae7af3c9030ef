"""``hsd-plan validate``: run solved plans on held-out prompts and compare with the prediction.

For each plan: measured ms per generated token (decode only, median over prompts and repeats;
prefill reported apart), the prediction of the latency model (median over the prompts of the
prediction at each prompt's context: its length plus half the continuation, for a generation of
``max_new_tokens`` tokens whose last round is cut short),
error = (predicted - measured) / measured, measured speed-up over the target's own
autoregressive decoding run in the same validation, and mean accepted length per level, predicted
and measured. Overall: the median absolute error and the regret, the measured latency of the
solver's pick over the best measured among the plans run.

With batch sizes (``validate --batch-sizes``) the same plans run at each b asked for, on
batches of b prompts decoded in lockstep, beside autoregressive decoding of the same batches and
the solve's schedule's plan for b; predicted by the same rule at b (the median over the prompts'
contexts of the lockstep prediction), calibrated and measured as at b = 1.

Other work on the machine is watched over every run and over the whole measuring
(:mod:`hsd_planner.profiling.contention`): the report says how much there was and which runs it
contended with, since a run slowed by it measures the machine, not the plan.

The error compares a profile measured at one time with runs at another, so it includes any
change of the machine's speed in between (on a shared 2-core host, 10-25% from one minute to the
next). The speed-up error, predicted over measured speed-up against autoregressive decoding minus
one, divides out a change that slows every pass alike, but not one that changes the curves'
shape (memory contention slows single-token passes most). The calibrated prediction takes both
out, run by run (:mod:`.calibration`): each run is predicted from the profile scaled by the
reference passes measured around it, and a plan's calibrated prediction is the median over its runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, cast

import torch

from hsd_runtime import (
    CachePool,
    ChainError,
    GenerationResult,
    Hierarchy,
    HSDError,
    ModelLoader,
    SamplingConfig,
    build_hierarchy,
    positions_needed,
)
from hsd_runtime.terms.shape import Width

from ..choices import AcceptanceModel
from ..errors import StoreError
from ..plan import Plan, Prediction, Profile, predict_over, widths_to_json
from ..plan.batch import schedule_of
from ..profiling import contention
from ..profiling.contention import MIN_WINDOW_S, Load, combine
from ..profiling.sources import check_source
from ..profiling.timing import PassTimer
from ..prompts import PromptSet, encode_prompt
from ..solving import Bootstrap, bootstrap_predictions, bootstrap_profiles, past_misses, past_plans, widened
from ..store import Engine
from ..store.profiles import ProfileSource, load_solve_profile
from ..store.records import RankedPlan, SolveRecord
from ..store.schedule import load_batch_plans
from ..store.validations import coverage_history, model_sources
from .calibration import Calibration
from .report import PlanResult, ValidationReport
from .results import level_results, plan_result, same_text, speedup_interval, store_validation

__all__ = ["run_validation"]

# the summary figures of a validation report that are stored with it
SUMMARY = (
    "median_abs_error",
    "regret",
    "median_abs_speedup_error",
    "median_abs_error_calibrated",
    "median_abs_speedup_error_calibrated",
    "coverage",
)


@dataclass(frozen=True)
class _Entry:
    """A plan to run at one batch size: the stored plan's id (None: a fixed chain), its kind and
    the plan as stored (its prediction replaced by the validation's own)."""

    plan_id: int | None
    kind: str
    plan: Plan
    tied: bool | None = None

    @property
    def key(self) -> tuple[tuple[str, ...], tuple[int | str, ...]]:
        """Chain and widths: one plan runs once per batch size, and one hierarchy serves every batch size."""
        return self.plan.chain, tuple(widths_to_json(self.plan.widths))


def run_validation(
    db: Engine,
    loader: ModelLoader,
    solve: SolveRecord,
    plans: list[RankedPlan],
    prompts: PromptSet,
    max_new_tokens: int,
    repeats: int,
    batch_sizes: Sequence[int] | None = None,
    fixed: Sequence[tuple[Sequence[str], Sequence[Width]]] = (),
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> ValidationReport:
    """Run every plan on every prompt ``repeats`` times at every batch size, store the validation,
    return a report.

    ``batch_sizes``: None runs batch size 1 alone; given, each b asked for runs ``plans``, the
    solve's schedule's plan for b where the solve has a schedule (``solve --batch-sizes``) and
    ``fixed`` chains, every one on batches of b prompts (a plan that decodes one prompt at a time
    - a draft tree, block-draft heads, steering, an engine other than torch - is left out above 1,
    and the report says so). ``total``: told the number of ``progress`` steps once the plans to
    run are known."""
    sizes = sorted(set(batch_sizes or [1]))
    entries = _entries(db, solve, plans, sizes, fixed, schedule=batch_sizes is not None)
    profile, source = _solve_profile(db, solve, [e for group in entries.values() for e in group])
    loader = loader.with_kernels(solve.hardware.kernels or "plain")  # the plans run on the kernels their latencies were measured with
    encoded = [encode_prompt(loader.load(solve.target).tokenizer, p) for p in prompts.prompts]
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    built = _build([e for group in entries.values() for e in group], loader, _cells(entries, encoded, max_new_tokens))
    # a plan that decodes one prompt at a time runs at batch size 1 only, and the report says so
    lockstep = {e.key for b, group in entries.items() if b > 1 for e in group}
    refused = {key: why for key in lockstep if (why := _one_row(built[key], encoded[0])) is not None}
    skipped = [
        f"{_label(e)} at batch size {b}: {refused[e.key]}" for b, group in entries.items() if b > 1 for e in group if e.key in refused
    ]
    entries = {b: [e for e in group if b == 1 or e.key not in refused] for b, group in entries.items()}
    # predicted before anything runs: a batch size the profile cannot price is refused up front
    comparison = _Comparison(profile, solve.acceptance_model, contexts, max_new_tokens, greedy=solve.setting.mode == "greedy")
    predicted = {(b, e.key): comparison.predicted(e.plan, b) for b, group in entries.items() for e in group}
    # what a run on these held-out prompts will show: each bootstrap profile pools as many prompts
    boot = bootstrap_profiles(
        db, profile, source, drift=True, sample=len(encoded), plans=[e.plan for group in entries.values() for e in group]
    )
    scores = past_misses(db, solve.target, solve.hardware_id, solve.workload_id)  # the misses of the validations stored before this one
    units = {b: _units(len(encoded), b, repeats) for b in sizes}
    intervals = {
        (b, e.key): comparison.intervals(boot, replace(e.plan, prediction=predicted[(b, e.key)]), b, scores, len(units[b]))
        for b, group in entries.items()
        for e in group
    }
    calibration = _calibration(profile, loader, [e.plan for group in entries.values() for e in group], int(statistics.median(contexts)))
    if total is not None:
        total(sum(len(entries[b]) * len(units[b]) for b in sizes))
    runs = _measure(built, entries, units, encoded, solve, max_new_tokens, calibration, progress or (lambda _n: None))
    results = [r for b in sizes for r in comparison.results(entries[b], b, predicted, intervals, calibration, runs, units[b])]
    report = replace(
        _report(solve, prompts.name, contexts, results, calibration, skipped),
        contention=runs.whole,
        interval_history=past_plans(scores),
        profiled_prompts=boot.prompts if boot.profiles else None,
    )
    # the other work seen rides in the stored calibration's JSON: both describe the machine's state during the runs
    stored = (report.calibration.to_dict() if report.calibration else {}) | {"contention": runs.whole.to_dict() if runs.whole else None}
    summary = {k: getattr(report, k) for k in SUMMARY} | {"calibration": stored}
    stored_id = store_validation(db, solve, prompts, max_new_tokens, repeats, results, **summary)
    return replace(report, validation_id=stored_id, coverage_history=coverage_history(db, solve.target, solve.hardware_id))


def _entries(
    db: Engine,
    solve: SolveRecord,
    plans: list[RankedPlan],
    sizes: list[int],
    fixed: Sequence[tuple[Sequence[str], Sequence[Width]]],
    schedule: bool,
) -> dict[int, list[_Entry]]:
    """Per batch size, the plans to run: ``plans``, then (with ``schedule``) the schedule's plan
    for it, then the ``fixed`` chains; a plan once, under its first kind."""
    stored = load_batch_plans(db, solve.id) if schedule else []
    ranges = schedule_of([(p.batch_size, p.plan) for p in stored])
    beyond = [b for b in sizes if ranges and not ranges[0].min_batch <= b <= ranges[-1].max_batch]
    if beyond:
        raise StoreError(
            f"batch size {beyond[0]} is outside the schedule of solve {solve.id} ({ranges[0].min_batch}..{ranges[-1].max_batch}); "
            "solve with --batch-sizes covering it"
        )
    out: dict[int, list[_Entry]] = {}
    for b in sizes:
        group = [_Entry(p.id, p.kind, p.plan, p.tied) for p in plans]
        if ranges:
            # the stored row whose plan holds b: the one solved at the largest batch size not above b
            row = max((p for p in stored if p.batch_size <= b), key=lambda p: p.batch_size)
            group.append(_Entry(row.id, "schedule", row.plan))
        group += [_Entry(None, "fixed", Plan(tuple(c), tuple(w), _UNKNOWN)) for c, w in fixed]
        unique: dict[tuple, _Entry] = {}
        for e in group:
            unique.setdefault(e.key, e)
        out[b] = list(unique.values())
    return out


# the prediction of a fixed chain, before the validation predicts it
_UNKNOWN = Prediction(0.0, 0.0, 0.0)


def _one_row(hierarchy: Hierarchy, probe: list[int]) -> str | None:
    """Why ``hierarchy`` decodes one prompt at a time (None: it decodes rows in lockstep): the
    chain's own reason (a draft tree, block-draft heads, steering), else its engines' (a model of
    another engine, whose cache holds one row), which a one-token batch of two ``probe`` rows finds."""
    if hierarchy.one_row is not None:
        return hierarchy.one_row
    try:
        hierarchy.generate_batch([probe, probe], 1, stop_at_eos=False)
    except ChainError as exc:
        return str(exc)
    return None


def _label(entry: _Entry) -> str:
    return f"{'plan ' + str(entry.plan_id) if entry.plan_id is not None else entry.kind} ({entry.plan.label})"


def _units(prompts: int, b: int, repeats: int) -> list[list[int]]:
    """The batches of prompt indices run at batch size ``b``: at 1, each prompt ``repeats`` times
    in a row (prompt-major, the order a cached prefill is reused in); above, batches of ``b``
    covering every prompt ``repeats`` times, cycling through them in order.

    >>> _units(3, 1, 2), _units(3, 2, 1)
    ([[0], [0], [1], [1], [2], [2]], [[0, 1], [2, 0]])
    """
    if b == 1:
        return [[k] for k in range(prompts) for _ in range(repeats)]
    count = repeats * -(-prompts // b)
    return [[(j * b + i) % prompts for i in range(b)] for j in range(count)]


def _solve_profile(db: Engine, solve: SolveRecord, entries: list[_Entry]) -> tuple[Profile, ProfileSource]:
    """The profile ``solve`` was made on and its rows, after checking that no model of ``entries`` changed on disk since."""
    stored = model_sources(db)
    for spec in {name for e in entries for name in e.plan.chain}:
        check_source(spec, stored.get(spec))
    return load_solve_profile(db, solve.id)  # its own workload, setting and machine, not the newest of their names


def _cells(entries: dict[int, list[_Entry]], encoded: list[list[int]], max_new_tokens: int) -> int:
    """The positions the longest run of any plan can reach: the longest prompt, the new tokens,
    and twice the drafts ahead of them (a tree's nodes), the size of each llama.cpp context."""
    longest = max(map(len, encoded))
    return max(positions_needed(longest, max_new_tokens, e.plan.widths, tree_nodes=True) for group in entries.values() for e in group)


def _build(entries: list[_Entry], loader: ModelLoader, cells: int | None = None) -> dict[tuple, Hierarchy]:
    """Every plan's hierarchy, loaded once for every batch size it runs at; a plan that cannot be
    run is refused before any runs.

    The plans share one cache per model (they run one at a time), so a plan that runs a prompt
    another plan prefilled keeps that prefill: the decode it times is the same. ``cells``: the
    positions each cache of an engine that allocates them up front holds (None: the model's context)."""
    built: dict[tuple, Hierarchy] = {}
    pool = CachePool(cells)
    for e in entries:
        if e.key in built:
            continue
        try:
            built[e.key] = build_hierarchy(e.plan.chain, e.plan.widths, loader, caches=pool)[0]
        except HSDError as exc:
            raise StoreError(f"{_label(e)} cannot be run: {exc}") from None
    return built


@dataclass
class _Runs:
    """Every plan's runs per batch size, in the order of that batch size's units, and per run the
    reference rounds around it."""

    results: dict[tuple, list[GenerationResult]]  # (batch size, plan key) -> runs
    around: dict[tuple, list[list[int]]]
    loads: dict[tuple, list[Load]] = field(default_factory=dict)  # other work during each run (none where not checked)
    whole: Load | None = None  # other work over the whole measuring

    def busy(self, key: tuple) -> tuple[float | None, int | None]:
        """A plan's runs' other work: its cores on average and the runs it contended with (a run
        shorter than a window that can be judged is not counted); None where not checked."""
        loads = self.loads.get(key, [])
        both = combine(loads)
        if both is None:
            return None, None
        return both.other_cores, sum(x.contended and x.seconds >= MIN_WINDOW_S for x in loads)


def _measure(
    built: dict[tuple, Hierarchy],
    entries: dict[int, list[_Entry]],
    units: dict[int, list[list[int]]],
    encoded: list[list[int]],
    solve: SolveRecord,
    max_new_tokens: int,
    calibration: Calibration,
    step: Callable[[int], None],
) -> _Runs:
    """Reference rounds first, a warm-up of every plan, then at every batch size every plan on
    every unit (a prompt, or a batch of prompts), interleaved so that drift of the machine hits
    every plan alike, a reference round after each run.

    The plans share their models' caches (see :func:`_build`): of each unit, the plans that lead
    it (:func:`_leads`) run first and feed it afresh, their prefill measured; the others, and every
    repeat, reuse the prefill their models hold. The decode, all that is timed, is the same. At
    batch size 1 a sequence stops at EOS; above, every sequence decodes exactly ``max_new_tokens``
    (EOS does not stop it, as in serving benchmarks), so that a batch stays at b from its first
    round to its last, as the prediction has it. A row's seed is 1000 times its prompt's index
    plus the runs of that prompt before it at this batch size."""
    s = solve.setting
    sampling = SamplingConfig(mode=s.mode, temperature=s.temperature, top_p=s.top_p, lenience=s.lenience)
    probe = contention.probe(torch.get_num_threads())  # None where the machine does not say
    whole = probe.snapshot() if probe else None
    calibration.measure(rounds=3)  # before the plans run
    for h in built.values():  # warm-up, untimed; the shared models are prefilled once
        h.prepare()  # CUDA graphs of every verification's pass, not captured inside a timed run
        h.generate(encoded[0], 4, sampling, reuse_prompt=True)
    lockstep = {e.key for b, group in entries.items() if b > 1 for e in group}
    runs = _Runs({}, {})
    for b, group in entries.items():
        keys = [e.key for e in group]
        for key in keys:
            runs.results[(b, key)], runs.around[(b, key)], runs.loads[(b, key)] = [], [], []
        if b > 1 and lockstep:  # the first batch size above 1: the lockstep passes warmed up, untimed
            for key in sorted(lockstep):
                built[key].generate_batch(encoded[:2], 4, sampling, stop_at_eos=False)
            lockstep = set()
        distinct = list(dict.fromkeys(tuple(u) for u in units[b]))  # at batch size 1: the prompts, in order
        lead = _leads(len(keys), len(distinct))
        seen: dict[int, int] = {}  # prompt -> its runs so far at this batch size
        fed: set[tuple[int, ...]] = set()
        for unit in units[b]:
            seeds = [1000 * k + seen.get(k, 0) for k in unit]
            for k in unit:
                seen[k] = seen.get(k, 0) + 1
            fresh = tuple(unit) not in fed  # the unit's first run, which its leaders feed afresh
            fed.add(tuple(unit))
            leaders = [key for i, key in enumerate(keys) if lead[i] == distinct.index(tuple(unit))]
            for key in leaders + [k for k in keys if k not in leaders]:
                h, reuse = built[key], not (fresh and key in leaders)
                start = probe.snapshot() if probe else None
                if b == 1:
                    seeded = sampling.model_copy(update={"seed": seeds[0]})
                    result = h.generate(encoded[unit[0]], max_new_tokens, seeded, reuse_prompt=reuse)
                else:
                    rows = [encoded[k] for k in unit]
                    result = h.generate_batch(rows, max_new_tokens, sampling, stop_at_eos=False, seeds=seeds, reuse_prompt=reuse)
                runs.results[(b, key)].append(result)
                if probe and start:
                    runs.loads[(b, key)].append(probe.load(start))
                after = calibration.measure()  # the reference right after every run; the one before is the last round
                runs.around[(b, key)].append([after - 1, after])
                step(1)
    runs.whole = probe.load(whole) if probe and whole else None
    return runs


def _leads(plans: int, units: int) -> list[int]:
    """The unit (a prompt, or a batch) each plan leads: runs first on, feeding it afresh, so that
    every plan has a measured prefill. Plan i leads unit i + 1 (cyclically): the first unit, whose
    first prompt the warm-up fed and the others reuse, is led only where there are at least as
    many plans as units.

    >>> _leads(2, 3), _leads(3, 3), _leads(3, 1)
    ([1, 2], [1, 2, 0], [0, 0, 0])
    """
    return [(i + 1) % units for i in range(plans)]


class _Bands(NamedTuple):
    """What the bootstrap says of one plan before it runs (None each where it says nothing)."""

    speedup: tuple[float, float] | None = None  # the 90% interval of the predicted speed-up
    bootstrap: tuple[float, float] | None = None  # ... before past validations' misses widened it
    accepted: tuple[float, float] | None = None  # ... of the tokens per target round (batch size 1)
    draw_error: float | None = None  # the median |speed-up error| of the bootstrap's predictions against the plan's


@dataclass
class _Comparison:
    """A validation's runs beside what the profile predicts for them: generations of
    ``max_new_tokens`` tokens per sequence, as they are run (the last round cut short), at each
    prompt's context."""

    profile: Profile
    acceptance: AcceptanceModel
    contexts: list[int]
    max_new_tokens: int
    greedy: bool = True  # greedy decoding: each plan's text is compared with autoregressive decoding's

    def predicted(self, plan: Plan, batch: int) -> Prediction:
        """The median over the prompts' contexts, from the profile as measured."""
        return predict_over(self.profile, plan.chain, plan.widths, self.acceptance, self.contexts, self.max_new_tokens, batch)

    def intervals(self, boot: Bootstrap, plan: Plan, batch: int, scores: Sequence[Sequence[float]], runs: int) -> _Bands:
        """Over the bootstrap profiles ``boot`` (each pooling as many resampled profiled prompts as
        this validation runs; costs averaged over the prompts' contexts), one prediction each:

        - the 90% interval of the predicted speed-up as ``runs`` runs of the plan and as many of
          autoregressive decoding will time it (:func:`~hsd_planner.solving.timing_noise`),
          widened by the misses ``scores`` of past validations
          (:func:`~hsd_planner.solving.widened`) around ``plan``'s prediction, this
          validation's, and the bootstrap's own before that;
        - at batch size 1, the 90% interval of the tokens per target round: where held-out sets
          drawn like the profiled prompts would put it;
        - the median |speed-up error| of those predictions against ``plan``'s.

        None each for autoregressive decoding, without per-prompt acceptance, or for a tree whose
        sibling curve the resamples lack."""
        if not plan.depth or not boot.profiles:
            return _Bands()
        found = bootstrap_predictions(boot.profiles, plan, self.acceptance, self.contexts, self.max_new_tokens, batch)
        if found is None:
            return _Bands()
        band = boot.timed_interval(found, self.profile, plan, runs, batch)
        return _Bands(
            widened(band, plan.prediction.speedup, scores),
            band,
            boot.interval([p.mean_accepted_length for p in found]) if batch == 1 else None,
            statistics.median(abs(plan.prediction.speedup / p.speedup - 1.0) for p in found),
        )

    def calibrated_ms(self, entry: _Entry, batch: int, calibration: Calibration, runs: _Runs, units: list[list[int]]) -> float:
        """The prediction from the profile scaled by the drift of the reference rounds around
        each of the plan's runs, at its prompts' contexts, over the runs weighted by their tokens
        (as the measured figure weights them; see :func:`~hsd_planner.validation.results.workload_ms`)."""
        plan, key = entry.plan, (batch, entry.key)
        weighted = [
            (
                predict_over(
                    calibration.apply(self.profile, at),
                    plan.chain,
                    plan.widths,
                    self.acceptance,
                    [self.contexts[k] for k in unit],
                    self.max_new_tokens,
                    batch,
                ).ms_per_token,
                r.total_tokens,
            )
            for unit, at, r in zip(units, runs.around[key], runs.results[key])
            if r.total_tokens
        ]
        return sum(ms * n for ms, n in weighted) / sum(n for _, n in weighted)

    def results(
        self,
        entries: list[_Entry],
        batch: int,
        predicted: dict[tuple, Prediction],
        intervals: dict[tuple, _Bands],
        calibration: Calibration,
        runs: _Runs,
        units: list[list[int]],
    ) -> list[PlanResult]:
        """Every plan's predictions against its measurements at ``batch``; speed-ups over the
        autoregressive plan run beside it on the same prompts or batches. ``intervals``: per plan,
        the 90% intervals of its predicted speed-up and tokens per round (:meth:`intervals`)."""
        auto = next(e for e in entries if not e.plan.depth)
        calibrated = {e.key: self.calibrated_ms(e, batch, calibration, runs, units) for e in entries}
        mine_auto = runs.results[(batch, auto.key)]
        # the bootstrap's units: the prompts at batch size 1 (each with its repeats), the batches above
        groups = len(self.contexts) if batch == 1 else len(units)
        out = []
        for e in entries:
            mine = runs.results[(batch, e.key)]
            other, busy = runs.busy((batch, e.key))
            same, compared = same_text(mine, mine_auto) if self.greedy and e.plan.depth else (None, None)
            bands = intervals[(batch, e.key)]
            out.append(
                plan_result(
                    e.plan_id,
                    e.kind,
                    e.plan,
                    (predicted[(batch, e.key)], predicted[(batch, auto.key)]),
                    (mine, mine_auto),
                    level_results(self.profile, e.plan, mine, self.acceptance, batch),
                    groups,
                    measured_speedup_interval=speedup_interval(mine_auto, mine, groups),
                    tied=e.tied,
                    calibrated_ms_per_token=calibrated[e.key],
                    calibrated_speedup=calibrated[auto.key] / calibrated[e.key],
                    batch_size=batch,
                    predicted_speedup_interval=bands.speedup,
                    bootstrap_speedup_interval=bands.bootstrap,
                    predicted_accepted_interval=bands.accepted,
                    expected_abs_speedup_error=bands.draw_error,
                    other_cores=other,
                    busy_runs=busy,
                    same_text=same,
                    text_runs=compared,
                )
            )
        return out


def _report(
    solve: SolveRecord, prompts: str, contexts: list[int], results: list[PlanResult], calibration: Calibration, skipped: list[str]
) -> ValidationReport:
    """The validation's report, not yet stored; the solver's pick is its best plan when it was
    run, else the stored plan with the lowest prediction at the smallest batch size run."""
    first = [p for p in results if p.batch_size == results[0].batch_size and p.plan_id is not None]
    pick = next((p for p in results if p.kind == "best"), None) or min(first, key=lambda p: p.plan.prediction.ms_per_token)
    return ValidationReport(
        validation_id=0,
        solve_id=solve.id,
        target=solve.target,
        workload=solve.workload.name,
        prompts=prompts,
        prompt_count=len(contexts),
        context_len=int(statistics.median(contexts)),
        context_lens=contexts,
        mode=solve.setting.mode,
        acceptance=solve.acceptance_model,
        plans=results,
        pick=cast(int, pick.plan_id),
        calibration=calibration.record(),
        lenience=solve.setting.lenience,
        skipped=skipped,
    )


def _calibration(profile: Profile, loader: ModelLoader, plans: list[Plan], context_len: int) -> Calibration:
    """Reference timers for the target and every model the plans run (the n-gram lookup has none)."""
    names = [profile.target] + sorted({n for p in plans for n in p.chain if n != profile.target and not profile.model(n).lookup})
    return Calibration(profile, {name: PassTimer(loader.load(name).model, context_len) for name in names}, context_len)
