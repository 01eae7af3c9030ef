"""``hsd-plan validate --batch-sizes``: batch plans run in lockstep, measured against the prediction.

At every batch size b asked for, the plan the solve's schedule names for b (its best chain there,
or autoregressive decoding where speculation stops paying) runs on batches of b held-out prompts
with the batched runtime (at b = 1 the single-sequence runtime, where a plan for one request is
served and its curve c(n) was measured: its n = 1 pass at long contexts takes another attention
kernel than the ragged layout's masked one), beside autoregressive decoding of the same batches (the baseline of the
speed-up) and any fixed chains asked for. Every sequence decodes exactly ``max_new_tokens`` (EOS
does not stop it, as in serving benchmarks), so a batch stays at b from its first round to its
last. Measured per plan and b: ms per token of each sequence (decode wall time over the tokens of
one sequence, median over runs), throughput (tokens per second of the batch) and mean accepted
length; predicted: :func:`~hsd_planner.plan.batch.predict_batch` for a generation of
``max_new_tokens`` per sequence at the prompts' contexts. Runs are interleaved across plans so that
the machine's drift hits every plan alike. Stored as a validation whose runs carry their batch size.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from hsd_runtime import BatchedHierarchy, BatchResult, Hierarchy, HSDError, ModelLoader, SamplingConfig, build_batched, build_hierarchy

from ..errors import StoreError
from ..plan import format_chain
from ..plan.batch import predict_batch, schedule_of
from ..prompts import PromptSet, encode_prompt
from ..store import Engine
from ..store.profiles import load_solve_profile
from ..store.records import SolveRecord
from ..store.schedule import load_batch_plans
from ..store.validations import ValidationEntry, ValidationRunEntry, save_validation

__all__ = ["BatchRun", "BatchValidationReport", "run_batch_validation"]


@dataclass(frozen=True)
class BatchRun:
    """One plan at one batch size over all its runs: the prediction and the measurement."""

    batch_size: int
    kind: str  # "schedule" (the solve's plan for this batch size), "autoregressive" or "fixed"
    chain: list[str]
    widths: list[int]
    predicted_ms_per_token: float
    measured_ms_per_token: float
    predicted_speedup: float  # over the autoregressive prediction at the same batch size
    measured_speedup: float  # over autoregressive decoding measured on the same batches
    predicted_mean_accepted_length: float
    measured_mean_accepted_length: float
    tokens: int
    prefill_ms: float  # median over runs: the whole batch's prompts in one padded pass
    levels: list[dict]  # per level: model, forward_passes, proposed, accepted, time_s

    @property
    def label(self) -> str:
        return format_chain(self.chain, self.widths)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured ms per token."""
        return (self.predicted_ms_per_token - self.measured_ms_per_token) / self.measured_ms_per_token

    @property
    def speedup_error(self) -> float:
        """Predicted over measured speed-up, minus one."""
        return self.predicted_speedup / self.measured_speedup - 1.0

    @property
    def predicted_tokens_per_s(self) -> float:
        return 1000.0 * self.batch_size / self.predicted_ms_per_token

    @property
    def measured_tokens_per_s(self) -> float:
        return 1000.0 * self.batch_size / self.measured_ms_per_token

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "error": self.error,
            "speedup_error": self.speedup_error,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "measured_tokens_per_s": self.measured_tokens_per_s,
        }


@dataclass(frozen=True)
class BatchValidationReport:
    """Every plan run at every batch size, and the summary figures."""

    validation_id: int
    solve_id: int
    target: str
    prompts: str
    prompt_count: int
    max_new_tokens: int
    runs: list[BatchRun]  # by batch size, the schedule's plan first

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(r.error) for r in self.runs)

    @property
    def median_abs_speedup_error(self) -> float | None:
        """Over the speculative plans run (autoregressive decoding's speed-up is 1 by definition)."""
        errors = [abs(r.speedup_error) for r in self.runs if r.widths]
        return statistics.median(errors) if errors else None

    def to_dict(self) -> dict:
        return {
            "validation_id": self.validation_id,
            "solve_id": self.solve_id,
            "target": self.target,
            "prompts": self.prompts,
            "prompt_count": self.prompt_count,
            "max_new_tokens": self.max_new_tokens,
            "median_abs_error": self.median_abs_error,
            "median_abs_speedup_error": self.median_abs_speedup_error,
            "runs": [r.to_dict() for r in self.runs],
        }


def _batches(encoded: list[list[int]], b: int, repeats: int) -> list[list[list[int]]]:
    """Batches of ``b`` prompts covering every prompt ``repeats`` times, cycling through them in order."""
    count = repeats * -(-len(encoded) // b)
    return [[encoded[(k * b + i) % len(encoded)] for i in range(b)] for k in range(count)]


def _alone(hierarchy: Hierarchy, prompt: list[int], max_new_tokens: int, sampling: SamplingConfig) -> BatchResult:
    """One sequence on the single-sequence runtime, as a batch of one: at batch size 1 a plan is
    served (and its plain curve c(n) was measured) there, not in the ragged layout."""
    r = hierarchy.generate(prompt, max_new_tokens, sampling)
    return BatchResult([r.tokens], [r.prompt_tokens], r.levels, r.prefill_s, r.decode_s, r.target_rounds, [r.committed_per_round])


def _levels(results: list[BatchResult]) -> list[dict]:
    out = []
    for k, level in enumerate(results[0].levels):
        stats = [r.levels[k] for r in results]
        out.append(
            {
                "model": level.model,
                **{key: sum(getattr(x, key) for x in stats) for key in ("forward_passes", "proposed", "accepted", "time_s")},
            }
        )
    return out


def run_batch_validation(
    engine: Engine,
    loader: ModelLoader,
    solve: SolveRecord,
    batch_sizes: Sequence[int],
    prompts: PromptSet,
    max_new_tokens: int,
    repeats: int,
    fixed: Sequence[tuple[Sequence[str], Sequence[int]]] = (),
    progress: Callable[[int], None] | None = None,
) -> BatchValidationReport:
    """Run the solve's schedule (and ``fixed`` chains) at every batch size, store the validation,
    return a report. The solve must have been solved with ``--batch-sizes``."""
    step = progress or (lambda _n: None)
    entries = load_batch_plans(engine, solve.id)
    if not entries:
        raise StoreError(f"solve {solve.id} has no batch plans; run hsd-plan solve --batch-sizes 1,2,4,8 first")
    schedule = schedule_of([(e.batch_size, e.plan) for e in entries])
    beyond = [b for b in batch_sizes if not schedule[0].min_batch <= b <= schedule[-1].max_batch]
    if beyond:
        raise StoreError(
            f"batch size {beyond[0]} is outside the schedule of solve {solve.id} ({schedule[0].min_batch}..{schedule[-1].max_batch}); "
            "solve with --batch-sizes covering it"
        )
    setting, target = solve.setting, solve.target
    loader = loader.with_kernels(solve.hardware.kernels or "plain")  # the kernels its latencies were measured with
    profile, _ = load_solve_profile(engine, solve.id)
    sampling = SamplingConfig(mode=setting.mode, temperature=setting.temperature, top_p=setting.top_p, lenience=setting.lenience)
    acceptance = solve.acceptance_model

    plans: dict[int, list[tuple[str, tuple[str, ...], tuple[int, ...]]]] = {}
    for b in sorted(set(batch_sizes)):
        pick = next(r.plan for r in schedule if r.min_batch <= b <= r.max_batch)
        kinds = [("schedule", pick.chain, tuple(w for w in pick.widths if isinstance(w, int))), ("autoregressive", (target,), ())]
        kinds += [("fixed", tuple(c), tuple(w)) for c, w in fixed]
        plans[b] = []
        for run in kinds:  # a chain once per batch size, under its first kind
            if all((run[1], run[2]) != (p[1], p[2]) for p in plans[b]):
                plans[b].append(run)
    built: dict[tuple, BatchedHierarchy] = {}
    alone: dict[tuple, Hierarchy] = {}
    for b, group in plans.items():
        for _, chain, widths in group:
            try:
                if b > 1 and (chain, widths) not in built:
                    built[(chain, widths)] = build_batched(list(chain), list(widths), loader)[0]
                if b == 1 and (chain, widths) not in alone:
                    alone[(chain, widths)] = build_hierarchy(list(chain), list(widths), loader)[0]
                    alone[(chain, widths)].eos_token_ids = frozenset()  # every sequence decodes max_new_tokens, as the batches do
            except HSDError as exc:
                raise StoreError(f"{format_chain(chain, widths)} cannot be run: {exc}") from None
    tokenizer = loader.load(target).tokenizer
    encoded = [encode_prompt(tokenizer, p) for p in prompts.prompts]
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    for h in built.values():  # warm-up, untimed
        h.generate(encoded[:1], 4, sampling)
    for one in alone.values():
        one.generate(encoded[0], 4, sampling)

    results: list[BatchRun] = []
    for b, group in plans.items():
        measured: dict[tuple, list[BatchResult]] = {(c, w): [] for _, c, w in group}
        for k, batch in enumerate(_batches(encoded, b, repeats)):
            for _, chain, widths in group:  # interleaved
                seeded = sampling.model_copy(update={"seed": 1000 * b + k})
                if b == 1:
                    measured[(chain, widths)].append(_alone(alone[(chain, widths)], batch[0], max_new_tokens, seeded))
                else:
                    measured[(chain, widths)].append(built[(chain, widths)].generate(batch, max_new_tokens, seeded, stop_at_eos=False))
                step(1)
        ms = {key: statistics.median(r.ms_per_token for r in done) for key, done in measured.items()}
        predicted = {
            (c, w): predict_batch(profile, c, w, b, acceptance, contexts, max_new_tokens) for _, c, w in group
        }  # costs averaged over the prompts' contexts
        auto = ((target,), ())
        for kind, chain, widths in group:
            key = (chain, widths)
            done = measured[key]
            rounds = sum(sum(len(c) for c in r.committed) for r in done)
            results.append(
                BatchRun(
                    batch_size=b,
                    kind=kind,
                    chain=list(chain),
                    widths=list(widths),
                    predicted_ms_per_token=predicted[key].ms_per_token,
                    measured_ms_per_token=ms[key],
                    predicted_speedup=predicted[auto].ms_per_token / predicted[key].ms_per_token,
                    measured_speedup=ms[auto] / ms[key],
                    predicted_mean_accepted_length=predicted[key].mean_accepted_length,
                    measured_mean_accepted_length=sum(sum(len(t) for t in r.tokens) for r in done) / rounds,
                    tokens=sum(sum(len(t) for t in r.tokens) for r in done),
                    prefill_ms=statistics.median(1000.0 * r.prefill_s for r in done),
                    levels=_levels(done),
                )
            )
    report = BatchValidationReport(0, solve.id, target, prompts.name, len(encoded), max_new_tokens, results)
    return replace(report, validation_id=_store(engine, solve, prompts, max_new_tokens, repeats, report))


def _store(engine: Engine, solve: SolveRecord, prompts: PromptSet, max_new_tokens: int, repeats: int, report: BatchValidationReport) -> int:
    entry = ValidationEntry(
        solve_id=solve.id,
        prompts_name=prompts.name,
        prompts=len(prompts.prompts),
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        median_abs_error=report.median_abs_error,
        regret=None,
        median_abs_speedup_error=report.median_abs_speedup_error,
        median_abs_error_calibrated=None,
        median_abs_speedup_error_calibrated=None,
        calibration=None,
    )
    runs = [
        ValidationRunEntry(
            plan_id=None,
            chain=r.chain,
            widths=list(r.widths),
            predicted_ms_per_token=r.predicted_ms_per_token,
            calibrated_ms_per_token=None,
            measured_ms_per_token=r.measured_ms_per_token,
            error=r.error,
            measured_speedup=r.measured_speedup,
            predicted_mean_accepted_length=r.predicted_mean_accepted_length,
            measured_mean_accepted_length=r.measured_mean_accepted_length,
            prefill_ms=r.prefill_ms,
            tokens=r.tokens,
            levels=r.levels,
            batch_size=r.batch_size,
        )
        for r in report.runs
    ]
    return save_validation(engine, entry, runs)
