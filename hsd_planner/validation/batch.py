"""``hsd-plan validate --batch-sizes``: batch plans run in lockstep, measured against the prediction.

At every batch size b asked for, the plan the solve's schedule names for b (its best chain there,
or autoregressive decoding where speculation stops paying) runs on batches of b held-out prompts
with the batched runtime (at b = 1 the single-sequence runtime, where a plan for one request is
served and its curve c(n) was measured: its n = 1 pass at long contexts takes another attention
kernel than the ragged layout's masked one), beside autoregressive decoding of the same batches
(the baseline of the speed-up) and any fixed chains asked for. Every sequence decodes exactly ``max_new_tokens`` (EOS
does not stop it, as in serving benchmarks), so a batch stays at b from its first round to its
last. Measured per plan and b: ms per token of each sequence (decode wall time over the tokens of
one sequence, median over runs), throughput (tokens per second of the batch) and mean accepted
length; predicted: :func:`~hsd_planner.plan.predict` at the batch size for a generation of
``max_new_tokens`` per sequence, its costs averaged over the prompts' contexts. The plans' results,
their levels and the stored rows are those of :mod:`.runner`. Runs are interleaved across plans so that
the machine's drift hits every plan alike. Stored as a validation whose runs carry their batch size.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hsd_runtime import GenerationResult, Hierarchy, HSDError, ModelLoader, SamplingConfig, build_hierarchy

from ..errors import StoreError
from ..plan import Plan, Prediction, predict
from ..plan.batch import schedule_of
from ..prompts import PromptSet, encode_prompt
from ..store import Engine
from ..store.profiles import load_solve_profile
from ..store.records import SolveRecord
from ..store.schedule import load_batch_plans
from .report import PlanResult
from .runner import level_results, plan_result, store_validation

__all__ = ["BatchValidationReport", "run_batch_validation"]


@dataclass(frozen=True)
class BatchValidationReport:
    """Every plan run at every batch size, and the summary figures."""

    validation_id: int
    solve_id: int
    target: str
    prompts: str
    prompt_count: int
    max_new_tokens: int
    runs: list[PlanResult]  # by batch size, the schedule's plan first

    @property
    def median_abs_error(self) -> float:
        """The median |error| over every plan and batch size run."""
        return statistics.median(abs(r.error) for r in self.runs)

    @property
    def median_abs_speedup_error(self) -> float | None:
        """Over the speculative plans run (autoregressive decoding's speed-up is 1 by definition)."""
        errors = [abs(r.speedup_error) for r in self.runs if r.plan.depth]
        return statistics.median(errors) if errors else None

    @property
    def summary(self) -> dict:
        """The summary figures, as printed and as stored with the validation."""
        return {"median_abs_error": self.median_abs_error, "median_abs_speedup_error": self.median_abs_speedup_error}

    def to_dict(self) -> dict:
        """What ``validate --batch-sizes --json`` prints."""
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__ if k != "runs"},
            **self.summary,
            "runs": [r.to_dict() for r in self.runs],
        }


# the prediction of a plan chosen to run, before it is predicted (plans to run compare by chain and widths)
_UNKNOWN = Prediction(0.0, 0.0, 0.0)


def _batches(encoded: list[list[int]], b: int, repeats: int) -> list[list[list[int]]]:
    """Batches of ``b`` prompts covering every prompt ``repeats`` times, cycling through them in order."""
    count = repeats * -(-len(encoded) // b)
    return [[encoded[(k * b + i) % len(encoded)] for i in range(b)] for k in range(count)]


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

    # per batch size, (kind, chain) to run: a chain once, under its first kind
    plans: dict[int, dict[Plan, str]] = {}
    for b in sorted(set(batch_sizes)):
        pick = next(r.plan for r in schedule if r.min_batch <= b <= r.max_batch)
        kinds = [("schedule", pick.chain, pick.widths), ("autoregressive", (target,), ())] + [
            ("fixed", tuple(c), tuple(w)) for c, w in fixed
        ]
        plans[b] = {}
        for kind, chain, widths in kinds:
            plans[b].setdefault(Plan(chain, widths, _UNKNOWN), kind)
    tokenizer = loader.load(target).tokenizer
    encoded = [encode_prompt(tokenizer, p) for p in prompts.prompts]
    contexts = [len(ids) + max_new_tokens // 2 for ids in encoded]
    # predicted before anything runs: a batch size the profile cannot price is refused up front
    # (costs averaged over the prompts' contexts)
    predicted = {
        b: {plan: predict(profile, plan.chain, plan.widths, solve.acceptance_model, contexts, max_new_tokens, b) for plan in group}
        for b, group in plans.items()
    }
    built = {plan: _build(plan, loader) for group in plans.values() for plan in group}
    for runner in built.values():  # warm-up, untimed
        _generate(runner, encoded[:1], 4, sampling)

    results: list[PlanResult] = []
    for b, group in plans.items():
        measured: dict[Plan, list[GenerationResult]] = {plan: [] for plan in group}
        for k, batch in enumerate(_batches(encoded, b, repeats)):
            seeded = sampling.model_copy(update={"seed": 1000 * b + k})
            for plan in group:  # interleaved
                measured[plan].append(_generate(built[plan], batch, max_new_tokens, seeded))
                step(1)
        auto = Plan((target,), (), _UNKNOWN)
        for plan, kind in group.items():
            levels = level_results(profile, plan, measured[plan], solve.acceptance_model, b)
            pair = (predicted[b][plan], predicted[b][auto]), (measured[plan], measured[auto])
            results.append(plan_result(None, kind, plan, *pair, levels, batch_size=b))
    report = BatchValidationReport(0, solve.id, target, prompts.name, len(encoded), max_new_tokens, results)
    return replace(report, validation_id=store_validation(engine, solve, prompts, max_new_tokens, repeats, results, **report.summary))


def _build(plan: Plan, loader: ModelLoader) -> Hierarchy:
    """``plan``'s hierarchy (a batch of one decodes on the torch engine's single-row cache, where a
    plan for one request is served and its curve c(n) was measured)."""
    try:
        return build_hierarchy(plan.chain, plan.widths, loader)[0]
    except HSDError as exc:
        raise StoreError(f"{plan.label} cannot be run: {exc}") from None


def _generate(runner: Hierarchy, batch: list[list[int]], max_new_tokens: int, sampling: SamplingConfig) -> GenerationResult:
    """One batch decoded; every sequence decodes ``max_new_tokens``, so a batch stays at b to its last round."""
    return runner.generate_batch(batch, max_new_tokens, sampling, stop_at_eos=False)
