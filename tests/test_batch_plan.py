"""Batch-aware planning: the expected maximum of round counts, the lockstep latency model, the
solver per batch size against brute force, and a schedule whose optimum is known."""

from __future__ import annotations

import dataclasses
import itertools
import random
import statistics

import numpy as np
import pytest
from pydantic import ValidationError

from hsd_planner.errors import SolverError
from hsd_planner.plan import Level, ModelProfile, Profile, RoundLaw, RunLengths, SolveConfig, hierarchy_latency, predict, solve
from hsd_planner.plan.batch import drafter_schedule, solve_batches
from hsd_planner.plan.latency import batch_latency, catch_up
from hsd_planner.plan.lockstep import expected_max_rounds, max_rounds_table, rounds_cdf


def _law(rng: random.Random) -> RoundLaw:
    """A chain round law from bursty measured-looking run lengths or i.i.d. acceptance."""
    if rng.random() < 0.5:
        return RoundLaw.chain(RunLengths.iid(rng.uniform(0.1, 0.95)), rng.randint(1, 6))
    s = [1.0]
    for _ in range(12):
        s.append(s[-1] * rng.uniform(0.3, 0.98))
    return RoundLaw.chain(RunLengths(s), rng.randint(1, 6))


def _simulated_max(law: RoundLaw, t: int, batch: int, runs: int, rng: np.random.Generator) -> float:
    """Monte Carlo of E[max_i R_i(t)]: each sequence draws rounds of X tokens until it holds t."""
    px = np.array(law.tokens())
    draws = rng.choice(len(px), size=(runs, batch, t), p=px / px.sum())  # at most t rounds: every round yields a token
    held = draws.cumsum(axis=2)
    rounds = (held < t).sum(axis=2) + 1  # [runs, batch]
    return float(rounds.max(axis=1).mean())


@pytest.mark.parametrize("seed", range(6))
def test_expected_maximum_of_round_counts_matches_monte_carlo(seed):
    rng = random.Random(seed)
    law, t, batch = _law(rng), rng.randint(1, 9), rng.choice([2, 4, 8, 16])
    exact = expected_max_rounds(law, t, batch)
    mc = _simulated_max(law, t, batch, 40_000, np.random.default_rng(seed))
    assert abs(exact - mc) < 0.02 * exact + 0.01, (exact, mc)


def test_expected_maximum_by_hand():
    # each round yields 1 or 2 tokens with probability 1/2; 3 tokens take 2 rounds (1+2, 2+1, 2+2) or 3 (1+1+1)
    law = RoundLaw.chain(RunLengths.iid(0.5), 1)
    assert rounds_cdf(law, 3) == [0.0, 0.0, 0.75, 1.0]
    # max of 4: 2 rounds unless some sequence needs 3: 2 + (1 - 0.75^4)
    assert expected_max_rounds(law, 3, 4) == pytest.approx(2 + 1 - 0.75**4)
    # a sure acceptance: every sequence needs ceil(t / 2) rounds, whatever the batch
    sure = RoundLaw.chain(RunLengths.iid(1.0), 1)
    assert max_rounds_table(sure, 5, 16) == pytest.approx([0, 1, 1, 2, 2, 3])


@pytest.mark.parametrize("seed", range(5))
def test_at_batch_one_the_maximum_is_the_renewal_mean(seed):
    law = _law(random.Random(seed))
    assert max_rounds_table(law, 12, 1) == pytest.approx(law.rounds(12), rel=1e-12)
    # and it grows with the batch, never past t
    tables = [max_rounds_table(law, 12, b) for b in (1, 2, 4, 16)]
    assert all(a <= b + 1e-12 for x, y in zip(tables, tables[1:]) for a, b in zip(x, y))
    assert all(m <= t for t, m in enumerate(tables[-1]))


def _levels(rng: random.Random, depth: int) -> tuple[list[Level], list[int]]:
    levels = [Level(lambda n, c=rng.uniform(0.5, 2.0): c + 0.1 * n)]
    for k in range(depth):
        c1 = 3.0 * (k + 2) ** 2
        levels.append(Level(lambda n, c=c1: c + 0.2 * n, RunLengths.iid(rng.uniform(0.3, 0.9))))
    return levels, [rng.randint(1, 5) for _ in range(depth)]


@pytest.mark.parametrize("seed", range(6))
def test_the_batch_model_at_batch_one_is_the_plain_model(seed):
    rng = random.Random(seed)
    levels, widths = _levels(rng, rng.randint(1, 3))
    steered = [dataclasses.replace(level, proposal=0.5 * (k + 1)) for k, level in enumerate(levels[:-1])] + levels[
        -1:
    ]  # proposal costs too
    for horizon in (None, 24):
        for case in (levels, steered):
            plain = hierarchy_latency(case, widths, horizon)
            batched = batch_latency(case, widths, 1, horizon)
            assert batched.ms_per_token == pytest.approx(plain.ms_per_token, rel=1e-12)


def test_a_middle_level_waits_for_the_slowest_sequence():
    levels, widths = _levels(random.Random(3), 2)
    times = [batch_latency(levels, widths, b).ms_per_token for b in (1, 2, 4, 8)]
    assert times == sorted(times) and times[-1] > times[0]  # the same costs at every b: only the rounds grow
    # with no middle level only level 0's two-token pass differs: fed to every row when any row's batch was accepted whole
    law = RoundLaw.chain(levels[1].runs, widths[0])
    more = (catch_up(levels[0], law, 8) - catch_up(levels[0], law)) / law.mean
    assert more > 0
    assert batch_latency(levels[:2], widths[:1], 8).ms_per_token == pytest.approx(
        batch_latency(levels[:2], widths[:1], 1).ms_per_token + more
    )


# a profile whose costs change with the batch size as on a CPU: a pass of n tokens over b sequences
# costs a fixed weight read plus compute in n * b, so batching makes extra drafted tokens dear
def _cost(fixed: float, per: float) -> dict[int, dict[int, dict[int, float]]]:
    return {b: {64: {n: fixed + per * n * b for n in (1, 2, 4, 8, 16)}} for b in (1, 2, 4, 8, 16)}


def _profile(target_fixed: float = 20.0, target_per: float = 1.0) -> Profile:
    models = []
    for name, fixed, per, lookup in (("ngram", 0.05, 0.0, True), ("small", 2.0, 0.2, False), ("big", target_fixed, target_per, False)):
        curves = _cost(fixed, per)
        models.append({"name": name, "lookup": lookup, "latency": curves})
    alpha = {("ngram", "small"): 0.3, ("ngram", "big"): 0.3, ("small", "big"): 0.8}
    return Profile(target="big", models=models, acceptance=[{"drafter": d, "verifier": v, "alpha": a} for (d, v), a in alpha.items()])


def test_a_profile_document_of_before_reads_as_curves_by_batch_size():
    # b = 1 under latency, the other batch sizes under batch_latency (JSON keys are strings)
    curves = _cost(2.0, 0.2)
    older = {"name": "m", "latency": curves[1], "batch_latency": {str(b): c for b, c in curves.items() if b > 1}}
    model = ModelProfile.model_validate(older)
    assert model == ModelProfile(name="m", latency=curves) and sorted(model.latency) == [1, 2, 4, 8, 16]
    assert ModelProfile.model_validate_json(model.model_dump_json()) == model
    with pytest.raises(ValidationError, match="batch size 1"):
        ModelProfile(name="m", latency={4: curves[4]})


def _brute(profile: Profile, batch: int, t_max: int) -> float:
    best = predict(profile, ["big"], [], batch_size=batch).ms_per_token
    for chain in (["ngram", "big"], ["small", "big"], ["ngram", "small", "big"]):
        for widths in itertools.product(range(1, t_max + 1), repeat=len(chain) - 1):
            best = min(best, predict(profile, chain, list(widths), batch_size=batch).ms_per_token)
    return best


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16])
def test_the_solver_per_batch_size_agrees_with_brute_force(batch):
    profile = _profile()
    sol = solve(profile, SolveConfig(t_max=5, batch_size=batch, trees=False))
    assert sol.best.prediction.ms_per_token == pytest.approx(_brute(profile, batch, 5), rel=1e-9)
    if batch == 1:  # the plain solver, chains only, finds the same
        plain = solve(profile, SolveConfig(t_max=5, trees=False)).best
        assert sol.best.prediction.ms_per_token == pytest.approx(plain.prediction.ms_per_token, rel=1e-9)
        assert predict(profile, plain.chain, plain.widths).ms_per_token == pytest.approx(plain.prediction.ms_per_token)


def test_the_schedule_says_zero_where_speculation_stops_paying():
    # at batch 16 a pass of n tokens costs n passes of one (no fixed part): speculation cannot pay,
    # L = (C_0 + n c) / E[X] > c since E[X] <= n and C_0 > 0; at batch 1 the pass is nearly flat in n
    profile = _profile()
    for m in profile.models:
        m.latency[16] = type(m.latency[1])(points={64: {n: (0.01 if m.lookup else 1.0) * 16 * n for n in (1, 2, 4, 8, 16)}})
    sol = solve_batches(profile, [1, 2, 4, 8, 16], SolveConfig(t_max=6))
    schedule = sol.schedule
    assert schedule[0].min_batch == 1 and schedule[0].plan.depth >= 1
    assert schedule[-1].max_batch == 16 and schedule[-1].plan.widths == () and schedule[-1].plan.chain == ("big",)
    assert sol.stops_paying is not None and sol.stops_paying <= 16
    assert all(r.plan.depth == 0 for r in schedule if r.min_batch >= sol.stops_paying)
    # the widths of the first drafter shrink as the batch grows, as a hand-tuned table would
    ks = [plan.widths[-1] if plan.widths else 0 for _, plan in sol.best]
    assert ks == sorted(ks, reverse=True)
    fixed = drafter_schedule(profile, "small", [1, 2, 4, 8, 16], 6, "empirical", 64)
    assert fixed[-1][1].widths == () and fixed[0][1].widths[0] >= fixed[1][1].widths[0]


def test_costs_between_measured_batch_sizes_are_linear_in_b_and_outside_refused():
    profile = _profile()
    assert profile.cost("big", 64, 3)(2) == pytest.approx((profile.cost("big", 64, 2)(2) + profile.cost("big", 64, 4)(2)) / 2)
    with pytest.raises(SolverError, match="profile --batch-sizes"):
        profile.cost("big", 64, 32)
    only_one = Profile(
        target="t", models=[{"name": "t", "latency": {64: {1: 5.0}}}, {"name": "ngram", "lookup": True, "latency": {64: {1: 0.1}}}]
    )
    assert only_one.cost("ngram", 64, 8)(4) == pytest.approx(0.8)  # a lookup per sequence
    with pytest.raises(SolverError, match="batch size 2"):
        only_one.cost("t", 64, 2)


def test_a_tree_is_refused_in_a_batch_plan():
    from hsd_runtime.terms.shape import TreeShape

    with pytest.raises(SolverError, match="chain"):
        predict(_profile(), ["small", "big"], [TreeShape((2, 1))], batch_size=4)


def _lockstep(costs, alphas, widths, batch, horizon, rng) -> tuple[float, float]:
    """One lockstep generation, simulated: (time, tokens of each sequence). ``horizon`` tokens per
    sequence, sequences that hold them stop; None: 200 target rounds with every sequence going.

    Independent of the model's code: level k delivers its batch to the sequences ``active`` by
    rounds over those that still need tokens, each round asking the level below for those only.
    """

    def run(g: int) -> int:  # accepted of a batch of g: min(G, g), P(G >= x) = alpha^x
        return min(int(rng.geometric(1.0 - alphas_k)) - 1, g)

    def deliver(k: int, active: int) -> float:
        nonlocal alphas_k
        if k == 0:
            return widths[0] * costs[0](1)
        held, time = [0] * active, 0.0
        while any(h < widths[k] for h in held):
            going = [i for i, h in enumerate(held) if h < widths[k]]
            time += deliver(k - 1, len(going)) + costs[k](widths[k - 1] + 1)
            alphas_k = alphas[k]
            for i in going:
                held[i] += run(widths[k - 1]) + 1
        return time

    alphas_k = 0.0
    tokens, time, rounds = [0] * batch, 0.0, 0
    while (horizon is None and rounds < 200) or (horizon is not None and any(t < horizon for t in tokens)):
        going = [i for i, t in enumerate(tokens) if horizon is None or t < horizon]
        time += deliver(len(widths) - 1, len(going)) + costs[-1](widths[-1] + 1)
        alphas_k = alphas[-1]
        for i in going:  # a generation keeps exactly its N tokens (the last round is cut)
            tokens[i] = min(tokens[i] + run(widths[-1]) + 1, horizon or 10**9)
        rounds += 1
    return time, statistics.mean(tokens)


@pytest.mark.parametrize("horizon", [None, 12])
def test_the_lockstep_model_against_a_simulation_of_three_levels_below_the_target(horizon):
    costs = [lambda n: 1.0, lambda n: 3.0 + 0.5 * n, lambda n: 8.0 + n, lambda n: 30.0 + 2 * n]
    alphas = [None, 0.6, 0.7, 0.8]
    widths, batch = [2, 2, 3], 4
    levels = [Level(costs[0])] + [Level(c, RunLengths.iid(a)) for c, a in zip(costs[1:], alphas[1:])]
    predicted = batch_latency(levels, widths, batch, horizon).ms_per_token
    rng = np.random.default_rng(0)
    runs = [_lockstep(costs, alphas, widths, batch, horizon, rng) for _ in range(300 if horizon is None else 3000)]
    simulated = sum(t for t, _ in runs) / sum(n for _, n in runs)
    assert simulated == pytest.approx(predicted, rel=0.015)
    # the solver's product (each middle level waiting for all b) bounds it from above
    upper = _product(levels, widths, batch)
    assert upper >= batch_latency(levels, widths, batch).ms_per_token - 1e-9


def _product(levels: list[Level], widths: list[int], batch: int) -> float:
    """What the solver's DAG computes: E[max_b R_k] (E[C_{k-1}] + c_k) at every middle level."""
    cost = widths[0] * levels[0].cost(1) + catch_up(levels[0], RoundLaw.chain(levels[1].runs, widths[0]), batch)
    for k in range(1, len(widths)):
        law = RoundLaw.chain(levels[k].runs, widths[k - 1])
        cost = expected_max_rounds(law, widths[k], batch) * (cost + levels[k].cost(widths[k - 1] + 1))
    law = RoundLaw.chain(levels[-1].runs, widths[-1])
    return (cost + levels[-1].cost(widths[-1] + 1)) / law.mean


def test_with_one_middle_level_the_solver_product_is_exact():
    levels, widths = _levels(random.Random(7), 2)
    for batch in (1, 3, 8):
        assert _product(levels, widths, batch) == pytest.approx(batch_latency(levels, widths, batch).ms_per_token, rel=1e-12)
