"""The latency model, its Monte Carlo cross-check, and the exact solver against brute force."""

import dataclasses
import itertools
import random

import pytest
from pydantic import ValidationError

from hsd_planner.errors import SolverError
from hsd_planner.plan import SolveConfig
from hsd_planner.plan.latency import Level, RoundLaw, RunLengths, hierarchy_latency
from hsd_planner.plan.simulate import simulate
from hsd_planner.plan.solver import Candidate, solve_graph


def affine(c0: float, slope: float):
    return lambda n: c0 + slope * (n - 1)


def test_single_drafter_equals_leviathan_closed_form():
    for a, t, c0, c1 in [(0.6, 4, 2.0, 30.0), (0.9, 7, 5.0, 33.0), (0.0, 3, 1.0, 10.0), (0.3, 1, 0.5, 12.0)]:
        got = hierarchy_latency([Level(affine(c0, 0)), Level(affine(c1, 0), RunLengths.iid(a))], [t]).ms_per_token
        expected = (t * c0 + c1) * (1 - a) / (1 - a ** (t + 1))
        assert got == pytest.approx(expected, rel=1e-12)
        # a proposal's own cost p (a steered drafter's projection) is paid once a round, not once a token
        steered = hierarchy_latency([Level(affine(c0, 0), proposal=0.7), Level(affine(c1, 0), RunLengths.iid(a))], [t]).ms_per_token
        assert steered == pytest.approx((t * c0 + 0.7 + c1) * (1 - a) / (1 - a ** (t + 1)), rel=1e-12)


def test_host_work_is_paid_once_a_pass_of_each_level():
    """A profile's host work per pass (h0 beside each drafting pass, h1 beside each verification)
    enters Leviathan's formula as part of each pass's cost, and the solver's edges with it."""
    from hsd_planner.plan import Profile, predict

    a, t, c0, c1, h0, h1 = 0.7, 4, 2.0, 30.0, 0.4, 1.5
    profile = Profile(
        target="big",
        models=[
            {"name": "small", "latency": {"points": {64: {1: c0, 8: c0}}, "host_ms": h0}},
            {"name": "big", "latency": {"points": {64: {1: c1, 8: c1}}, "host_ms": h1}},
        ],
        acceptance=[{"drafter": "small", "verifier": "big", "alpha": a}],
    )
    assert profile.cost("big", 64)(1) == pytest.approx(c1 + h1)
    got = predict(profile, ["small", "big"], [t], acceptance="iid", context_len=64).ms_per_token
    assert got == pytest.approx((t * (c0 + h0) + c1 + h1) * (1 - a) / (1 - a ** (t + 1)), rel=1e-12)
    assert profile.model("big").latency[1].host_ms == h1


def test_expected_rounds_by_hand():
    # b = 1, always accepted: every round yields 2 tokens; 5 tokens take 3 rounds
    assert RoundLaw.chain(RunLengths.iid(1.0), 1).rounds(5)[5] == pytest.approx(3.0)
    # never accepted: one token per round
    assert RoundLaw.chain(RunLengths.iid(0.0), 4).rounds(5)[5] == pytest.approx(5.0)


def _random_runs(rng: random.Random, empirical: bool) -> RunLengths:
    a = rng.uniform(0.1, 0.95)
    if not empirical:
        return RunLengths.iid(a)
    # bursty: a run continues with a probability that grows with its length
    s = [1.0]
    for g in range(1, 65):
        s.append(s[-1] * min(0.99, a + 0.02 * g))
    # as a decoder visits starts: per width b, a shorter-lived distribution (some widths unknown)
    visited = [None if rng.random() < 0.2 else [x * 0.8 ** min(g, 1) for g, x in enumerate(s[: b + 1])] for b in range(1, 7)]
    return RunLengths(s, visited)


def test_width_tables_are_read_per_width():
    runs = RunLengths([1.0, 0.9, 0.8], [[1.0, 0.5], None, [1.0, 0.4, 0.2, 0.1]])
    assert runs.alpha == 0.9  # over every start
    assert RoundLaw.chain(runs, 1).mean == pytest.approx(1.5)
    assert RoundLaw.chain(runs, 2).mean == pytest.approx(1.0 + 0.9 + 0.8)  # no table: every start
    assert RoundLaw.chain(runs, 3).mean == pytest.approx(1.7)
    assert RoundLaw.chain(runs, 5).mean == pytest.approx(1.7 + 0.05 + 0.025)  # widest table, geometric tail


def _proposal(rng: random.Random) -> float:
    """A proposal's own cost for some models (a steered drafter's projection), none for the rest."""
    return rng.uniform(0.1, 4.0) if rng.random() < 0.4 else 0.0


def _random_levels(rng, depth, empirical, proposals: random.Random | None = None):
    """Random levels; with ``proposals``, some drafters get a proposal cost drawn from it."""
    costs = [_proposal(proposals) if proposals else 0.0 for _ in range(depth)] + [0.0]
    levels = [Level(affine(rng.uniform(0.05, 3), rng.uniform(0, 0.2)), lookup=rng.random() < 0.3, proposal=costs[0])]
    for k in range(1, depth + 1):
        levels.append(Level(affine(rng.uniform(3, 40) * k, rng.uniform(0, 1)), _random_runs(rng, empirical), proposal=costs[k]))
    return levels


@pytest.mark.parametrize("proposals", [False, True], ids=["passes", "with-proposal-costs"])
@pytest.mark.parametrize("empirical", [False, True], ids=["iid", "empirical"])
def test_formula_agrees_with_monte_carlo(empirical, proposals):
    rng = random.Random(7 if empirical else 3)
    for case in range(6):
        depth = rng.randint(1, 3)
        levels = _random_levels(rng, depth, empirical, random.Random(case) if proposals else None)
        widths = [rng.randint(1, 6) for _ in range(depth)]
        predicted = hierarchy_latency(levels, widths)
        ms, tokens = simulate(levels, widths, rounds=40_000, seed=case)
        assert ms == pytest.approx(predicted.ms_per_token, rel=0.01), (case, widths)
        assert tokens == pytest.approx(predicted.mean_accepted_length, rel=0.01)


def _instance(rng: random.Random, n: int, empirical: bool, proposals: random.Random | None = None):
    """Random candidates, target and acceptance; with ``proposals``, some candidates get a proposal cost."""
    cands = [
        Candidate(f"m{i}", affine(rng.uniform(0.05, 20), rng.uniform(0, 0.5)), lookup=(i == 0 and rng.random() < 0.5)) for i in range(n)
    ]
    if proposals is not None:
        cands = [dataclasses.replace(c, proposal=_proposal(proposals)) for c in cands]
    target = Candidate("target", affine(rng.uniform(25, 40), rng.uniform(0, 1)))
    acc = {}
    names = [c.name for c in cands] + ["target"]
    for i, j in itertools.permutations(names, 2):
        if i != "target" and rng.random() < 0.9:
            acc[(i, j)] = _random_runs(rng, empirical)
    acc.setdefault((cands[0].name, "target"), _random_runs(rng, empirical))
    return cands, target, acc


def _brute_force(cands, target, acc, t_max, max_depth=None, require=(), horizon=None):
    order = sorted(cands, key=lambda c: c.cost(1))
    best = (target.cost(1), (target.name,), ()) if not require else (float("inf"), None, None)
    for r in range(1, len(order) + 1 if max_depth is None else max_depth + 1):
        for subset in itertools.combinations(order, r):
            names = [c.name for c in subset] + [target.name]
            if not set(require) <= set(names):
                continue
            pairs = list(zip(names, names[1:]))
            if any(p not in acc for p in pairs):
                continue
            levels = [Level(subset[0].cost, lookup=subset[0].lookup, proposal=subset[0].proposal)]
            levels += [Level(c.cost, acc[p], proposal=c.proposal) for c, p in zip([*subset[1:], target], pairs)]
            for widths in itertools.product(range(1, t_max + 1), repeat=r):
                ms = hierarchy_latency(levels, list(widths), horizon).ms_per_token
                if ms < best[0] - 1e-12:
                    best = (ms, tuple(names), widths)
    return best


@pytest.mark.parametrize("seed", range(0, 200, 25))
def test_solver_equals_brute_force(seed):
    for offset in range(25):
        rng = random.Random(seed + offset)
        n = rng.randint(1, 5 if offset % 5 == 0 else 4)
        t_max = rng.randint(1, 6 if offset % 5 == 0 else 4)
        cands, target, acc = _instance(rng, n, empirical=bool(offset % 2), proposals=random.Random(offset) if offset % 3 == 0 else None)
        sol = solve_graph(cands, target, acc, SolveConfig(t_max=t_max, top_k=3))
        ms, chain, widths = _brute_force(cands, target, acc, t_max)
        assert sol.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9)
        assert sol.best.chain == chain and sol.best.widths == widths


@pytest.mark.parametrize("horizon", [1, 5, 48])
def test_solver_at_a_finite_length_equals_brute_force(horizon):
    for offset in range(12):
        rng = random.Random(500 + offset)
        cands, target, acc = _instance(rng, rng.randint(1, 4), empirical=bool(offset % 2))
        t_max = rng.randint(1, 5)
        sol = solve_graph(cands, target, acc, SolveConfig(t_max=t_max, top_k=3, max_new_tokens=horizon))
        ms, chain, widths = _brute_force(cands, target, acc, t_max, horizon=horizon)
        assert sol.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9)
        assert sol.best.chain == chain and sol.best.widths == widths


def test_a_short_generation_is_planned_with_narrower_batches():
    # 9 tokens from rounds of up to T + 1: at T = 8 one round may finish them, but two rounds of
    # T = 4 cost fewer drafting passes than the long batches a steady state favours
    d, t = Candidate("d", lambda n: 1.0), Candidate("t", lambda n: 10.0)
    acc = {("d", "t"): RunLengths.iid(0.95)}
    steady = solve_graph([d], t, acc, SolveConfig(t_max=16)).best
    short = solve_graph([d], t, acc, SolveConfig(t_max=16, max_new_tokens=9)).best
    assert short.widths[0] < steady.widths[0]
    levels = [Level(d.cost), Level(t.cost, acc[("d", "t")])]
    assert short.prediction.ms_per_token == pytest.approx(hierarchy_latency(levels, short.widths, 9).ms_per_token)
    assert short.prediction.ms_per_token < hierarchy_latency(levels, steady.widths, 9).ms_per_token


def test_max_depth_is_respected_and_exact():
    rng = random.Random(99)
    for _ in range(20):
        cands, target, acc = _instance(rng, 4, empirical=False)
        sol = solve_graph(cands, target, acc, SolveConfig(t_max=4, max_depth=1))
        ms, _, _ = _brute_force(cands, target, acc, 4, max_depth=1)
        assert sol.best.depth <= 1 and sol.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9)


def test_required_models_are_in_every_plan_and_the_optimum_is_exact():
    rng = random.Random(123)
    for _ in range(25):
        cands, target, acc = _instance(rng, 4, empirical=True)
        require = tuple(c.name for c in rng.sample(cands, rng.randint(1, 2)))
        try:
            sol = solve_graph(cands, target, acc, SolveConfig(t_max=3, top_k=4, require=require))
        except SolverError:
            assert _brute_force(cands, target, acc, 3, require=require)[1] is None
            continue
        ms, chain, _ = _brute_force(cands, target, acc, 3, require=require)
        assert sol.best.prediction.ms_per_token == pytest.approx(ms, rel=1e-9) and sol.best.chain == chain
        assert all(set(require) <= set(p.chain) for p in sol.top)


def test_top_k_is_sorted_and_distinct():
    cands, target, acc = _instance(random.Random(5), 4, empirical=True)
    top = solve_graph(cands, target, acc, SolveConfig(t_max=5, top_k=6)).top
    assert len(top) == 6
    ms = [p.prediction.ms_per_token for p in top]
    assert ms == sorted(ms) and len({(p.chain, p.widths) for p in top}) == 6


def test_useless_drafter_never_hurts_and_zero_acceptance_gives_autoregressive():
    rng = random.Random(11)
    cands, target, acc = _instance(rng, 3, empirical=False)
    before = solve_graph(cands, target, acc, SolveConfig(t_max=4)).best.prediction.ms_per_token
    useless = Candidate("useless", affine(0.01, 0))
    acc2 = dict(acc) | {("useless", c.name): RunLengths.iid(0.0) for c in [*cands, target]}
    assert solve_graph([*cands, useless], target, acc2, SolveConfig(t_max=4)).best.prediction.ms_per_token <= before + 1e-12
    zero = {k: RunLengths.iid(0.0) for k in acc}
    sol = solve_graph(cands, target, zero, SolveConfig(t_max=4))
    assert sol.best.chain == (target.name,) and sol.best.widths == ()


def test_hand_built_optimum():
    # a free perfect drafter: the widest batch wins; per token, (c_K(t_max + 1)) / (t_max + 1)
    sol = solve_graph(
        [Candidate("free", affine(0.0, 0))], Candidate("t", affine(10.0, 0)), {("free", "t"): RunLengths.iid(1.0)}, SolveConfig(t_max=7)
    )
    assert sol.best.widths == (7,) and sol.best.prediction.ms_per_token == pytest.approx(10.0 / 8)
    assert sol.best.prediction.mean_accepted_length == pytest.approx(8.0)
    assert sol.best_single == sol.best and sol.autoregressive.prediction.ms_per_token == 10.0


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(acceptance={}), "no candidate has acceptance data against the target"),
        (dict(candidates=[]), "no drafter candidates"),
    ],
)
def test_solver_bad_input(kwargs, fragment):
    args = dict(
        candidates=[Candidate("d", affine(1, 0))], target=Candidate("t", affine(10, 0)), acceptance={("d", "t"): RunLengths.iid(0.5)}
    )
    with pytest.raises(SolverError, match=fragment):
        solve_graph(**(args | kwargs))


@pytest.mark.parametrize("options", [dict(t_max=0), dict(top_k=0), dict(max_depth=-1)])
def test_solve_options_are_checked_before_the_solver_runs(options):
    with pytest.raises(ValidationError):
        SolveConfig(**options)


@pytest.mark.parametrize("horizon", [1, 7, 48])
def test_finite_generation_formula_agrees_with_monte_carlo(horizon):
    rng = random.Random(11 + horizon)
    for case in range(4):
        depth = rng.randint(1, 2)
        levels = _random_levels(rng, depth, empirical=True)
        widths = [rng.randint(1, 8) for _ in range(depth)]
        predicted = hierarchy_latency(levels, widths, horizon)
        ms, tokens = simulate(levels, widths, rounds=40_000 // horizon + 2000, seed=case, horizon=horizon)
        assert ms == pytest.approx(predicted.ms_per_token, rel=0.01), (case, widths)
        assert tokens == pytest.approx(predicted.mean_accepted_length, rel=0.01)
        steady = hierarchy_latency(levels, widths)
        assert predicted.mean_accepted_length <= steady.mean_accepted_length + 1e-9  # the cut last round only loses


def test_finite_generation_of_one_round_plans():
    # every round commits b + 1 = 8 tokens: 48 tokens take exactly 6 rounds, 50 take 7
    sure = Level(lambda n: 10.0, RunLengths([1.0] * 65))
    levels = [Level(lambda n: 1.0, lookup=True), sure]
    assert hierarchy_latency(levels, [7], 48).mean_accepted_length == pytest.approx(8.0)
    assert hierarchy_latency(levels, [7], 50).mean_accepted_length == pytest.approx(50 / 7)


def test_a_lookup_that_often_proposes_nothing_pays_a_short_pass():
    """On a steep pass curve (llama.cpp on a CPU: 8 tokens cost about 5 one-token passes) a lookup
    that finds a match in a quarter of its rounds is priced by the passes it makes: one token when
    it proposes nothing. Priced at full width it looks slower than decoding alone; priced by its
    proposal lengths it is faster, and the solver picks it."""
    steep = lambda n: 30.0 * (1 + 0.6 * (n - 1))  # noqa: E731
    b = 4
    tables = [[1.0] + [0.25] * k for k in range(1, b + 1)]  # P_k(L >= l): a full block or nothing
    runs = [[1.0] + [0.25] * g for g in range(1, b + 1)]  # every proposed token accepted
    full = RunLengths([1.0, 0.25, 0.25, 0.25, 0.25, 0.0], runs)
    lengths = RunLengths([1.0, 0.25, 0.25, 0.25, 0.25, 0.0], runs, tables)
    lookup, target = Level(lambda n: 0.1, lookup=True), Level(steep, full)
    at_full = hierarchy_latency([lookup, target], [b]).ms_per_token
    priced = hierarchy_latency([lookup, dataclasses.replace(target, runs=lengths)], [b]).ms_per_token
    # E[X] = 1 + 4 * 0.25 = 2 tokens a round; the pass: c(5) = 102 always, or 0.75 c(1) + 0.25 c(5) = 48
    assert at_full == pytest.approx((0.1 + 102.0) / 2) and at_full > steep(1)
    assert priced == pytest.approx((0.1 + 0.75 * 30.0 + 0.25 * 102.0) / 2) and priced < steep(1)
    ngram, t = Candidate("ngram", lambda n: 0.1, lookup=True), Candidate("t", steep)
    assert solve_graph([ngram], t, {("ngram", "t"): full}, SolveConfig(t_max=b)).best.chain == ("t",)
    best = solve_graph([ngram], t, {("ngram", "t"): lengths}, SolveConfig(t_max=b)).best
    assert best.chain == ("ngram", "t") and best.prediction.ms_per_token == pytest.approx(priced)


def test_a_draft_model_that_stops_on_its_confidence_pays_the_passes_it_drafts():
    """pmin=: a drafter whose draft ends at L pays min(L + 1, b) passes (the one that found it
    unsure ran) and its verifier a pass of L + 1 tokens; the solver prices it as the latency model
    does, on its own and under a middle level."""
    steep = lambda n: 30.0 * (1 + 0.6 * (n - 1))  # noqa: E731
    b = 4
    tables = [[1.0] + [0.5] * k for k in range(1, b + 1)]  # P_b(L >= l): the full width half the time, else nothing
    runs = [[1.0] + [0.5] * g for g in range(1, b + 1)]  # what it drafts is accepted
    lengths = RunLengths([1.0, 0.5, 0.5, 0.5, 0.5, 0.0], runs, tables)
    assert lengths.draft_passes(b) == pytest.approx(0.5 * 1 + 0.5 * 4)
    drafter, target = Level(lambda n: 5.0, stops=True), Level(steep, lengths)
    # passes 2.5 x 5 ms; the verify pass 0.5 c(1) + 0.5 c(5) = 15 + 51; E[X] = 1 + 0.5 x 4 = 3
    assert hierarchy_latency([drafter, target], [b]).ms_per_token == pytest.approx((12.5 + 66.0) / 3)
    assert hierarchy_latency([dataclasses.replace(drafter, stops=False), target], [b]).ms_per_token == pytest.approx((20.0 + 66.0) / 3)

    rng = random.Random(3)
    # d drops its drafts of one token (nmin=2)
    d, m, t = Candidate("d", lambda n: 2.0, stops=True, n_min=2), Candidate("m", lambda n: 6.0 + n), Candidate("t", steep)
    acc = {pair: _random_runs(rng, True) for pair in (("d", "m"), ("d", "t"), ("m", "t"))}
    acc = {pair: RunLengths([r.at_least(g) for g in range(9)], drafted=tables) for pair, r in acc.items()}
    best = solve_graph([d, m], t, acc, SolveConfig(t_max=3, top_k=3)).best
    brute = min(
        (hierarchy_latency(levels, list(w)).ms_per_token, chain, w)
        for chain, levels in (
            (("d", "t"), [Level(d.cost, stops=True, n_min=2), Level(t.cost, acc[("d", "t")])]),
            (("m", "t"), [Level(m.cost), Level(t.cost, acc[("m", "t")])]),
            (("d", "m", "t"), [Level(d.cost, stops=True, n_min=2), Level(m.cost, acc[("d", "m")]), Level(t.cost, acc[("m", "t")])]),
        )
        for w in itertools.product(range(1, 4), repeat=len(chain) - 1)
    )
    assert best.prediction.ms_per_token == pytest.approx(brute[0], rel=1e-9) and (best.chain, best.widths) == brute[1:]


def test_level_zeros_two_token_pass_after_a_whole_acceptance_is_priced_and_simulated():
    # a drafter whose two-token pass costs 1.3x its one-token pass, as a small GGUF model's does on llama.cpp
    c0, ct = affine(10.0, 3.0), affine(60.0, 2.0)
    single = [Level(c0), Level(ct, RunLengths.iid(0.9))]
    q = 0.9**3  # the target accepts all 3 drafted tokens
    by_hand = (3 * c0(1) + q * (c0(2) - c0(1)) + ct(4)) / sum(0.9**g for g in range(4))
    assert hierarchy_latency(single, [3]).ms_per_token == pytest.approx(by_hand)
    assert hierarchy_latency([dataclasses.replace(single[0], lookup=True), single[1]], [3]).ms_per_token < by_hand
    middle = [Level(c0), Level(affine(25.0, 1.0), RunLengths.iid(0.8)), Level(ct, RunLengths.iid(0.7))]
    for levels, widths in ((single, [3]), (middle, [3, 4])):
        predicted = hierarchy_latency(levels, widths)
        ms, _ = simulate(levels, widths, rounds=40_000, seed=1)
        assert ms == pytest.approx(predicted.ms_per_token, rel=0.01), widths
