"""The versioned JSON document of a profiling database: one typed row model per table.

Rows refer to each other by spec string, hardware fingerprint and workload content hash, never
by database id. Every field carries the constraints a measured row satisfies (finite positive
latencies, probabilities in [0, 1], parseable specs, bounded integers, printable names), so an
imported document is checked exactly as strictly as a measurement. Types are strict: a number
is never read out of a string, an integer never out of a float or a boolean (JSON integers are
accepted where a float is due).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Hashable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from hsd_runtime.terms.choices import GGUF_QUANTS, Mode
from hsd_runtime.terms.kinds import kind_of
from hsd_runtime.terms.spec import parse_spec

from ..errors import HSDError
from ..limits import MAX_NAME_CHARS

__all__ = [
    "SCHEMA_VERSION",
    "AcceptanceOut",
    "AcceptancePromptOut",
    "ContinuationOut",
    "HardwareOut",
    "LatencyOut",
    "ModelOut",
    "ProfileDocument",
    "SettingOut",
    "WorkloadOut",
]

SCHEMA_VERSION = 1

# the constraints measured rows satisfy; an import must satisfy them too
Ms = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # a latency
Prob = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # alpha, P(G >= g)
Sum = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # sums of probabilities over positions
Count = Annotated[int, Field(ge=0, le=10**12)]
Small = Annotated[int, Field(ge=1, le=10**7)]  # widths, threads, lengths
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]


def _spec(value: str) -> str:
    try:
        parse_spec(value)
    except HSDError as exc:
        raise ValueError(str(exc)) from None
    return value


def _printable(value: str) -> str:
    """Names end up on terminals: no control characters (escape sequences) in them."""
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValueError("contains control characters")
    return value


Spec = Annotated[Name, AfterValidator(_spec), AfterValidator(_printable)]
Text = Annotated[Name, AfterValidator(_printable)]
# text stored in a column of this width (a server refuses longer values; SQLite would keep them)
Key = Annotated[str, Field(min_length=1, max_length=32), AfterValidator(_printable)]  # fingerprints
Hash = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_printable)]
Short = Annotated[str, Field(min_length=1, max_length=40), AfterValidator(_printable)]
Label = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_printable)]

SIBLINGS_MAX = 64  # the longest sibling curve an import accepts (profiles store k = 1..8)
SIBLINGS_NOISE = 1e-6  # how far a stored curve may dip: sums of non-decreasing a_t(k) differ by rounding only


def _non_decreasing(values: list[float]) -> list[float]:
    """A(k) (or its sums over positions) never falls with k: one more sibling only adds a chance."""
    scale = max([1.0, *values])
    if any(b < a - SIBLINGS_NOISE * scale for a, b in zip(values, values[1:])):
        raise ValueError("must be non-decreasing in k (one more sibling can only add acceptance)")
    return values


SiblingCurve = Annotated[list[Prob], Field(min_length=1, max_length=SIBLINGS_MAX), AfterValidator(_non_decreasing)]
SiblingSums = Annotated[list[Sum], Field(min_length=1, max_length=SIBLINGS_MAX), AfterValidator(_non_decreasing)]


# a model's dtype on torch, the GGUF's own types on llama.cpp (gguf, or the quant= it was re-quantized to), - for ngram
_DTYPE = "^(fp32|bf16|fp16|gguf|" + "|".join(GGUF_QUANTS) + "|-)$"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HardwareOut(_Row):
    fingerprint: Key
    device: Annotated[str, Field(min_length=1, max_length=16), AfterValidator(_printable)]
    device_name: Label
    threads: Small
    torch_version: Short
    capability: Short | None = None  # absent in exports made before it was recorded
    # absent before prepacking; llamacpp-VERSION: llama.cpp's kernels, by its binding's version
    kernels: Annotated[str, Field(pattern=r"^(plain|prepacked|llamacpp-[0-9][0-9a-z.]{0,30})$")] | None = None
    bandwidth_gbs: Ms | None = None  # the floor probe; absent before it existed
    bandwidth_spread: Ms | None = None
    peak_gflops: dict[Annotated[str, Field(pattern="^(fp32|bf16|fp16)$")], Ms] | None = None
    peak_spread: dict[Annotated[str, Field(pattern="^(fp32|bf16|fp16)$")], Ms] | None = None


class ModelOut(_Row):
    spec: Spec
    parameters: Count
    layers: Small | None
    vocab_size: Small | None
    tokenizer_fingerprint: Key | None


class WorkloadOut(_Row):
    name: Text
    content_hash: Hash
    count: Small
    prompt_tokens: list[Small] | None = None  # absent in exports made before they were recorded


class SettingOut(_Row):
    mode: Mode
    temperature: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    dtype: Annotated[str, Field(pattern=_DTYPE)]
    max_new_tokens: Small
    lenience: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0  # absent in exports made before it was recorded


class LatencyOut(_Row):
    model: Spec
    hardware: Text
    dtype: Annotated[str, Field(pattern=_DTYPE)]
    n_tokens: Annotated[int, Field(ge=0, le=10**7)]  # 0: a steered model's projection, once per proposal (checked below)
    context_len: Annotated[int, Field(ge=0, le=10**7)]
    median_ms: Ms
    p10_ms: Ms
    p90_ms: Ms
    repeats: Small
    samples_ms: list[Ms] | None = None  # absent in exports made before interleaved sweeps
    floor_ms: Ms | None = None  # absent before the floor probe
    batch_size: Small = 1  # sequences per pass; absent before batch profiles
    host_ms: Ms | None = None  # the decoding loop's host work per pass; absent where not measured


class ContinuationOut(_Row):
    verifier: Spec
    workload: Text
    setting: SettingOut
    prompt_index: Count
    tokens: list[Annotated[int, Field(ge=0, le=10**8)]]


class AcceptancePromptOut(_Row):
    drafter: Spec
    verifier: Spec
    workload: Text
    setting: SettingOut
    prompt_index: Count
    positions: Count
    alpha_sum: Sum
    run_sum: list[Sum]
    run_count: list[Count]
    visit_sum: list[list[Sum]] | None = None  # absent in exports made before they were measured
    visit_count: list[Sum] | None = None
    visit_base: list[list[Sum]] | None = None  # absent in exports made before censored starts counted
    visit_drafted: list[list[Sum]] | None = None  # proposal lengths (lookup, pmin=); absent: drafts b always, or older
    siblings_sum: SiblingSums | None = None  # sum over positions of a_t(k); absent: n-gram drafter, or older exports
    siblings_count: Count | None = None

    @model_validator(mode="after")
    def _siblings(self) -> AcceptancePromptOut:
        if (self.siblings_sum is None) != (self.siblings_count is None):
            raise ValueError("siblings_sum and siblings_count come together")
        if (
            self.siblings_sum is not None
            and self.siblings_count is not None
            and max(self.siblings_sum) > self.siblings_count * (1 + SIBLINGS_NOISE)
        ):
            raise ValueError("siblings_sum exceeds siblings_count (a_t(k) is a probability)")
        if self.visit_base is not None and (
            self.visit_sum is None or [len(b) for b in self.visit_base] != [len(b) for b in self.visit_sum]
        ):
            raise ValueError("visit_base needs visit_sum, with as many sums for each width")
        return self


class AcceptanceOut(_Row):
    drafter: Spec
    verifier: Spec
    workload: Text
    setting: SettingOut
    alpha: Prob
    positions: Count
    prompts: Count
    run_lengths: Annotated[list[Prob], Field(min_length=1)]  # P(G >= 0) at least; an empty curve predicts nothing
    visited: list[list[Prob] | None] | None = None
    drafted: list[list[Prob] | None] | None = None  # [b - 1][l]: P_b(L >= l), a lookup's or a pmin= model's proposal length L
    siblings: SiblingCurve | None = None  # A(k), k = 1..; absent: n-gram drafter, or older exports


class ProfileDocument(_Row):
    """Everything the profiling database holds, version ``SCHEMA_VERSION``."""

    schema_version: Literal[1] = SCHEMA_VERSION  # True and 1.0 equal 1: refused by _exact_version

    @field_validator("schema_version", mode="before")
    @classmethod
    def _exact_version(cls, value: object) -> object:
        if type(value) is not int:
            raise ValueError(f"must be the integer {SCHEMA_VERSION}, not {value!r}")
        return value

    hardware: list[HardwareOut] = []
    models: list[ModelOut] = []
    workloads: list[WorkloadOut] = []
    latency: list[LatencyOut] = []
    continuations: list[ContinuationOut] = []
    acceptance_prompts: list[AcceptancePromptOut] = []
    acceptance: list[AcceptanceOut] = []

    @model_validator(mode="after")
    def _consistent(self) -> ProfileDocument:
        """Every reference defined, no key twice with different values, token ids in vocabulary:
        decided here, before an import writes anything."""
        hardware = _unique("hardware", self.hardware, lambda r: r.fingerprint)
        models = _unique("models", self.models, lambda r: r.spec)
        workloads = _unique("workloads", self.workloads, lambda r: r.content_hash)

        def known(table: str, i: int, kind: str, value: str, defined: dict) -> None:
            if value not in defined:
                raise ValueError(f"{table}[{i}] refers to {kind} {value!r}, which the document does not define")

        _unique("latency", self.latency, lambda r: (r.model, r.hardware, r.dtype, r.n_tokens, r.context_len, r.batch_size))
        for i, r in enumerate(self.latency):
            known("latency", i, "model", r.model, models)
            known("latency", i, "hardware", r.hardware, hardware)
            if r.n_tokens == 0 and not kind_of(parse_spec(r.model)).projection:
                raise ValueError(f"latency[{i}] has n_tokens 0, which only a steered model's projection row has")
        _unique("continuations", self.continuations, lambda r: (r.verifier, r.workload, _setting_key(r.setting), r.prompt_index))
        for i, c in enumerate(self.continuations):
            known("continuations", i, "model", c.verifier, models)
            known("continuations", i, "workload", c.workload, workloads)
            vocab = models[c.verifier].vocab_size
            if vocab is not None and c.tokens and max(c.tokens) >= vocab:
                raise ValueError(
                    f"continuations[{i}] holds token id {max(c.tokens)}, beyond the vocabulary of {c.verifier} (0..{vocab - 1})"
                )
        pair_rows: list[tuple[str, list]] = [("acceptance_prompts", self.acceptance_prompts), ("acceptance", self.acceptance)]
        _unique(
            "acceptance_prompts",
            self.acceptance_prompts,
            lambda r: (r.drafter, r.verifier, r.workload, _setting_key(r.setting), r.prompt_index),
        )
        _unique("acceptance", self.acceptance, lambda r: (r.drafter, r.verifier, r.workload, _setting_key(r.setting)))
        for table, rows in pair_rows:
            for i, r in enumerate(rows):
                known(table, i, "model", r.drafter, models)
                known(table, i, "model", r.verifier, models)
                known(table, i, "workload", r.workload, workloads)
        return self


def _setting_key(s: SettingOut) -> tuple:
    return tuple(s.model_dump().values())


def _unique(table: str, rows: list[_Row], key: Callable[[Any], Hashable]) -> dict[Hashable, Any]:
    """Rows of ``table`` by natural key; a key twice is refused unless both rows are identical
    (which row would win is not the user's choice to leave to the order of a file)."""
    out: dict[Hashable, Any] = {}
    for i, row in enumerate(rows):
        k = key(row)
        if k in out and out[k] != row:
            raise ValueError(f"{table}[{i}] repeats the key of an earlier row ({k!r}) with different values")
        out.setdefault(k, row)
    return out
