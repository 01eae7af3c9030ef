"""Draft trees (RSD) in the planner: the tree round law, its Monte Carlo cross-check, the solver
against exhaustive enumeration, the planner API, and plans with trees stored and printed."""

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from hsd_planner.cli import cli
from hsd_planner.errors import SolverError, StoreError
from hsd_planner.plan import (
    Profile,
    SolveConfig,
    predict,
    predict_over,
    rounds_per_round,
    solve,
    tokens_per_round,
    widths_from_json,
    widths_to_json,
)
from hsd_planner.plan.latency import Level, draft_cost, hierarchy_latency
from hsd_planner.plan.rounds import RoundLaw, RunLengths, SiblingCurve
from hsd_planner.plan.simulate import simulate
from hsd_planner.plan.solver import MAX_BRANCHING, SOURCE, Candidate, solve_graph, tree_shapes
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.store.exchange import import_document, read_document
from hsd_planner.store.plans import stored_widths
from hsd_planner.store.records import RankedPlan
from hsd_planner.store.schema import PlanRow
from hsd_runtime.terms.shape import TreeShape
from tests.test_latency_solver import _brute_force, _instance, _random_levels, affine

# --- the tree round law ---------------------------------------------------------------------------


def test_sibling_curve_is_clamped_monotone_and_flat_past_its_end():
    curve = SiblingCurve([0.5, 0.45, 1.2, -1.0])
    assert curve.values == (0.5, 0.5, 1.0, 1.0)
    assert curve.at(1) == 0.5 and curve.at(3) == 1.0 and curve.at(40) == 1.0
    assert SiblingCurve([0.3, 0.6]).at(9) == 0.6
    with pytest.raises(ValueError):
        SiblingCurve([])
    with pytest.raises(ValueError):
        curve.at(0)


def test_tree_round_law_by_hand():
    # 3x2: depth 1 is reached with A(3) = 0.8, depth 2 then with A(2) = 0.7
    law = RoundLaw.tree(TreeShape((3, 2)), SiblingCurve([0.5, 0.7, 0.8]))
    assert law.accepted == pytest.approx((1.0, 0.8, 0.56))
    assert law.tokens() == pytest.approx([0.0, 0.2, 0.24, 0.56])
    assert law.mean == pytest.approx(2.36)
    # m(t): rounds until t tokens; m(1) = 1, m(2) = 1 + P(X = 1) m(1)
    assert law.rounds(2) == pytest.approx([0.0, 1.0, 1.2])


def test_tree_costs_and_latency_by_hand():
    c0, c1 = (lambda n: 1.0 + 0.5 * n), (lambda n: 10.0 + n)
    shape = TreeShape((3, 2))  # frontiers 1, 3, 6; N = 9
    assert draft_cost(c0, False, shape) == pytest.approx(c0(1) + c0(3))
    levels = [Level(c0), Level(c1, siblings=SiblingCurve([0.5, 0.7, 0.8]))]
    p = hierarchy_latency(levels, [shape])
    # after a round that took the whole depth (0.8 * 0.7), level 0 feeds two tokens: c0(2), not c0(1)
    assert p.ms_per_token == pytest.approx((4.0 + 0.56 * (c0(2) - c0(1)) + c1(10)) / 2.36)
    assert p.mean_accepted_length == pytest.approx(2.36)


def test_tree_under_a_middle_level_by_hand():
    # the middle level verifies a 2-sibling tree (X = 1 or 2) until it holds 2 tokens:
    # m(2) = 1 + P(X = 1) = 1.4 rounds; then the target verifies that chain of 2 (alpha 0.5)
    cd, cm, ct = (lambda n: 1.0), (lambda n: 5.0 + n), (lambda n: 30.0 + n)
    levels = [Level(cd), Level(cm, siblings=SiblingCurve([0.3, 0.6])), Level(ct, RunLengths.iid(0.5))]
    p = hierarchy_latency(levels, [TreeShape((2,)), 2])
    assert p.ms_per_token == pytest.approx((1.4 * (cd(1) + cm(3)) + ct(3)) / 1.75)


@pytest.mark.parametrize("horizon", [None, 5, 33])
def test_a_tree_of_single_children_is_the_chain(horizon):
    rng = random.Random(horizon or 0)
    for _ in range(10):
        levels = _random_levels(rng, rng.randint(1, 3), empirical=False)
        levels[0] = dataclasses.replace(levels[0], lookup=False)
        a = levels[1].runs.alpha
        t = rng.randint(1, 6)
        widths = [t] + [rng.randint(1, 5) for _ in levels[2:]]
        chain = hierarchy_latency(levels, widths, horizon)
        levels[1] = dataclasses.replace(levels[1], runs=None, siblings=SiblingCurve([a, 0.99]))
        tree = hierarchy_latency(levels, [TreeShape((1,) * t), *widths[1:]], horizon)
        assert tree.ms_per_token == pytest.approx(chain.ms_per_token, rel=1e-12)
        assert tree.mean_accepted_length == pytest.approx(chain.mean_accepted_length, rel=1e-12)


def test_hierarchies_the_model_cannot_describe():
    tree, curve = TreeShape((2, 1)), SiblingCurve([0.5, 0.7])
    d, v = Level(lambda n: 1.0), Level(lambda n: 10.0, RunLengths.iid(0.5), siblings=curve)
    with pytest.raises(ValueError, match="lookup drafter drafts chains only"):
        hierarchy_latency([dataclasses.replace(d, lookup=True), v], [tree])
    with pytest.raises(ValueError, match="sibling-acceptance curve"):
        hierarchy_latency([d, Level(lambda n: 10.0, RunLengths.iid(0.5))], [tree])
    with pytest.raises(ValueError, match="only level 0 drafts a tree"):
        hierarchy_latency([d, v, v], [2, tree])
    with pytest.raises(ValueError, match="only level 0 drafts a tree"):
        simulate([d, v, v], [2, tree], rounds=10)


# --- Monte Carlo cross-check --------------------------------------------------------------------------


def _random_curve(rng: random.Random, alpha: float | None = None) -> SiblingCurve:
    """A(1) = alpha, approaching 1 geometrically with more siblings (8 values, like a profile)."""
    a, r = alpha if alpha is not None else rng.uniform(0.05, 0.9), rng.uniform(0.3, 0.95)
    return SiblingCurve([1 - (1 - a) * r ** (k - 1) for k in range(1, 9)])


def _tree_levels(rng: random.Random, depth: int):
    """Random levels whose level 0 drafts a random tree (any branching, not only the solver's family)."""
    levels = _random_levels(rng, depth, empirical=True)
    levels[0] = dataclasses.replace(levels[0], lookup=False)
    levels[1] = dataclasses.replace(levels[1], siblings=_random_curve(rng, levels[1].runs.alpha))
    shape = TreeShape(tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 4))))
    return levels, [shape] + [rng.randint(1, 6) for _ in range(depth - 1)]


def test_tree_formula_agrees_with_monte_carlo():
    rng = random.Random(2024)
    for case in range(6):
        levels, widths = _tree_levels(rng, rng.randint(1, 3))
        predicted = hierarchy_latency(levels, widths)
        ms, tokens = simulate(levels, widths, rounds=40_000, seed=case)
        assert ms == pytest.approx(predicted.ms_per_token, rel=0.01), (case, [str(w) for w in widths])
        assert tokens == pytest.approx(predicted.mean_accepted_length, rel=0.01)


@pytest.mark.parametrize("horizon", [1, 7, 48])
def test_finite_generation_with_trees_agrees_with_monte_carlo(horizon):
    rng = random.Random(31 + horizon)
    for case in range(4):
        levels, widths = _tree_levels(rng, rng.randint(1, 2))
        predicted = hierarchy_latency(levels, widths, horizon)
        ms, tokens = simulate(levels, widths, rounds=40_000 // horizon + 2000, seed=case, horizon=horizon)
        assert ms == pytest.approx(predicted.ms_per_token, rel=0.01), (case, [str(w) for w in widths])
        assert tokens == pytest.approx(predicted.mean_accepted_length, rel=0.01)


# --- the solver -------------------------------------------------------------------------------------


def _family(t_max: int, budget: int) -> set[tuple[int, ...]]:
    """The tree family written out from its definition, by exhaustive product."""
    out = set()
    for depth in range(1, t_max + 1):
        for b in itertools.product(range(1, MAX_BRANCHING + 1), repeat=depth):
            nodes = sum(itertools.accumulate(b, lambda x, y: x * y))
            if b[0] >= 2 and all(x >= y for x, y in itertools.pairwise(b)) and nodes <= budget:
                out.add(b)
    return out


@pytest.mark.parametrize("t_max, budget", [(1, 2), (2, 6), (3, 16), (5, 16), (8, 30)])
def test_tree_family_is_exactly_its_definition(t_max, budget):
    shapes = tree_shapes(t_max, budget)
    assert len(shapes) == len(set(shapes))
    assert {s.branching for s in shapes} == _family(t_max, budget)
    assert [s.depth for s in shapes] == sorted(s.depth for s in shapes)


def _siblings(rng: random.Random, cands, target, acc) -> dict:
    """Curves for most ordered pairs (some where no run lengths were measured)."""
    names = [c.name for c in cands] + [target.name]
    out = {p: _random_curve(rng) for p in itertools.permutations(names, 2) if p[0] != target.name and rng.random() < 0.7}
    return out


def _enumerate(cands, target, acc, sib, t_max, budget):
    """Every hierarchy with chains, widths and (for a non-lookup first drafter) trees, by brute force."""
    order = sorted(cands, key=lambda c: c.cost(1))
    shapes = [TreeShape(b) for b in _family(t_max, budget)]
    out = [(target.cost(1), (target.name,), ())]
    for r in range(1, len(order) + 1):
        for subset in itertools.combinations(order, r):
            names = tuple(c.name for c in subset) + (target.name,)
            pairs = list(zip(names, names[1:]))
            if any(p not in acc for p in pairs[1:]):
                continue
            firsts: list = list(range(1, t_max + 1)) if pairs[0] in acc else []
            if not subset[0].lookup and pairs[0] in sib:
                firsts += shapes
            levels = [Level(subset[0].cost, lookup=subset[0].lookup, proposal=subset[0].proposal)]
            levels += [Level(c.cost, acc.get(p), siblings=sib.get(p), proposal=c.proposal) for c, p in zip([*subset[1:], target], pairs)]
            for first in firsts:
                for rest in itertools.product(range(1, t_max + 1), repeat=r - 1):
                    widths = (first, *rest)
                    out.append((hierarchy_latency(levels, widths).ms_per_token, names, widths))
    return sorted(out, key=lambda x: x[0])


@pytest.mark.parametrize("seed", range(0, 120, 20))
def test_solver_with_trees_equals_brute_force(seed):
    for offset in range(20):
        rng = random.Random(1000 + seed + offset)
        cands, target, acc = _instance(rng, rng.randint(1, 4), empirical=bool(offset % 2))
        sib = _siblings(rng, cands, target, acc)
        t_max, budget = rng.randint(1, 3), rng.randint(2, 12)
        sol = solve_graph(cands, target, acc, SolveConfig(t_max=t_max, top_k=3, tree_budget=budget), siblings=sib)
        every = _enumerate(cands, target, acc, sib, t_max, budget)
        ms, chain, widths = every[0]
        assert sol.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9)
        assert (sol.best.chain, sol.best.widths) == (chain, widths)
        assert [p.prediction.ms_per_token for p in sol.top] == pytest.approx([x[0] for x in every[:3]], rel=1e-9)
        # singles: per drafter, its best one-drafter plan over widths and trees
        for single in sol.singles:
            own = [x for x in every if len(x[1]) == 2 and x[1][0] == single.chain[0]]
            assert single.prediction.ms_per_token == pytest.approx(own[0][0], rel=1e-9) and single.widths == own[0][2]


def test_trees_win_where_siblings_pay_and_chain_only_solves_are_unchanged():
    rng = random.Random(77)
    won = 0
    for _ in range(30):
        cands, target, acc = _instance(rng, rng.randint(1, 4), empirical=True)
        sib = _siblings(rng, cands, target, acc)
        chain_only = solve_graph(cands, target, acc, SolveConfig(t_max=4, top_k=4))
        for other in (
            solve_graph(cands, target, acc, SolveConfig(t_max=4, top_k=4, trees=False), siblings=sib),
            solve_graph(cands, target, acc, SolveConfig(t_max=4, top_k=4), siblings={}),
        ):
            for a, b in zip(chain_only.top + chain_only.singles, other.top + other.singles, strict=True):
                assert (a.chain, a.widths, a.prediction) == (b.chain, b.widths, b.prediction)
        assert not any(isinstance(w, TreeShape) for p in chain_only.top + chain_only.singles for w in p.widths)
        ms, chain, widths = _brute_force(cands, target, acc, 4)  # the chain-only enumeration
        assert (chain_only.best.chain, chain_only.best.widths) == (chain, widths)
        assert chain_only.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9)
        with_trees = solve_graph(cands, target, acc, SolveConfig(t_max=4, top_k=4), siblings=sib)
        assert with_trees.best.prediction.ms_per_token <= chain_only.best.prediction.ms_per_token * (1 + 1e-12)
        won += any(isinstance(w, TreeShape) for w in with_trees.best.widths)
    assert won >= 3  # random sibling curves often make a tree the best first level


def test_hand_built_tree_optimum():
    # chains are never accepted (A(1) = 0) but two siblings always are: the deepest all-branching
    # tree within 16 nodes is 2x2x2 (14 nodes), 4 tokens a round from a free drafter
    free, target = Candidate("free", affine(0.0, 0)), Candidate("t", affine(10.0, 0))
    sol = solve_graph(
        [free], target, {("free", "t"): RunLengths.iid(0.0)}, SolveConfig(t_max=3), siblings={("free", "t"): SiblingCurve([0.0, 1.0])}
    )
    assert sol.best.widths == (TreeShape((2, 2, 2)),) and sol.best.label == "free[2x2x2] -> t"
    assert sol.best.prediction.ms_per_token == pytest.approx(2.5) and sol.best.prediction.mean_accepted_length == pytest.approx(4.0)
    assert sol.best_single == sol.best
    # a budget of 13 leaves no room for it: 2 levels of 2x2 at best, 3 tokens a round
    small = solve_graph(
        [free],
        target,
        {("free", "t"): RunLengths.iid(0.0)},
        SolveConfig(t_max=3, tree_budget=13),
        siblings={("free", "t"): SiblingCurve([0.0, 1.0])},
    )
    assert small.best.prediction.mean_accepted_length == pytest.approx(3.0)
    assert all(w.nodes <= 13 for p in small.top for w in p.widths if isinstance(w, TreeShape))


def test_lookup_drafters_draft_no_trees_and_trees_enter_only_from_the_source():
    ngram, mid, target = Candidate("ngram", affine(0.01, 0), lookup=True), Candidate("mid", affine(3, 0.1)), Candidate("t", affine(30, 1))
    acc = {(a, b): RunLengths.iid(0.6) for a, b in [("ngram", "mid"), ("ngram", "t"), ("mid", "t")]}
    sib = {pair: SiblingCurve([0.6, 0.95, 0.99]) for pair in acc}
    sol = solve_graph([ngram, mid], target, acc, SolveConfig(t_max=4, top_k=10), siblings=sib)
    trees = [v for v in sol.graph if isinstance(v, tuple) and isinstance(v[1], TreeShape)]
    assert trees and all(name == "mid" for name, _ in trees)
    assert all(list(sol.graph.predecessors(v)) == [SOURCE] for v in trees)
    assert any(isinstance(p.widths[0], TreeShape) for p in sol.top)


@pytest.mark.parametrize("budget", [1, 65])
def test_tree_budget_out_of_range(budget):
    args = dict(
        candidates=[Candidate("d", affine(1, 0))], target=Candidate("t", affine(10, 0)), acceptance={("d", "t"): RunLengths.iid(0.5)}
    )
    with pytest.raises(ValidationError, match="tree_budget"):
        solve_graph(**args, config=SolveConfig(tree_budget=budget))


# --- the planner API ------------------------------------------------------------------------------


PROFILE = {
    "target": "big",
    "models": [
        {"name": "ngram", "lookup": True, "latency": {64: {1: 0.05, 8: 0.05}}},
        {"name": "small", "latency": {64: {1: 4.0, 8: 4.4, 32: 6.0}}},
        {"name": "big", "latency": {64: {1: 30.0, 8: 33.0, 32: 40.0}}},
    ],
    "acceptance": [
        {"drafter": "ngram", "verifier": "small", "alpha": 0.3},
        {"drafter": "ngram", "verifier": "big", "alpha": 0.3, "siblings": [0.3, 0.5]},
        {"drafter": "small", "verifier": "big", "alpha": 0.5, "siblings": [0.5, 0.75, 0.85, 0.9, 0.92, 0.93, 0.94, 0.94]},
    ],
}


def test_a_middle_level_runs_the_renewal_of_its_round_law_per_round_above():
    """``rounds_per_round`` gives what the latency model prices a middle level by: m(T_1) rounds
    of ``small`` over the lookup's batch of 3 to hand up 4 tokens; nothing for level 0 and the target."""
    profile = Profile.model_validate(PROFILE)
    # alpha 0.3, a batch of 3: P(X = 1..4) = 0.7, 0.21, 0.063, 0.027; m(1) = 1, m(2) = 1.7, m(3) = 2.4,
    # m(4) = 1 + 0.7 m(3) + 0.21 m(2) + 0.063 m(1) = 3.1
    assert rounds_per_round(profile, ["ngram", "small", "big"], [3, 4], "iid") == [None, pytest.approx(3.1), None]
    assert rounds_per_round(profile, ["small", "big"], [4], "iid") == [None, None]


def test_planner_solves_and_predicts_trees():
    profile = Profile.model_validate(PROFILE)
    assert set(profile.siblings_curves()) == {("ngram", "big"), ("small", "big")}
    sol = solve(profile, SolveConfig(t_max=6, acceptance="iid", context_len=64))
    best = sol.best
    assert isinstance(best.widths[0], TreeShape) and best.chain[0] == "small"
    again = predict(profile, list(best.chain), list(best.widths), acceptance="iid", context_len=64)
    assert again.ms_per_token == pytest.approx(best.prediction.ms_per_token)
    assert again.mean_accepted_length == pytest.approx(best.prediction.mean_accepted_length)
    over = predict_over(profile, list(best.chain), list(best.widths), "iid", [64, 64])
    assert over.ms_per_token == pytest.approx(again.ms_per_token)
    assert tokens_per_round(profile, best.chain, best.widths, "iid") == [None, pytest.approx(best.prediction.mean_accepted_length)]
    chains = solve(profile, SolveConfig(t_max=6, acceptance="iid", context_len=64, trees=False))
    assert not any(isinstance(w, TreeShape) for p in chains.top + chains.singles for w in p.widths)
    assert chains.best.prediction.ms_per_token > best.prediction.ms_per_token
    small = solve(profile, SolveConfig(t_max=6, acceptance="iid", context_len=64, tree_budget=4, top_k=20))
    assert all(w.nodes <= 4 for p in small.top for w in p.widths if isinstance(w, TreeShape))


@pytest.mark.parametrize(
    "chain, widths, fragment",
    [
        (["small", "big"], ["2x1"], None),
        (["ngram", "small", "big"], ["2x1", 2], "ngram is a lookup drafter and drafts chains only"),
        (["ngram", "small", "big"], [2, "2x1"], "only the first drafter drafts a tree"),
        (["small", "big"], ["2x1", 2], "needs 1 widths, got 2"),
    ],
)
def test_predict_tree_errors(chain, widths, fragment):
    from hsd_runtime.terms.shape import parse_width

    profile = Profile.model_validate(PROFILE)
    widths = [parse_width(w) if isinstance(w, str) else w for w in widths]
    if fragment is None:
        predict(profile, chain, widths)
        # without the curve the pair plans chains only, and a tree is refused with the remedy
        stripped = Profile.model_validate({**PROFILE, "acceptance": [{**a, "siblings": None} for a in PROFILE["acceptance"]]})
        with pytest.raises(SolverError, match=r"^no sibling-acceptance curve for small verified by big; profile them again to plan trees$"):
            predict(stripped, chain, widths)
        return
    with pytest.raises(SolverError, match=fragment):
        predict(profile, chain, widths)


@pytest.mark.parametrize("budget", [1, 65])
def test_solve_config_bounds_the_tree_budget(budget):
    assert SolveConfig().trees is True and SolveConfig().tree_budget == 16
    with pytest.raises(ValidationError):
        SolveConfig(tree_budget=budget)


# --- stored and printed ---------------------------------------------------------------------------------

CURATED = Path(__file__).resolve().parents[1] / "profiles" / "amd-epyc-avx512bf16-smollm2-builtin.json"
DRAFT, TARGET = "smollm2-135m:layers=8", "smollm2-135m"


def test_widths_round_trip_as_json():
    widths = [TreeShape((3, 2, 1)), 4, 2]
    stored = json.loads(json.dumps(widths_to_json(widths)))
    assert stored == ["3x2x1", 4, 2] and widths_from_json(stored) == widths
    with pytest.raises(StoreError, match="cannot be read back"):
        stored_widths(["3y2"])


@pytest.fixture
def curated_db(tmp_path, monkeypatch):
    """The curated profile in a database file, read back with a generous sibling curve for the
    draft -> target pair (the store itself does not carry curves here)."""
    from hsd_planner.solving import runner as solves

    db = open_db(str(tmp_path / "curated.db"))
    import_document(db, read_document(CURATED))
    real = solves.load_profile

    def with_curve(*args, **kwargs):
        profile, source = real(*args, **kwargs)
        acceptance = [
            a.model_copy(update={"siblings": [0.9, 0.97, 0.99]}) if (a.drafter, a.verifier) == (DRAFT, TARGET) else a
            for a in profile.acceptance
        ]
        return profile.model_copy(update={"acceptance": acceptance}), source

    monkeypatch.setattr(solves, "load_profile", with_curve)
    return db, tmp_path / "curated.db"


def test_stored_tree_plans_round_trip(curated_db):
    db, _ = curated_db
    report = solve_and_store(db, target=TARGET, config=SolveConfig(top_k=3))
    best = report.best.plan
    assert isinstance(best.widths[0], TreeShape) and best.chain[0] == DRAFT
    from sqlalchemy.orm import Session

    with Session(db) as s:
        row = s.get(PlanRow, report.best.id)
        assert row.widths[0] == str(best.widths[0])
        assert tuple(widths_from_json(row.widths)) == best.widths
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["widths"] == widths_to_json(best.widths) and as_json["plans"][0]["widths"][0] == str(best.widths[0])
    # the bootstrap resamples carry no sibling curve: a tree plan gets no interval rather than a false one
    assert report.best.speedup_interval is None
    chains = [p for p in report.plans if not any(isinstance(w, TreeShape) for w in p.plan.widths) and p.plan.widths]
    assert chains and all(p.speedup_interval is not None for p in chains)


def test_plan_report_prints_trees():
    tree = TreeShape((2, 2))
    report = RankedPlan.of(1, 1, (_tree_plan(tree), "best", None, None))
    assert report.plan.label == "d[2x2] -> t" and report.to_dict()["widths"] == ["2x2"]


def _tree_plan(tree: TreeShape):
    """The plan of a free drafter whose second sibling is always accepted, its first never."""
    sol = solve_graph(
        [Candidate("d", affine(0.0, 0))],
        Candidate("t", affine(10.0, 0)),
        {("d", "t"): RunLengths.iid(0.0)},
        SolveConfig(t_max=2, tree_budget=tree.nodes),
        siblings={("d", "t"): SiblingCurve([0.0, 1.0])},
    )
    assert sol.best.widths == (tree,)
    return sol.best


def test_solve_command_prints_trees(curated_db):
    _, path = curated_db
    fingerprint = json.loads(CURATED.read_text())["hardware"][0]["fingerprint"]
    args = ["solve", "--db", str(path), "--hardware", fingerprint, "--target", TARGET]
    result = CliRunner().invoke(cli, [*args, "--json", "--tree-budget", "8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    first = report["widths"][0]
    assert isinstance(first, str) and TreeShape(tuple(int(b) for b in first.split("x"))).nodes <= 8
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0 and f"{DRAFT}[" in text.output and "x" in text.output.split(f"{DRAFT}[", 1)[1].split("]")[0]
    chains = json.loads(CliRunner().invoke(cli, [*args, "--json", "--no-trees"]).stdout)
    assert all(isinstance(w, int) for p in chains["plans"] for w in p["widths"])
    bad = CliRunner().invoke(cli, [*args, "--tree-budget", "1"])
    assert bad.exit_code == 2 and "--tree-budget" in bad.output
