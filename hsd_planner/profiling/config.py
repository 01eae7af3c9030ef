"""What a profiling run is asked to do, what it measures and what it reports having done.

:class:`ProfileConfig` (every default of ``hsd-plan profile``), each :class:`ProfiledModel` it
measures, and the :class:`ProfileOutcome` it returns. Shared by the run (:mod:`.runner`), its
latency sweep (:mod:`.sweep`) and the continuations it drafts (:mod:`.continuations`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hsd_runtime import LoadedModel, ModelSpec
from hsd_runtime.terms.choices import Dtype, Mode
from hsd_runtime.terms.kinds import DrafterKind, kind_of
from hsd_runtime.terms.limits import MAX_BATCH, MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE

from ..limits import MAX_LENGTH, MAX_NAME_CHARS, MAX_REPEATS
from ..store.records import ModelFacts, RunKeys

if TYPE_CHECKING:
    from hsd_runtime.learned.bpd import BpdDrafter

__all__ = ["ProfileConfig", "ProfileOutcome", "ProfiledModel"]


class ProfileConfig(BaseModel):
    """What to profile and how; every default lives here."""

    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(min_length=1)
    mode: Mode = "greedy"
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE)
    top_p: float = Field(1.0, gt=0, le=1)
    lenience: float = Field(1.0, gt=0, le=1)  # below 1: acceptance under lossy verification (hsd_runtime.decoding.verify)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    dtype: Dtype = "fp32"
    max_new_tokens: int = Field(64, ge=1, le=MAX_LENGTH)
    latency_grid: list[Annotated[int, Field(ge=1, le=MAX_LENGTH)]] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64], min_length=1)
    # None: workload_context_lens of the prompts
    context_lens: list[Annotated[int, Field(ge=1, le=MAX_LENGTH)]] | None = Field(None, min_length=1)
    repeats: int = Field(5, ge=1, le=MAX_REPEATS)  # samples per latency point, one per interleaved round
    # sequences per pass: 1 is the plain curve, each b > 1 a curve c(n, b) for batch plans (profiling.sweep)
    batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH)]] = Field(default_factory=lambda: [1], min_length=1)
    acceptance: bool = True
    force: bool = False
    allow_busy: bool = False  # keep latency samples taken while other work contended for the cores (profiling.guard)

    @field_validator("models")
    @classmethod
    def _storable(cls, models: list[str]) -> list[str]:
        """Each spec as it is stored (a path made absolute, the engine appended) fits the database's
        column, and so the export every profile can be shown and moved as."""
        for spec in models:
            if len(spec) > MAX_NAME_CHARS:
                raise ValueError(
                    f"model spec {spec[:60]}... is {len(spec):,} characters as stored (its absolute path); a profile keeps "
                    f"at most {MAX_NAME_CHARS}: move or link the model to a shorter path"
                )
        return models


@dataclass
class ProfileOutcome:
    """What a profile run did, and the ids to summarize from the database."""

    measured: int = 0
    skipped: int = 0
    noisy: int = 0  # latency points still above SPREAD_LIMIT after their extra rounds
    inverted: int = 0  # neighbouring points where fewer tokens still cost more after measuring again
    remeasured: int = 0  # latency samples dropped from windows where other work contended, and taken again
    kept_busy: int = 0  # latency samples from such windows kept (allow_busy)
    busy_checked: bool = True  # False where the machine does not say what else runs (not Linux)
    hardware_id: int = 0
    workload_id: int = 0
    setting_id: int = 0
    model_ids: dict[str, int] = field(default_factory=dict)  # spec -> id, cheapest first
    # model row id -> the host work per pass of each generation this run made with it (profiling.host)
    host_samples: dict[int, list[float]] = field(default_factory=dict)

    @property
    def keys(self) -> RunKeys:
        """The rows this run measured under."""
        return RunKeys(self.hardware_id, self.workload_id, self.setting_id)


@dataclass
class ProfiledModel:
    """A model a profile measures: its spec, the model loaded (None for a kind without a model of
    its own: ngram and bpd; steered for a ``steer=`` spec), the block-draft drafter of a ``bpd:``
    spec (bound to its host) and its row id."""

    spec: ModelSpec
    loaded: LoadedModel | None  # None where its kind has no model of its own (ngram, bpd)
    row_id: int = 0
    heads: BpdDrafter | None = None
    host: str | None = None  # the one verifier of a bpd candidate (its host) or of a steered one, as listed

    @property
    def kind(self) -> DrafterKind:
        """The kind of drafter its spec names: how it is timed, whom it drafts for, how its
        acceptance is measured (:mod:`hsd_runtime.terms.kinds`)."""
        return kind_of(self.spec)

    @property
    def loaded_model(self) -> LoadedModel:
        """The model loaded for it; only a kind with a model of its own has one."""
        if self.loaded is None:
            raise ValueError(f"{self.spec} is a {self.kind.name} drafter, without a model of its own")
        return self.loaded

    @property
    def facts(self) -> ModelFacts | None:
        """What loading revealed, as the database keeps it (None for ngram)."""
        m = self.loaded
        return None if m is None else ModelFacts(m.num_parameters, m.num_layers, m.logits_width, m.fingerprint)

    @property
    def cost_rank(self) -> tuple[int, int]:
        """Parameters, then a quantized copy before its full-precision parent (same count)."""
        return (0, 0) if self.loaded is None else (self.loaded.num_parameters, 0 if self.spec.quant else 1)
