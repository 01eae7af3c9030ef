"""The planner's input: a target, candidate models with cost curves, pairwise acceptance.

Plain data a serving stack can build itself (no database, no torch):

    >>> from hsd_planner.plan import Profile, SolveConfig, solve
    >>> profile = Profile(
    ...     target="big",
    ...     models=[
    ...         {"name": "ngram", "lookup": True, "latency": {64: {1: 0.05, 8: 0.05}}},
    ...         {"name": "small", "latency": {64: {1: 4.0, 8: 4.4}}},
    ...         {"name": "big", "latency": {64: {1: 30.0, 8: 33.0}}},
    ...     ],
    ...     acceptance=[
    ...         {"drafter": "ngram", "verifier": "small", "alpha": 0.3},
    ...         {"drafter": "ngram", "verifier": "big", "alpha": 0.3},
    ...         {"drafter": "small", "verifier": "big", "alpha": 0.8},
    ...     ],
    ... )
    >>> plan = solve(profile, SolveConfig(t_max=8)).best
    >>> plan.chain[-1], plan.prediction.speedup > 2
    ('big', True)

Latency curves are ``{context_len: {n: ms}}``, interpolated linearly in n and in context
length, and extended linearly past the largest n and the longest context; a model's ``latency``
is one curve (a pass over one sequence) or curves keyed by batch size ``{b: {context_len: {n: ms}}}``. Acceptance is the
mean ``alpha`` and, when measured, the run-length distribution ``run_lengths`` = P(G >= g),
g = 0, 1, ... over every start position, and ``visited[b - 1]`` = P(G >= g), g = 0..b, over the
starts a decoder drafting b tokens a round visits (what the empirical model uses when present).
``siblings`` = A(k), k = 1, 2, ..., when measured, lets the drafter draft trees for that verifier
(see :class:`~hsd_planner.plan.rounds.SiblingCurve`); a pair without it plans chains only.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..choices import AcceptanceModel
from ..errors import SolverError
from .latency import CostCurve
from .rounds import RunLengths, SiblingCurve

__all__ = ["LatencyCurve", "ModelProfile", "PairAcceptance", "Profile"]


def _interp(xs: list[int], ys: list[float], x: float) -> float:
    """Piecewise-linear in x; flat before the first point; past the last, the last segment's slope
    when it rises, else flat (a noisy last point must not extrapolate a pass towards 0 ms).

    >>> _interp([1, 2], [1.0, 0.8], 8), _interp([1, 2], [1.0, 1.5], 4), _interp([4, 8], [2.0, 3.0], 1)
    (0.8, 2.5, 2.0)
    """
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + max(0.0, slope) * (x - xs[-1])
    i = bisect.bisect_left(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class _Memo(dict):
    """Values a curve computed from its points, kept for the next read: never part of its equality."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Memo)

    __hash__ = None


class LatencyCurve(BaseModel):
    """Median ms of one forward pass: ``points[context_len][n]``.

    ``n`` = 0, where present, is not a pass: it is what the model costs once per proposal beside
    its passes (a steered drafter's projection of its verifier's taps, :meth:`proposal`).

    A curve remembers what it read off its points (a bootstrap prices a thousand profiles on the
    same curves); :meth:`scaled` copies share that memory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    points: dict[int, dict[int, float]] = Field(min_length=1)
    # ms of host work a decoder spends per pass of this model beside the pass (its cache
    # bookkeeping, drafting and verification): part of every pass's cost in a plan (Profile.cost)
    host_ms: float = Field(default=0.0, ge=0.0)
    # the sigma of log(ms) of one pass over the profile's samples (the median over the curve's
    # points of ln(p90 / p10) / 2.563, p10..p90 spanning +-1.2816 sigma of a normal): how far the
    # machine moved this model's passes while it was profiled, which the bootstrap of predicted
    # speed-ups draws each model's drift from (0: not measured)
    spread: float = Field(default=0.0, ge=0.0)
    _scale: float = PrivateAttr(default=1.0)  # every pass this many times as long (see scaled)
    _memo: _Memo = PrivateAttr(default_factory=_Memo)  # (n, contexts) -> mean ms over them, unscaled

    def __call__(self, n: int, context_len: int) -> float:
        """Interpolated ms of a pass of ``n`` >= 1 tokens after ``context_len`` cached ones."""
        return self.mean(n, (context_len,))

    def mean(self, n: int, contexts: tuple[int, ...]) -> float:
        """The mean ms of a pass of ``n`` >= 1 tokens over ``contexts`` cached ones (each as :meth:`__call__`).

        >>> curve = LatencyCurve(points={64: {1: 4.0}, 128: {1: 6.0}})
        >>> curve.mean(1, (64, 128)), curve.scaled(2.0).mean(1, (64, 128))
        (5.0, 10.0)
        """
        key = (n, contexts)
        ms = self._memo.get(key)
        if ms is None:
            passes = {c: {k: ms for k, ms in row.items() if k >= 1} for c, row in self.points.items()}
            at = {c: _interp(sorted(row), [row[k] for k in sorted(row)], n) for c, row in passes.items() if row}
            ms = self._memo[key] = sum(_over_contexts(at, c) for c in contexts) / len(contexts)
        return self._scale * ms

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> LatencyCurve:
        """A copy (pydantic's), which forgets what this curve remembered when ``update`` changes it.

        >>> curve = LatencyCurve(points={64: {1: 4.0}})
        >>> curve(1, 64), curve.model_copy(update={"points": {64: {1: 8.0}}})(1, 64)
        (4.0, 8.0)
        """
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy._memo = _Memo()
        return copy

    def scaled(self, factor: float) -> LatencyCurve:
        """This curve with every pass ``factor`` times as long: how a bootstrap draws a machine
        that drifted. The factor is the copy's own and is not serialised (its :attr:`points`
        stay those measured); the copy shares what this curve remembered."""
        copy = self.model_copy()
        copy._scale = self._scale * factor
        return copy

    def proposal(self, context_len: int) -> float:
        """ms a proposal costs beside its passes (``n`` = 0; 0.0 where none was measured).

        >>> LatencyCurve(points={64: {0: 0.5, 1: 4.0}}).proposal(128), LatencyCurve(points={64: {1: 4.0}}).proposal(64)
        (0.5, 0.0)
        """
        at = {c: row[0] for c, row in self.points.items() if 0 in row}
        return self._scale * _over_contexts(at, context_len) if at else 0.0


def _over_contexts(at: dict[int, float], context_len: int) -> float:
    """``at[context]`` interpolated at ``context_len``: flat before the shortest context, extended
    linearly past the longest (attention keeps growing), never below the longest's value."""
    contexts = sorted(at)
    values = [at[c] for c in contexts]
    if context_len <= contexts[0]:
        return values[0]
    return max(values[-1], _interp(contexts, values, context_len)) if context_len > contexts[-1] else _interp(contexts, values, context_len)


class ModelProfile(BaseModel):
    """One candidate: its name (a model spec), its cost curves, and whether it is a lookup drafter.

    ``latency[b]`` is c(n, b): one pass over b sequences of n new tokens each, for every batch
    size b measured; b = 1, a pass over one sequence, is always there (see :meth:`Profile.cost`).
    One curve ``{context_len: {n: ms}}`` is batch size 1 alone; a document written before the
    curves were keyed by batch size, with b = 1 under ``latency`` and the others under
    ``batch_latency``, reads the same.

    >>> m = ModelProfile(name="t", latency={64: {1: 10.0}}, batch_latency={4: {64: {1: 16.0}}})
    >>> sorted(m.latency), m == ModelProfile.model_validate(m.model_dump())
    ([1, 4], True)
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    latency: dict[int, LatencyCurve]  # batch size -> its curve
    lookup: bool = False  # proposes all its tokens in one call (the n-gram drafter)
    stops: bool = False  # ends its drafts on its confidence (pmin=): its passes follow the measured draft lengths
    n_min: int = 0  # such a draft shorter than this is dropped (nmin=)

    @model_validator(mode="before")
    @classmethod
    def _curves(cls, data: object) -> object:
        if not isinstance(data, dict) or "latency" not in data:
            return data
        data = dict(data)
        latency = data["latency"]
        curves = {1: latency} if _one_curve(latency) else dict(latency) if isinstance(latency, dict) else latency
        older = data.pop("batch_latency", None)  # batch sizes above 1, as documents of before kept them
        if isinstance(curves, dict) and isinstance(older, dict):
            curves = {**older, **curves}
        if isinstance(curves, dict):
            curves = {b: {"points": c} if isinstance(c, dict) and "points" not in c else c for b, c in curves.items()}
        return {**data, "latency": curves}

    @field_validator("latency")
    @classmethod
    def _batch_one(cls, curves: dict[int, LatencyCurve]) -> dict[int, LatencyCurve]:
        if 1 not in curves:
            raise ValueError("needs the curve of batch size 1 (a pass over one sequence)")
        if min(curves) < 1:
            raise ValueError(f"a batch holds at least one sequence, got batch size {min(curves)}")
        return dict(sorted(curves.items()))


def _one_curve(value: object) -> bool:
    """Whether ``value`` is one latency curve (a :class:`LatencyCurve`, its fields, or its points
    ``{context_len: {n: ms}}``) rather than curves keyed by batch size."""
    if isinstance(value, LatencyCurve):
        return True
    if not isinstance(value, dict):
        return False
    return "points" in value or all(
        isinstance(row, dict) and not any(isinstance(v, dict | BaseModel) for v in row.values()) for row in value.values()
    )


class PairAcceptance(BaseModel):
    """How often ``verifier`` accepts what ``drafter`` proposes: the mean and, optionally, run lengths."""

    model_config = ConfigDict(extra="forbid")
    drafter: str
    verifier: str
    alpha: float = Field(ge=0, le=1)
    run_lengths: list[float] | None = None  # P(G >= g), g = 0.., over every start (optional)
    visited: list[list[float] | None] | None = None  # [b - 1][g]: over the starts a width-b decoder visits (optional)
    # [b - 1][l]: P(L >= l), l = 0..b, a lookup drafter's proposal length L over those rounds
    # (optional; absent: the drafter always proposes b, as a model does)
    drafted: list[list[float] | None] | None = None
    # A(k), k = 1..: P(one of k siblings drawn without replacement from the drafter is accepted by
    # the verifier's recursive rejection sampling) - what a draft tree's branching is worth (optional)
    siblings: list[float] | None = None

    def runs(self, model: AcceptanceModel) -> RunLengths:
        """The run-length distribution under ``model`` (the i.i.d. one when none was measured)."""
        if model == "empirical" and self.run_lengths and len(self.run_lengths) >= 2:
            return RunLengths(self.run_lengths, self.visited, self.drafted)
        return RunLengths.iid(self.alpha, drafted=self.drafted)


class Profile(BaseModel):
    """Everything the solver needs: a target, candidate models with cost curves, acceptance."""

    model_config = ConfigDict(extra="forbid")
    target: str
    models: list[ModelProfile]
    acceptance: list[PairAcceptance] = []

    def model(self, name: str) -> ModelProfile:
        """The candidate called ``name``; a SolverError when it has no latency profile."""
        for m in self.models:
            if m.name == name:
                return m
        raise SolverError(f"no latency profile for {name}; profile it on this hardware first")

    def cost(self, name: str, context_len: int | Sequence[int], batch: int = 1) -> CostCurve:
        """c(n, b) in ms of model ``name`` at ``context_len`` and ``batch`` sequences; for several
        contexts, their mean (the expected cost of a pass when a workload's prompts decode there),
        plus the host work a decoder spends per pass of it (:attr:`LatencyCurve.host_ms`).

        Between two measured batch sizes, linear in b; a lookup drafter without a measured batch
        curve makes one call per sequence, b c(n). A batch size outside the measured ones is
        refused: a pass's cost past the largest batch measured is not a straight line one can trust.

        >>> p = Profile(target="t", models=[{"name": "t", "latency": {1: {64: {1: 10.0}}, 4: {64: {1: 16.0}}}}])
        >>> p.cost("t", 64, 2)(1), p.cost("t", 64, 4)(1)
        (12.0, 16.0)
        """
        if batch < 1:
            raise SolverError(f"a batch holds at least one sequence, got {batch}")
        model = self.model(name)
        contexts = [context_len] if isinstance(context_len, int) else list(context_len)
        if not contexts:
            raise SolverError("no context length to read the cost curves at")
        curves = model.latency
        sizes, scale = sorted(curves), 1.0
        if model.lookup and batch not in curves:  # one lookup per sequence
            lo = hi = 1
            scale = float(batch)
        elif batch in curves:
            lo = hi = batch
        elif sizes[0] < batch < sizes[-1]:
            i = bisect.bisect_left(sizes, batch)
            lo, hi = sizes[i - 1], sizes[i]
        else:
            raise SolverError(
                f"no latency of {name} at batch size {batch} (profiled: {', '.join(map(str, sizes))}); "
                f"run hsd-plan profile --batch-sizes {','.join(map(str, sorted({*sizes, batch})))}"
            )

        read = tuple(contexts)
        host = curves[1].host_ms  # the decoding loop's work per pass, beside the pass

        def at(n: int) -> float:
            a = curves[lo].mean(n, read)
            if hi != lo:  # between two measured batch sizes (the curve at hi read only then)
                a += (curves[hi].mean(n, read) - a) * (batch - lo) / (hi - lo)
            return scale * a + host

        return at

    def proposal(self, name: str, context_len: int | Sequence[int]) -> float:
        """ms model ``name`` costs once per proposal beside its passes, at ``context_len`` (or the
        mean over several): a steered drafter's projection; 0.0 for every other model."""
        curve = self.model(name).latency[1]
        contexts = [context_len] if isinstance(context_len, int) else list(context_len)
        return sum(curve.proposal(c) for c in contexts) / len(contexts) if contexts else 0.0

    def pairs(self, model: AcceptanceModel) -> dict[tuple[str, str], RunLengths]:
        """``(drafter, verifier) -> RunLengths`` for every measured pair."""
        return {(a.drafter, a.verifier): a.runs(model) for a in self.acceptance}

    def pair_runs(self, drafter: str, verifier: str, model: AcceptanceModel) -> RunLengths | None:
        """One pair's run lengths (None: not measured), without building every pair's: a
        prediction reads only its chain's (a bootstrap predicts every plan on 1,000 resamples)."""
        return next((a.runs(model) for a in self.acceptance if (a.drafter, a.verifier) == (drafter, verifier)), None)

    def siblings_curves(self) -> dict[tuple[str, str], SiblingCurve]:
        """``(drafter, verifier) -> SiblingCurve`` for every pair with a measured A(k): the pairs
        whose drafter may draft a tree for that verifier. The same under either acceptance model
        (A(1) is alpha, and depths are taken as independent either way)."""
        return {(a.drafter, a.verifier): SiblingCurve(a.siblings) for a in self.acceptance if a.siblings}
