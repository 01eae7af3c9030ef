"""The planner API for serving stacks: plain profile data in, ranked hierarchies out.

    >>> from hsd_planner import Profile, solve
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
    >>> plan = solve(profile, t_max=8).best
    >>> plan.chain[-1], plan.prediction.speedup > 2
    ('big', True)

Latency curves are ``{context_len: {n: ms}}``, interpolated linearly in n and in context
length, and extended linearly past the largest n and the longest context. Acceptance is the
mean ``alpha`` and, when measured, the run-length distribution ``run_lengths`` = P(G >= g),
g = 0, 1, ... over every start position, and ``visited[b - 1]`` = P(G >= g), g = 0..b, over the
starts a decoder drafting b tokens a round visits (what the empirical model uses when present).
"""

from __future__ import annotations

import bisect
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .latency import Level, Prediction, RunLengths, hierarchy_latency
from .solver import Candidate, Plan, Solution, SolverError
from .solver import solve as solve_graph

__all__ = ["LatencyCurve", "ModelProfile", "PairAcceptance", "Profile", "solve", "predict", "best_singles"]


def _interp(xs: list[int], ys: list[float], x: float) -> float:
    """Piecewise-linear in x; linear extension past both ends (one point: constant)."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


class LatencyCurve(BaseModel):
    """Median ms of one forward pass: ``points[context_len][n]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    points: dict[int, dict[int, float]] = Field(min_length=1)

    def __call__(self, n: int, context_len: int) -> float:
        contexts = sorted(self.points)
        at = [_interp(sorted(self.points[c]), [self.points[c][k] for k in sorted(self.points[c])], n) for c in contexts]
        if context_len <= contexts[0]:
            return at[0]
        # past the longest measured context, attention keeps growing: extend linearly, not flat
        return max(at[-1], _interp(contexts, at, context_len)) if context_len > contexts[-1] else _interp(contexts, at, context_len)


class ModelProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    latency: LatencyCurve
    lookup: bool = False  # proposes all its tokens in one call (the n-gram drafter)

    @model_validator(mode="before")
    @classmethod
    def _curve(cls, data):
        if isinstance(data, dict) and isinstance(data.get("latency"), dict) and "points" not in data["latency"]:
            data = {**data, "latency": {"points": data["latency"]}}
        return data


class PairAcceptance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    drafter: str
    verifier: str
    alpha: float = Field(ge=0, le=1)
    run_lengths: list[float] | None = None  # P(G >= g), g = 0.., over every start (optional)
    visited: list[list[float] | None] | None = None  # [b - 1][g]: over the starts a width-b decoder visits (optional)

    def runs(self, model: Literal["iid", "empirical"]) -> RunLengths:
        if model == "empirical" and self.run_lengths and len(self.run_lengths) >= 2:
            return RunLengths(self.run_lengths, self.visited)
        return RunLengths.iid(self.alpha)


class Profile(BaseModel):
    """Everything the solver needs: a target, candidate models with cost curves, acceptance."""

    model_config = ConfigDict(extra="forbid")
    target: str
    models: list[ModelProfile]
    acceptance: list[PairAcceptance] = []

    def model(self, name: str) -> ModelProfile:
        for m in self.models:
            if m.name == name:
                return m
        raise SolverError(f"no latency profile for {name}; profile it on this hardware first")

    def candidate(self, name: str, context_len: int) -> Candidate:
        m = self.model(name)
        return Candidate(name, lambda n, c=m.latency: c(n, context_len), m.lookup)

    def pairs(self, model: Literal["iid", "empirical"]) -> dict[tuple[str, str], RunLengths]:
        return {(a.drafter, a.verifier): a.runs(model) for a in self.acceptance}


def solve(
    profile: Profile,
    t_max: int = 8,
    top_k: int = 5,
    max_depth: int | None = None,
    acceptance: Literal["iid", "empirical"] = "empirical",
    context_len: int = 256,
    exclude: tuple[str, ...] = (),
    require: tuple[str, ...] = (),
) -> Solution:
    """Rank hierarchies for ``profile.target``: best, top-k, best single drafter, autoregressive.

    ``exclude`` drops candidates; every hierarchy returned contains all of ``require``.
    """
    target = profile.candidate(profile.target, context_len)
    names = [m.name for m in profile.models if m.name != profile.target and m.name not in exclude]
    pairs = profile.pairs(acceptance)
    usable = [n for n in names if any(d == n for d, _ in pairs)]
    return solve_graph(
        [profile.candidate(n, context_len) for n in usable], target, pairs, t_max=t_max, top_k=top_k, max_depth=max_depth, require=require
    )


def predict(
    profile: Profile, chain: list[str], widths: list[int], acceptance: Literal["iid", "empirical"] = "empirical", context_len: int = 256
) -> Prediction:
    """The latency model's prediction for one given hierarchy (``chain`` smallest first)."""
    pairs = profile.pairs(acceptance)
    levels = []
    for k, name in enumerate(chain):
        m = profile.model(name)
        runs = None
        if k > 0:
            runs = pairs.get((chain[k - 1], name))
            if runs is None:
                raise SolverError(f"no acceptance data for {chain[k - 1]} verified by {name}; profile them together")
        levels.append(Level(lambda n, c=m.latency: c(n, context_len), runs, m.lookup))
    return hierarchy_latency(levels, widths)


def best_singles(
    profile: Profile, t_max: int = 8, acceptance: Literal["iid", "empirical"] = "empirical", context_len: int = 256
) -> list[Plan]:
    """For every drafter measured against the target, its best width as a one-drafter plan."""
    out = []
    for a in profile.acceptance:
        if a.verifier != profile.target:
            continue
        preds = [(predict(profile, [a.drafter, profile.target], [t], acceptance, context_len), t) for t in range(1, t_max + 1)]
        pred, t = min(preds, key=lambda x: x[0].ms_per_token)
        out.append(Plan((a.drafter, profile.target), (t,), pred))
    return sorted(out, key=lambda p: p.prediction.ms_per_token)
