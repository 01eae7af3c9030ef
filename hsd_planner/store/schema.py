"""The profiling database's tables (SQLAlchemy 2.0 typed ORM).

Natural keys (spec strings, fingerprints, content hashes) are unique, so an export from one
machine imports into another without duplicates. Changing a table needs a new Alembic revision
in ``migrations/versions``; a test checks that the ORM and the migrated schema agree.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, MetaData, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Acceptance",
    "AcceptancePrompt",
    "Base",
    "Continuation",
    "Hardware",
    "Latency",
    "ModelRow",
    "PlanRow",
    "Setting",
    "Solve",
    "Validation",
    "ValidationRun",
    "Workload",
]

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# what a server enforces (revision 0013): 64-bit parameter counts, names of 500 characters;
# SQLite's columns keep their first declaration, which it never enforced
BigCount = BigInteger().with_variant(Integer(), "sqlite")
LongName = String(500).with_variant(String(200), "sqlite")


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Hardware(Base):
    """Where latencies were measured: device, its name, threads, torch version and kernels."""

    __tablename__ = "hardware"
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(32), unique=True)
    device: Mapped[str] = mapped_column(String(16))
    device_name: Mapped[str] = mapped_column(String(200))
    threads: Mapped[int] = mapped_column(Integer)
    torch_version: Mapped[str] = mapped_column(String(40))
    capability: Mapped[str | None] = mapped_column(String(40))  # AMX, AVX512-BF16, AVX2, ... or CUDA
    # "prepacked", "plain", "llamacpp-VERSION" or the static engine's "static-..." (None: older rows, plain)
    kernels: Mapped[str | None] = mapped_column(String(64))
    # the last floor probe (hsd_planner.profiling.floor): medians, and p90/p10 spreads
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    bandwidth_spread: Mapped[float | None] = mapped_column(Float)
    peak_gflops: Mapped[dict | None] = mapped_column(JSON)  # dtype -> GFLOP/s
    peak_spread: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ModelRow(Base):
    """A model spec (``ngram`` included) and what loading it revealed."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(primary_key=True)
    spec: Mapped[str] = mapped_column(String(500), unique=True)
    parameters: Mapped[int] = mapped_column(BigCount)  # 0 for ngram
    layers: Mapped[int | None] = mapped_column(Integer)
    vocab_size: Mapped[int | None] = mapped_column(Integer)
    tokenizer_fingerprint: Mapped[str | None] = mapped_column(String(32))
    source_fingerprint: Mapped[str | None] = mapped_column(String(64))  # config + weight files, for a path spec
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Workload(Base):
    """A prompt set, identified by the hash of its prompts."""

    __tablename__ = "workloads"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(LongName)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    count: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[list | None] = mapped_column(JSON)  # token length of each prompt, chat template applied
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Setting(Base):
    """How acceptance was measured: decoding mode and warping, dtype, continuation length."""

    __tablename__ = "settings"
    __table_args__ = (UniqueConstraint("mode", "temperature", "top_p", "dtype", "max_new_tokens", "lenience", name="uq_settings_key"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    mode: Mapped[str] = mapped_column(String(8))
    temperature: Mapped[float] = mapped_column(Float)
    top_p: Mapped[float] = mapped_column(Float)  # 1.0 = off
    dtype: Mapped[str] = mapped_column(String(8))
    max_new_tokens: Mapped[int] = mapped_column(Integer)
    # e of lossy verification (accept x with probability min(1, p(x) / (e q(x)))); 1.0 = the exact rule
    lenience: Mapped[float] = mapped_column(Float, server_default="1.0")


class Latency(Base):
    """Median wall time of one cached forward pass of ``n_tokens`` after ``context_len`` tokens,
    for each of ``batch_size`` sequences at once (1: a pass over one sequence).

    ``n_tokens`` = 0 is no pass: a steered model's projection of its verifier's taps into its
    steering vectors, which it runs once per proposal beside its passes."""

    __tablename__ = "latency"
    __table_args__ = (UniqueConstraint("model_id", "hardware_id", "dtype", "n_tokens", "context_len", "batch_size"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id", ondelete="CASCADE"), index=True)
    dtype: Mapped[str] = mapped_column(String(8))
    n_tokens: Mapped[int] = mapped_column(Integer)
    context_len: Mapped[int] = mapped_column(Integer)
    median_ms: Mapped[float] = mapped_column(Float)
    p10_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    samples_ms: Mapped[list | None] = mapped_column(JSON)  # every sample, in the order taken (interleaved rounds)
    floor_ms: Mapped[float | None] = mapped_column(Float)  # the machine's floor for this pass (profiling.floor)
    batch_size: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # the decoding loop's host work per pass of this model beside the pass (bookkeeping, drafting,
    # verification), measured on the profile's own generations; one value on every row of the curve
    host_ms: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class _PairKey:
    """The key columns of an acceptance measurement: which pair, on what, measured how."""

    drafter_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    verifier_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    setting_id: Mapped[int] = mapped_column(ForeignKey("settings.id", ondelete="CASCADE"), index=True)


class Continuation(Base):
    """A verifier's own continuation of one prompt: the text drafters are teacher-forced over."""

    __tablename__ = "continuations"
    __table_args__ = (UniqueConstraint("verifier_id", "workload_id", "setting_id", "prompt_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    verifier_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    setting_id: Mapped[int] = mapped_column(ForeignKey("settings.id", ondelete="CASCADE"), index=True)
    prompt_index: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[list[int]] = mapped_column(JSON)


class AcceptancePrompt(_PairKey, Base):
    """Acceptance of one drafter by one verifier on one prompt: sums that aggregate exactly.

    ``run_sum[g]`` adds, over start positions t with g positions after them, the probability that
    the g tokens from t are all accepted; ``run_count[g]`` counts those start positions.
    ``visit_sum[b - 1][g]`` and ``visit_count[b - 1]`` are the same weighted by how often a
    decoder drafting b tokens a round starts a round at t, and ``visit_base[b - 1][g]`` the
    weighted probability of the g - 1 tokens before, over the starts that see g positions (see
    :func:`hsd_planner.profiling.acceptance.visited_run_sums`; None in rows measured before a
    start near the continuation's end counted). ``visit_drafted[b - 1][l]`` adds the same weights over
    the visited rounds whose proposal held at least l tokens (a lookup drafter's, or a model's that
    stops on its confidence, ``pmin=``: either may propose fewer than b; None for a model drafter
    that always proposes b).
    ``siblings_sum[k - 1]`` adds a_t(k), the probability that one of k siblings drafted at t is
    accepted, over ``siblings_count`` positions (:mod:`hsd_planner.profiling.siblings`; None for the
    n-gram drafter, which drafts chains only, and for rows measured before siblings were).
    """

    __tablename__ = "acceptance_prompts"
    __table_args__ = (UniqueConstraint("drafter_id", "verifier_id", "workload_id", "setting_id", "prompt_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    prompt_index: Mapped[int] = mapped_column(Integer)
    positions: Mapped[int] = mapped_column(Integer)
    alpha_sum: Mapped[float] = mapped_column(Float)
    run_sum: Mapped[list[float]] = mapped_column(JSON)
    run_count: Mapped[list[int]] = mapped_column(JSON)
    visit_sum: Mapped[list[list[float]] | None] = mapped_column(JSON, nullable=True)
    visit_count: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    visit_base: Mapped[list[list[float]] | None] = mapped_column(JSON, nullable=True)
    visit_drafted: Mapped[list[list[float]] | None] = mapped_column(JSON, nullable=True)
    siblings_sum: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    siblings_count: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Acceptance(_PairKey, Base):
    """Acceptance of a drafter by a verifier over a whole workload.

    ``alpha`` is the mean per-position acceptance; ``run_lengths[g]`` is P(G >= g), the
    probability that g consecutive drafted tokens are accepted (g = 0..64, ``run_lengths[0] = 1``),
    averaged over every start position; ``visited[b - 1][g]`` is P(G >= g), g = 0..b, over the
    starts a decoder drafting b tokens a round visits (None where no start had room for b);
    ``drafted[b - 1][l]`` is P(L >= l), l = 0..b, for the proposal length L of a lookup drafter or
    a ``pmin=`` model over the same rounds (None: a model drafter that always proposes b, or rows
    measured before);
    ``siblings[k - 1]`` is A(k), P(one of k siblings drawn without replacement is accepted), k = 1..8
    (None: the n-gram drafter, or some prompt measured before siblings were).
    """

    __tablename__ = "acceptance"
    __table_args__ = (UniqueConstraint("drafter_id", "verifier_id", "workload_id", "setting_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    alpha: Mapped[float] = mapped_column(Float)
    positions: Mapped[int] = mapped_column(Integer)
    prompts: Mapped[int] = mapped_column(Integer)
    run_lengths: Mapped[list[float]] = mapped_column(JSON)
    visited: Mapped[list[list[float] | None] | None] = mapped_column(JSON, nullable=True)
    drafted: Mapped[list[list[float] | None] | None] = mapped_column(JSON, nullable=True)
    siblings: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Solve(Base):
    """One ``hsd-plan solve``: what it was asked, on which profile."""

    __tablename__ = "solves"
    id: Mapped[int] = mapped_column(primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    setting_id: Mapped[int] = mapped_column(ForeignKey("settings.id", ondelete="CASCADE"), index=True)
    hardware_id: Mapped[int] = mapped_column(ForeignKey("hardware.id", ondelete="CASCADE"), index=True)
    acceptance_model: Mapped[str] = mapped_column(String(16))
    t_max: Mapped[int] = mapped_column(Integer)
    max_depth: Mapped[int | None] = mapped_column(Integer)
    context_len: Mapped[int] = mapped_column(Integer)
    max_new_tokens: Mapped[int | None] = mapped_column(Integer)  # the generation length plans were ranked for; None: steady state
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class PlanRow(Base):
    """One hierarchy a solve reported, with its prediction per sequence at ``batch_size`` sequences
    decoded in lockstep.

    ``kind`` is best, top, single or autoregressive for the solve's ranked plans (batch size 1, in
    ``rank`` order), or schedule for its best chain at one batch size (``hsd-plan solve
    --batch-sizes``; rank 0, one per batch size: the solve's rows of this kind, by batch size,
    make the schedule a server switches plans by).
    """

    __tablename__ = "plans"
    id: Mapped[int] = mapped_column(primary_key=True)
    solve_id: Mapped[int] = mapped_column(ForeignKey("solves.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    chain: Mapped[list[str]] = mapped_column(JSON)
    widths: Mapped[list[int]] = mapped_column(JSON)  # a schedule's empty: autoregressive decoding (no speculation at its batch size)
    predicted_ms_per_token: Mapped[float] = mapped_column(Float)
    predicted_mean_accepted_length: Mapped[float] = mapped_column(Float)
    predicted_speedup: Mapped[float] = mapped_column(Float)  # over autoregressive decoding of the same batch
    speedup_lo: Mapped[float | None] = mapped_column(Float)  # bootstrap interval over prompts (5th, 95th percentile)
    speedup_hi: Mapped[float | None] = mapped_column(Float)
    tied: Mapped[bool | None] = mapped_column(Boolean)  # its interval overlaps the pick's
    batch_size: Mapped[int] = mapped_column(Integer, default=1, server_default="1")


class Validation(Base):
    """One ``hsd-plan validate``: plans of a solve run on held-out prompts."""

    __tablename__ = "validations"
    id: Mapped[int] = mapped_column(primary_key=True)
    solve_id: Mapped[int] = mapped_column(ForeignKey("solves.id", ondelete="CASCADE"), index=True)
    prompts_name: Mapped[str] = mapped_column(LongName)
    prompts: Mapped[int] = mapped_column(Integer)
    max_new_tokens: Mapped[int] = mapped_column(Integer)
    repeats: Mapped[int] = mapped_column(Integer)
    median_abs_error: Mapped[float | None] = mapped_column(Float)
    regret: Mapped[float | None] = mapped_column(Float)
    median_abs_speedup_error: Mapped[float | None] = mapped_column(Float)
    median_abs_error_calibrated: Mapped[float | None] = mapped_column(Float)
    median_abs_speedup_error_calibrated: Mapped[float | None] = mapped_column(Float)
    calibration: Mapped[dict | None] = mapped_column(JSON)  # per model: profiled reference ms and the samples measured
    coverage: Mapped[float | None] = mapped_column(Float)  # share of plans whose measured speed-up fell in the predicted interval
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ValidationRun(Base):
    """One plan's measured against predicted latency in a validation; ``levels`` per level."""

    __tablename__ = "validation_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    validation_id: Mapped[int] = mapped_column(ForeignKey("validations.id", ondelete="CASCADE"), index=True)
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"), index=True)
    chain: Mapped[list[str]] = mapped_column(JSON)
    widths: Mapped[list[int]] = mapped_column(JSON)
    predicted_ms_per_token: Mapped[float] = mapped_column(Float)
    calibrated_ms_per_token: Mapped[float | None] = mapped_column(Float)  # from the profile scaled by the measured drift
    measured_ms_per_token: Mapped[float] = mapped_column(Float)
    error: Mapped[float] = mapped_column(Float)
    measured_speedup: Mapped[float] = mapped_column(Float)
    predicted_mean_accepted_length: Mapped[float] = mapped_column(Float)
    measured_mean_accepted_length: Mapped[float] = mapped_column(Float)
    prefill_ms: Mapped[float] = mapped_column(Float)
    tokens: Mapped[int] = mapped_column(Integer)
    levels: Mapped[list[dict]] = mapped_column(JSON)
    batch_size: Mapped[int] = mapped_column(Integer, default=1, server_default="1")  # sequences decoded in lockstep
    predicted_speedup: Mapped[float | None] = mapped_column(Float)  # over autoregressive decoding's prediction
    predicted_speedup_lo: Mapped[float | None] = mapped_column(Float)  # the 90% interval of the predicted speed-up
    predicted_speedup_hi: Mapped[float | None] = mapped_column(Float)
    # the bootstrap's own interval before past validations widened it: the unit of this plan's miss
    bootstrap_speedup_lo: Mapped[float | None] = mapped_column(Float)
    bootstrap_speedup_hi: Mapped[float | None] = mapped_column(Float)
    covered: Mapped[bool | None] = mapped_column(Boolean)  # the measured speed-up fell inside it
    same_text: Mapped[int | None] = mapped_column(Integer)  # greedy: sequences whose tokens equal the autoregressive run's
    text_runs: Mapped[int | None] = mapped_column(Integer)  # the sequences compared
