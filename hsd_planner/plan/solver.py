"""The exact hierarchy solver: a shortest path with monotone edge maps in a DAG.

Nodes: a source, one node (j, T) per non-target candidate j and width T in 1..t_max, and the
target. A label D(v) is the expected time for the level at v to deliver its T tokens; each edge
maps it as D(v) = g (D(u) + w):

- source -> (j, T): w = T c_j(1) (c_j(T) for the n-gram lookup), g = 1;
- (j, T') -> (i, T), c_j(1) < c_i(1): w = c_i(T' + 1), g = m(T; a_ji, T') expected rounds;
- (j, T') -> target: w = c_K(T' + 1), g = 1 / E[X] - the label becomes ms per token;
- source -> target: plain autoregressive decoding, c_K(1).

Every map is increasing in D, and the graph is acyclic, so keeping the k smallest labels per node
in one pass in topological order gives the exact top-k hierarchies: O(N^2 t_max^2) edges.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from ..errors import SolverError
from .latency import CostCurve, Prediction, RunLengths, draft_cost, expected_run_tokens, rounds_table

__all__ = ["Candidate", "Plan", "Solution", "format_chain", "solve_graph"]

SOURCE, TARGET = "source", "target"


@dataclass(frozen=True)
class Candidate:
    """A model for the solver: a name, a cost curve c(n) in ms, and whether it is a lookup drafter."""

    name: str
    cost: CostCurve
    lookup: bool = False


def format_chain(chain: Sequence[str], widths: Sequence[int]) -> str:
    """``ngram[4] -> m:layers=8[2] -> m``: each drafter with its width, then the target.

    >>> format_chain(["ngram", "t"], [4])
    'ngram[4] -> t'
    """
    return " -> ".join([f"{m}[{w}]" for m, w in zip(chain, widths)] + [chain[-1]])


@dataclass(frozen=True)
class Plan:
    """A hierarchy: drafters smallest first, then the target, with one width per drafter."""

    chain: tuple[str, ...]
    widths: tuple[int, ...]
    prediction: Prediction

    @property
    def depth(self) -> int:
        """The number of drafter levels."""
        return len(self.widths)

    @property
    def label(self) -> str:
        """The plan as one line, e.g. ``ngram[4] -> m``."""
        return format_chain(self.chain, self.widths)


@dataclass
class Solution:
    """The ranked hierarchies of one solve."""

    best: Plan
    top: list[Plan]
    singles: list[Plan]  # per drafter measured against the target, its best width; fastest first
    autoregressive: Plan
    graph: nx.DiGraph = field(repr=False)

    @property
    def best_single(self) -> Plan | None:
        """The best plan with exactly one drafter."""
        return self.singles[0] if self.singles else None


def _validate(candidates, target, acceptance, t_max, top_k, max_depth) -> None:
    if t_max < 1:
        raise SolverError(f"the width limit t_max must be >= 1, got {t_max}")
    if top_k < 1:
        raise SolverError(f"top_k must be >= 1, got {top_k}")
    if max_depth is not None and max_depth < 0:
        raise SolverError(f"max_depth must be >= 0, got {max_depth}")
    if not candidates:
        raise SolverError("there are no drafter candidates; profile at least one drafter together with the target")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names) or target.name in names:
        raise SolverError("candidate names must be distinct and differ from the target's")
    if not any((c.name, target.name) in acceptance for c in candidates):
        raise SolverError(f"no candidate has acceptance data against the target {target.name}; profile them together")


def solve_graph(
    candidates: Sequence[Candidate],
    target: Candidate,
    acceptance: Mapping[tuple[str, str], RunLengths],
    t_max: int = 8,
    top_k: int = 5,
    max_depth: int | None = None,
    require: Sequence[str] = (),
) -> Solution:
    """The latency-optimal hierarchies over ``candidates`` for ``target``.

    Args:
        candidates: drafter candidates (not the target); ordered by c(1), cheapest lowest.
        target: the target model.
        acceptance: ``(drafter, verifier) -> RunLengths``; a missing pair is an absent edge.
        t_max: the largest width tried at any level.
        top_k: how many hierarchies to return, best first.
        max_depth: the most drafter levels (None: no limit).
        require: names every returned hierarchy must contain.

    >>> flat = lambda ms: (lambda n: ms)
    >>> sol = solve_graph([Candidate("d", flat(1.0))], Candidate("t", flat(10.0)), {("d", "t"): RunLengths.iid(0.9)}, t_max=4)
    >>> sol.best.chain, sol.best.widths
    (('d', 't'), (4,))
    """
    _validate(candidates, target, acceptance, t_max, top_k, max_depth)
    missing = [r for r in require if r not in {c.name for c in candidates}]
    if missing:
        raise SolverError(f"required model {missing[0]} is not among the profiled candidates")
    bit = {name: 1 << i for i, name in enumerate(require)}
    full = (1 << len(require)) - 1
    order = sorted(candidates, key=lambda c: c.cost(1))
    depth_cap = max_depth if max_depth is not None else len(order)
    widths = range(1, t_max + 1)

    graph = nx.DiGraph()
    graph.add_node(SOURCE)
    graph.add_node(TARGET)
    graph.add_edge(SOURCE, TARGET, w=target.cost(1), g=1.0)
    if depth_cap >= 1:
        for c in order:
            for t in widths:
                graph.add_edge(SOURCE, (c.name, t), w=draft_cost(c.cost, c.lookup, t), g=1.0)
        for lo, hi in ((a, b) for i, a in enumerate(order) for b in order[i + 1 :]):
            runs = acceptance.get((lo.name, hi.name))
            if runs is None:
                continue
            for b in widths:
                w = hi.cost(b + 1)
                rounds = rounds_table(runs, b, t_max)
                for t in widths:
                    graph.add_edge((lo.name, b), (hi.name, t), w=w, g=rounds[t])
        for c in order:
            runs = acceptance.get((c.name, target.name))
            if runs is None:
                continue
            for b in widths:
                graph.add_edge((c.name, b), TARGET, w=target.cost(b + 1), g=1.0 / expected_run_tokens(runs, b), runs=runs)

    # labels[v]: up to top_k (D, depth, required-mask, path) with the smallest D per group;
    # path = ((name, T), ...). Labels of different depth (under a cap) or different sets of
    # required models are not comparable, so each group keeps its own k best.
    labels: dict[object, list[tuple[float, int, int, tuple]]] = {SOURCE: [(0.0, 0, 0, ())]}
    for v in nx.topological_sort(graph):
        if v == SOURCE:
            continue
        found = []
        for u, _, e in graph.in_edges(v, data=True):
            for d, depth, mask, path in labels.get(u, []):
                if v == TARGET:
                    if mask == full:
                        found.append((e["g"] * (d + e["w"]), depth, mask, path))
                    continue
                if depth + 1 > depth_cap:
                    continue
                found.append((e["g"] * (d + e["w"]), depth + 1, mask | bit.get(v[0], 0), path + (v,)))
        labels[v] = _keep(found, top_k, by_depth=max_depth is not None)

    plans = [_plan(path, target, d, graph) for d, _, _, path in labels[TARGET]]
    if not plans:
        raise SolverError(f"no hierarchy contains every required model ({', '.join(require)}) with measured acceptance along it")
    plans.sort(key=lambda p: p.prediction.ms_per_token)
    auto = _plan((), target, target.cost(1), graph)
    singles = _singles(order, target, acceptance, widths, graph) if depth_cap >= 1 else []
    return Solution(best=plans[0], top=plans[:top_k], singles=singles, autoregressive=auto, graph=graph)


def _keep(found: list, k: int, by_depth: bool) -> list:
    groups: dict[tuple, list] = {}
    for label in found:
        groups.setdefault((label[1] if by_depth else 0, label[2]), []).append(label)
    return [x for group in groups.values() for x in heapq.nsmallest(k, group, key=lambda x: x[0])]


def _plan(path: tuple, target: Candidate, ms: float, graph: nx.DiGraph) -> Plan:
    chain = tuple(name for name, _ in path) + (target.name,)
    widths = tuple(t for _, t in path)
    tokens = 1.0
    if path:
        tokens = expected_run_tokens(graph.edges[path[-1], TARGET]["runs"], widths[-1])
    return Plan(chain, widths, Prediction(ms, tokens, target.cost(1) / ms))


def _singles(
    order: Sequence[Candidate], target: Candidate, acceptance: Mapping[tuple[str, str], RunLengths], widths: range, graph: nx.DiGraph
) -> list[Plan]:
    """For every drafter with acceptance against the target, its best width as a one-drafter plan."""
    out = []
    for c in order:
        if (c.name, target.name) not in acceptance:
            continue

        def ms(t: int, name: str = c.name) -> float:
            e = graph.edges[(name, t), TARGET]
            return e["g"] * (graph.edges[SOURCE, (name, t)]["w"] + e["w"])

        t = min(widths, key=ms)  # the first of equal ones, as a strict < scan would keep
        out.append(_plan(((c.name, t),), target, ms(t), graph))
    return sorted(out, key=lambda p: p.prediction.ms_per_token)
