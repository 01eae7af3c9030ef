"""What the store hands out and takes in: rows as typed, frozen records, keyed by database ids.

No ORM row and no session leaves the store. A profiling run, a solve and a validation exchange
these records with the database through the store's named functions, so every SQL statement of
hsd-plan stays in this package.
"""

from __future__ import annotations

from dataclasses import dataclass

from hsd_runtime.terms.choices import Mode

from ..choices import AcceptanceModel, PlanKind
from ..plan import Plan

__all__ = [
    "ContinuationKey",
    "HardwareRecord",
    "LatencyKey",
    "LatencyPoint",
    "ModelFacts",
    "PairAcceptanceRecord",
    "PromptAcceptance",
    "PromptPairKey",
    "RankedPlan",
    "Ranking",
    "RunKeys",
    "SettingRecord",
    "SolveRecord",
    "WorkloadRecord",
]


@dataclass(frozen=True)
class HardwareRecord:
    """A machine latencies were measured on, with its last floor probe (None before one)."""

    fingerprint: str
    device: str
    device_name: str
    capability: str | None
    threads: int
    torch_version: str
    kernels: str | None  # "prepacked" or "plain" (None: rows stored before kernels were recorded)
    bandwidth_gbs: float | None = None
    peak_gflops: dict[str, float] | None = None


@dataclass(frozen=True)
class WorkloadRecord:
    """A prompt set as profiled: its name, the hash of its prompts and how many there are."""

    name: str
    content_hash: str
    count: int


@dataclass(frozen=True)
class SettingRecord:
    """How acceptance is measured: decoding mode and warping, dtype, continuation length."""

    mode: Mode
    temperature: float
    top_p: float
    dtype: str
    max_new_tokens: int
    lenience: float = 1.0  # below 1: lossy verification (hsd_runtime.decoding.verify); 1 is the exact rule


@dataclass(frozen=True)
class RunKeys:
    """The rows one profiling run measures under: its machine, workload and setting."""

    hardware_id: int
    workload_id: int
    setting_id: int


@dataclass(frozen=True)
class ModelFacts:
    """What loading a model revealed (an n-gram drafter has none)."""

    parameters: int
    layers: int | None
    vocab_size: int | None
    tokenizer_fingerprint: str | None


@dataclass(frozen=True)
class LatencyKey:
    """One latency point: a model on a machine in a dtype, a pass of ``n_tokens`` after ``context_len``
    for each of ``batch_size`` sequences at once (1: the plain curve c(n); more: c(n, b))."""

    model_id: int
    hardware_id: int
    dtype: str
    n_tokens: int
    context_len: int
    batch_size: int = 1


@dataclass(frozen=True)
class LatencyPoint:
    """A stored latency point: its median over ``samples_ms`` and the machine's floor for that pass."""

    n_tokens: int
    context_len: int
    median_ms: float
    floor_ms: float | None = None
    samples_ms: tuple[float, ...] = ()  # every sample in the order taken; older rows repeat their median
    p10_ms: float | None = None
    p90_ms: float | None = None


@dataclass(frozen=True)
class PromptPairKey:
    """The acceptance of one drafter by one verifier on one prompt of a workload, in one setting."""

    drafter_id: int
    verifier_id: int
    workload_id: int
    setting_id: int
    prompt_index: int


@dataclass(frozen=True)
class ContinuationKey:
    """A verifier's continuation of one prompt of a workload, in one setting."""

    verifier_id: int
    workload_id: int
    setting_id: int
    prompt_index: int


@dataclass(frozen=True)
class PromptAcceptance:
    """The sums behind one prompt's acceptance, which pool exactly over prompts
    (see :class:`hsd_planner.store.schema.AcceptancePrompt` for what each holds)."""

    positions: int
    alpha_sum: float
    run_sum: list[float]
    run_count: list[int]
    visit_sum: list[list[float]] | None = None
    visit_count: list[float] | None = None
    siblings_sum: list[float] | None = None
    siblings_count: int | None = None
    visit_base: list[list[float]] | None = None  # None: measured before censored starts counted
    visit_drafted: list[list[float]] | None = None  # proposal lengths (lookup, pmin=); None: drafts b always, or older


@dataclass(frozen=True)
class PairAcceptanceRecord:
    """The acceptance of a pair pooled over a workload's prompts."""

    drafter_id: int
    verifier_id: int
    alpha: float
    positions: int
    prompts: int
    run_lengths: list[float]
    siblings: list[float] | None = None


@dataclass(frozen=True)
class SolveRecord:
    """A stored solve: what it was asked and the rows of the profile it read."""

    id: int
    target: str
    workload: WorkloadRecord
    workload_id: int
    setting_id: int
    hardware_id: int
    acceptance_model: AcceptanceModel
    t_max: int
    max_depth: int | None
    context_len: int
    max_new_tokens: int | None  # the generation length its plans were ranked for; None: the steady state
    setting: SettingRecord
    hardware: HardwareRecord

    @property
    def temperature(self) -> float | None:
        """The sampling temperature acceptance was measured at (None for greedy decoding)."""
        return self.setting.temperature if self.setting.mode == "sample" else None


# a plan as a solve ranks it before the store numbers it: the plan, its kind, its 90% interval of
# predicted speed-up (None: no bootstrap) and whether that overlaps the pick's
Ranking = tuple[Plan, PlanKind, tuple[float, float] | None, bool | None]


@dataclass(frozen=True)
class RankedPlan:
    """A plan as a solve ranked and stored it: its id, its role, the plan, how sure it is and the
    batch size it was solved for."""

    id: int
    solve_id: int
    kind: PlanKind
    plan: Plan  # the first width may be a draft tree
    speedup_interval: tuple[float, float] | None = None  # 5th-95th percentile over bootstrap resamples of the prompts
    tied: bool | None = None  # the interval overlaps the pick's: the profile cannot tell them apart
    batch_size: int = 1  # sequences decoded in lockstep it was solved for (a schedule's plan: its batch size)

    @classmethod
    def of(cls, plan_id: int, solve_id: int, ranking: Ranking) -> RankedPlan:
        """The plan of ``ranking`` as stored under ``plan_id`` in solve ``solve_id``."""
        plan, kind, interval, tied = ranking
        return cls(plan_id, solve_id, kind, plan, interval, tied)

    def to_dict(self) -> dict:
        """The JSON of a plan in ``hsd-plan solve --json`` (the solve's id is the report's)."""
        return {"id": self.id, "kind": self.kind, **self.plan.to_dict(), "speedup_interval": self.speedup_interval, "tied": self.tied}
