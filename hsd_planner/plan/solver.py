"""The exact hierarchy solver: a shortest path with monotone edge maps in a DAG.

Nodes: a source, one node (j, T) per non-target candidate j and width T in 1..t_max as level 0,
one node (j, T, middle) per candidate j and width T as a middle level, one node (j, b) per
non-lookup candidate j and draft-tree shape b of :func:`tree_shapes`, and the target.
A label D(v) is the expected time for the level at v to deliver its batch; each edge maps it as
D(v) = g (D(u) + w):

- source -> (j, T): w = T c_j(1) (c_j(T) for the n-gram lookup), g = 1;
- source -> (j, b): w = sum_l c_j(F_{l-1}), one pass per depth over the frontier, g = 1 (a tree
  is only ever drafted by level 0, so a tree node has no other way in);
- (j, T') -> (i, T), c_j(1) < c_i(1): w = p_j + c_i(T' + 1), g = m(T) expected rounds under the
  run-length law of (j, i) over batches of T'; from (j, b): w = p_j + c_i(N + 1), g = m(T) under
  the tree law of (j, i) (its sibling curve; see :class:`RoundLaw`);
- (j, T') -> target: w = p_j + c_K(T' + 1), g = 1 / E[X] - the label becomes ms per token; from
  (j, b): w = p_j + c_K(N + 1), g = 1 / E[X] under the tree law. For a generation of exactly L new
  tokens (``max_new_tokens``) g = m(L) / L instead: its expected target rounds, the last one cut
  short, per token (at batch size b, the expected rounds of the slowest of b sequences);
- source -> target: plain autoregressive decoding, c_K(1).

An edge out of level 0's node of a model j into verifier i adds q (c_j(2) - c_j(1)), q the
probability that i accepts the whole batch (1 - (1 - q)^b at batch size b): the two-token pass that
follows such a round (:func:`~.latency.catch_up`). It is why level 0's node and a middle level's
node of the same (j, T) are apart: the same batch costs them differently a round.

Every map is increasing in D, and the graph is acyclic, so keeping the k smallest labels per node
in one pass in topological order gives the exact top-k hierarchies: O(N^2 (t_max + S) t_max)
edges for S tree shapes.

p_j is what a proposal of j costs beside its passes, once a round (a steered drafter's projection;
0 for every other model).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx

from hsd_runtime.terms.shape import TreeShape, Width

from ..errors import SolverError
from ..limits import MAX_BRANCHING
from .config import SOLVE_DEFAULTS, SolveConfig
from .latency import CostCurve, Level, Prediction, catch_up, draft_cost, pass_cost
from .lockstep import expected_max_rounds, max_rounds_table
from .plans import Plan
from .rounds import RoundLaw, RunLengths, SiblingCurve

__all__ = ["MAX_BRANCHING", "Candidate", "Solution", "solve_graph", "tree_shapes"]

SOURCE, TARGET = "source", "target"
MIDDLE = "middle"  # the third field of a middle level's node


@dataclass(frozen=True)
class Candidate:
    """A model for the solver: a name, a cost curve c(n) in ms, whether it is a lookup drafter, the
    ms each of its proposals costs beside its passes (``proposal``: a steered drafter's projection),
    and whether it ends its drafts on its confidence (``stops``: its passes follow the draft lengths
    measured against each verifier, so they are priced on the edge to that verifier)."""

    name: str
    cost: CostCurve
    lookup: bool = False
    proposal: float = 0.0
    stops: bool = False
    n_min: int = 0  # a stopping drafter's draft shorter than this is dropped (nmin=)


def tree_shapes(max_depth: int, budget: int) -> list[TreeShape]:
    """The draft trees the solver tries: branching non-increasing from b_1 >= 2 (all ones is a
    chain, tried as a width already), at most :data:`MAX_BRANCHING` per node, depth at most
    ``max_depth``, at most ``budget`` nodes; shallowest first.

    >>> [str(s) for s in tree_shapes(2, 6)]
    ['2x', '3x', '4x', '2x1', '2x2', '3x1']
    """
    out: list[TreeShape] = []

    def grow(branching: tuple[int, ...], frontier: int, nodes: int) -> None:
        if branching:
            out.append(TreeShape(branching))
        if len(branching) == max_depth:
            return
        widest = branching[-1] if branching else MAX_BRANCHING
        for b in range(1 if branching else 2, widest + 1):
            if nodes + frontier * b <= budget:
                grow((*branching, b), frontier * b, nodes + frontier * b)

    grow((), 1, 0)
    return sorted(out, key=lambda s: (s.depth, s.branching))


@dataclass
class Solution:
    """The ranked hierarchies of one solve."""

    best: Plan
    top: list[Plan]
    singles: list[Plan]  # per drafter measured against the target, its best width or tree; fastest first
    autoregressive: Plan
    graph: nx.DiGraph = field(repr=False)

    @property
    def best_single(self) -> Plan | None:
        """The best plan with exactly one drafter."""
        return self.singles[0] if self.singles else None


def _validate(candidates: Sequence[Candidate], target: Candidate, acceptance: Mapping[tuple[str, str], RunLengths]) -> None:
    if not candidates:
        raise SolverError("there are no drafter candidates; profile at least one drafter together with the target")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names) or target.name in names:
        raise SolverError("candidate names must be distinct and differ from the target's")
    if not any((c.name, target.name) in acceptance for c in candidates):
        raise SolverError(f"no candidate has acceptance data against the target {target.name}; profile them together")


def _batches(
    drafter: Candidate,
    verifier: str,
    acceptance: Mapping[tuple[str, str], RunLengths],
    siblings: Mapping[tuple[str, str], SiblingCurve],
    widths: range,
    shapes: Sequence[TreeShape],
) -> Iterator[tuple[Width, RoundLaw, RunLengths | None]]:
    """Every batch ``drafter`` can hand ``verifier`` with measured acceptance, the law of its
    rounds and the run lengths that price its verification pass (None for a tree): chain widths
    (run lengths), then tree shapes (sibling curve; not for a lookup)."""
    runs = acceptance.get((drafter.name, verifier))
    if runs is not None:
        for b in widths:
            yield b, RoundLaw.chain(runs, b), runs
    curve = siblings.get((drafter.name, verifier))
    if curve is not None and not drafter.lookup:
        for shape in shapes:
            yield shape, RoundLaw.tree(shape, curve), None


def solve_graph(
    candidates: Sequence[Candidate],
    target: Candidate,
    acceptance: Mapping[tuple[str, str], RunLengths],
    config: SolveConfig = SOLVE_DEFAULTS,
    siblings: Mapping[tuple[str, str], SiblingCurve] | None = None,
) -> Solution:
    """The latency-optimal hierarchies over ``candidates`` for ``target``.

    Args:
        candidates: drafter candidates (not the target); ordered by c(1), cheapest lowest.
        target: the target model.
        acceptance: ``(drafter, verifier) -> RunLengths``; a missing pair is an absent edge.
        config: ``t_max`` (the largest width at any level, and the deepest tree), ``top_k``,
            ``max_depth``, ``require`` (names every returned hierarchy must contain), ``trees``
            and ``tree_budget`` (whether level 0 may draft a tree of :func:`tree_shapes`, and
            its most nodes); its profile-level options (acceptance model, contexts, exclusions)
            are the caller's, already applied to the other arguments. At ``batch_size`` > 1
            a level above level 0 runs the expected maximum of the batch's round counts
            (:mod:`.lockstep`), and ``candidates`` and ``target`` carry their costs at that size.
        siblings: ``(drafter, verifier) -> SiblingCurve``; a pair missing here drafts no tree
            for that verifier (None: no trees at all).

    >>> flat = lambda ms: (lambda n: ms)
    >>> d, t = Candidate("d", flat(1.0)), Candidate("t", flat(10.0))
    >>> sol = solve_graph([d], t, {("d", "t"): RunLengths.iid(0.9)}, SolveConfig(t_max=4))
    >>> sol.best.chain, sol.best.widths
    (('d', 't'), (4,))
    >>> curve = SiblingCurve([0.5, 0.8, 0.9, 0.95])
    >>> solve_graph([d], t, {("d", "t"): RunLengths.iid(0.5)}, SolveConfig(t_max=4), siblings={("d", "t"): curve}).best.label
    'd[4x3] -> t'
    """
    _validate(candidates, target, acceptance)
    require = config.require
    missing = [r for r in require if r not in {c.name for c in candidates}]
    if missing:
        raise SolverError(f"required model {missing[0]} is not among the profiled candidates")
    order = sorted(candidates, key=lambda c: c.cost(1))
    depth_cap = config.max_depth if config.max_depth is not None else len(order)
    curves = siblings or {}
    shapes = tree_shapes(config.t_max, config.tree_budget) if config.trees and curves else []
    graph = _graph(
        order, target, acceptance, curves, range(1, config.t_max + 1), shapes, depth_cap >= 1, config.batch_size, config.max_new_tokens
    )
    labels = _labels(graph, config.top_k, depth_cap, {name: 1 << i for i, name in enumerate(require)}, config.max_depth is not None)
    full = (1 << len(require)) - 1
    plans = [_plan(path, target, d, graph) for d, _, mask, path in labels if mask == full]
    if not plans:
        raise SolverError(f"no hierarchy contains every required model ({', '.join(require)}) with measured acceptance along it")
    plans.sort(key=lambda p: p.prediction.ms_per_token)
    auto = _plan((), target, target.cost(1), graph)
    singles = _singles(order, target, graph) if depth_cap >= 1 else []
    return Solution(best=plans[0], top=plans[: config.top_k], singles=singles, autoregressive=auto, graph=graph)


def _graph(
    order: Sequence[Candidate],
    target: Candidate,
    acceptance: Mapping[tuple[str, str], RunLengths],
    curves: Mapping[tuple[str, str], SiblingCurve],
    widths: range,
    shapes: Sequence[TreeShape],
    drafters: bool,
    batch_size: int = 1,
    horizon: int | None = None,
) -> nx.DiGraph:
    """The DAG of the module docstring: edges carry ``w`` and ``g`` of D(v) = g (D(u) + w), and
    an edge into the target its round ``law`` and ``tokens`` per round. Without ``drafters``,
    autoregressive decoding only; at ``batch_size`` > 1 a level above level 0 runs the expected
    maximum of the batch's round counts; with ``horizon`` = L the target's rounds are those of a
    generation of L tokens."""
    graph = nx.DiGraph()
    graph.add_node(SOURCE)
    graph.add_node(TARGET)
    graph.add_edge(SOURCE, TARGET, w=target.cost(1), g=1.0)
    if not drafters:
        return graph
    t_max = widths[-1]
    if batch_size > 1:  # the rows' passes go on while any row drafts: every width priced in full (an upper bound)
        order = [replace(c, stops=False) for c in order]
    for c in order:
        for t in widths:
            # a drafter that stops on its confidence drafts as many passes as its verifier's
            # measured draft lengths say: priced on the edge to that verifier (_drafting), 0 here
            graph.add_edge(SOURCE, (c.name, t), w=0.0 if c.stops else draft_cost(c.cost, c.lookup, t), g=1.0)
    for lo, hi in ((a, b) for i, a in enumerate(order) for b in order[i + 1 :]):
        for b, law, runs in _batches(lo, hi.name, acceptance, curves, widths, shapes):
            w = _drafting(lo, b, runs) + lo.proposal + pass_cost(hi.cost, b, runs, lo.n_min)
            rounds = law.rounds(t_max) if batch_size == 1 else max_rounds_table(law, t_max, batch_size)
            for u in _nodes(lo, b):
                extra = _catch_up(lo, law, batch_size) if _first(u) else 0.0
                for t in widths:
                    graph.add_edge(u, (hi.name, t, MIDDLE), w=w + extra, g=rounds[t])
    for c in order:
        for b, law, runs in _batches(c, target.name, acceptance, curves, widths, shapes):
            g = 1.0 / law.mean if horizon is None else _target_rounds(law, horizon, batch_size) / horizon
            # one sequence's tokens per target round, as the latency model reports it
            tokens = 1.0 / g if horizon is not None and batch_size == 1 else law.mean
            w = _drafting(c, b, runs) + c.proposal + pass_cost(target.cost, b, runs, c.n_min)
            for u in _nodes(c, b):
                extra = _catch_up(c, law, batch_size) if _first(u) else 0.0
                graph.add_edge(u, TARGET, w=w + extra, g=g, tokens=tokens)
    # a tree only ever enters from the source; its node exists when some verifier can take it
    for c in order:
        for shape in shapes:
            if (c.name, shape) in graph:
                graph.add_edge(SOURCE, (c.name, shape), w=draft_cost(c.cost, c.lookup, shape), g=1.0)
    return graph


def _nodes(c: Candidate, width: Width) -> list[tuple]:
    """The nodes of ``c`` handing up ``width``: as level 0 ``(name, width)``, and for a chain also
    as a middle level ``(name, width, MIDDLE)`` (a tree is only ever level 0's). The two differ in
    what a round costs beside its passes (:func:`_catch_up`)."""
    if isinstance(width, TreeShape):
        return [(c.name, width)]
    return [(c.name, width), (c.name, width, MIDDLE)]


def _first(node: tuple) -> bool:
    """Whether ``node`` is level 0's."""
    return len(node) == 2


def _catch_up(c: Candidate, law: RoundLaw, batch_size: int) -> float:
    """Level 0's two-token pass after a round whose proposal was accepted whole (:func:`~.latency.catch_up`)."""
    return catch_up(Level(c.cost, lookup=c.lookup), law, batch_size)


def _drafting(drafter: Candidate, width: Width, runs: RunLengths | None) -> float:
    """The passes of a level-0 ``drafter`` that stops on its confidence, asked for ``width``
    tokens: E[min(L + 1, width)] c(1), L measured against this verifier (0 for any other drafter,
    whose drafting is priced on its edge from the source). Such a node only ever enters from the
    source, so the sum is level 0's C_0 of the latency model."""
    if not drafter.stops or runs is None:
        return 0.0
    return draft_cost(drafter.cost, drafter.lookup, width, runs)


def _target_rounds(law: RoundLaw, horizon: int, batch_size: int) -> float:
    """The expected target rounds of a generation of ``horizon`` tokens: m(L), or at batch size b
    the expected most rounds of b sequences (every round priced at the full batch: an upper bound
    of :func:`~.latency.batch_latency`, which prices the last rounds at the sequences still going)."""
    return law.rounds(horizon)[horizon] if batch_size == 1 else expected_max_rounds(law, horizon, batch_size)


def _labels(graph: nx.DiGraph, top_k: int, depth_cap: int, bit: Mapping[str, int], by_depth: bool) -> list[tuple[float, int, int, tuple]]:
    """The labels reaching the target, in one pass in topological order.

    A label is (D, depth, required-mask, path), path = ((name, width), ...); each node keeps the
    ``top_k`` smallest D per group. Labels of different depth (under a cap, ``by_depth``) or
    different sets of required models (``bit``) are not comparable, so each group keeps its own.
    """
    labels: dict[object, list[tuple[float, int, int, tuple]]] = {SOURCE: [(0.0, 0, 0, ())]}
    for v in nx.topological_sort(graph):
        if v == SOURCE:
            continue
        found = []
        for u, _, e in graph.in_edges(v, data=True):
            for d, depth, mask, path in labels.get(u, []):
                if v == TARGET:
                    found.append((e["g"] * (d + e["w"]), depth, mask, path))
                elif depth + 1 <= depth_cap:
                    found.append((e["g"] * (d + e["w"]), depth + 1, mask | bit.get(v[0], 0), path + (v,)))
        labels[v] = _keep(found, top_k, by_depth)
    return labels[TARGET]


def _keep(found: list, k: int, by_depth: bool) -> list:
    groups: dict[tuple, list] = {}
    for label in found:
        groups.setdefault((label[1] if by_depth else 0, label[2]), []).append(label)
    return [x for group in groups.values() for x in heapq.nsmallest(k, group, key=lambda x: x[0])]


def _plan(path: tuple, target: Candidate, ms: float, graph: nx.DiGraph) -> Plan:
    chain = tuple(v[0] for v in path) + (target.name,)
    widths = tuple(v[1] for v in path)
    tokens = graph.edges[path[-1], TARGET]["tokens"] if path else 1.0
    return Plan(chain, widths, Prediction(ms, tokens, target.cost(1) / ms))


def _singles(order: Sequence[Candidate], target: Candidate, graph: nx.DiGraph) -> list[Plan]:
    """For every drafter with acceptance against the target, its best one-drafter plan: over its
    chain widths and, where it has a sibling curve against the target, its tree shapes too (the
    best this drafter alone can do)."""
    out = []
    batches = [u for u in graph.predecessors(TARGET) if u != SOURCE and _first(u)]  # per drafter: widths, then trees
    for c in order:
        mine = [u for u in batches if u[0] == c.name]
        if not mine:
            continue

        def ms(u: tuple) -> float:
            e = graph.edges[u, TARGET]
            return e["g"] * (graph.edges[SOURCE, u]["w"] + e["w"])

        best = min(mine, key=ms)  # the first of equal ones (a chain before a tree), as a strict < scan would keep
        out.append(_plan((best,), target, ms(best), graph))
    return sorted(out, key=lambda p: p.prediction.ms_per_token)
