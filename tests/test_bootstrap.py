"""Bootstrap intervals of predicted speed-up: they cover the truth at about their nominal rate."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hsd_planner.plan import Plan, Prediction, Profile, predict
from hsd_planner.profiling.acceptance import model_conditionals, run_length_sums, start_survival, visited_run_sums
from hsd_planner.solving import widest
from hsd_planner.stats import pool_rows, resample_profiles
from hsd_planner.stats.pooling import PromptTable


def _prompt_row(a: np.ndarray) -> SimpleNamespace:
    """Per-prompt acceptance sums of a drafter whose tokens are accepted as ``a`` says (the real code path)."""
    survival = start_survival(model_conditionals(torch.tensor(a, dtype=torch.float64)))
    run_sum, run_count = run_length_sums(survival)
    visit_sum, visit_count, visit_base, _ = visited_run_sums(survival)
    return SimpleNamespace(
        positions=len(a),
        alpha_sum=float(a.sum()),
        run_sum=run_sum,
        run_count=run_count,
        visit_sum=visit_sum,
        visit_count=visit_count,
        visit_base=visit_base,
    )


def test_intervals_cover_the_truth_at_their_nominal_rate():
    alpha_true, prompts, positions, trials = 0.7, 12, 48, 60
    base = Profile(
        target="t",
        models=[{"name": "d", "latency": {64: {1: 2.0, 8: 2.5}}}, {"name": "t", "latency": {64: {1: 20.0, 8: 22.0}}}],
        acceptance=[{"drafter": "d", "verifier": "t", "alpha": alpha_true}],
    )
    truth = predict(base, ["d", "t"], [4], "iid", 64).speedup
    rng = np.random.default_rng(0)
    covered = 0
    for trial in range(trials):
        # prompts differ in how easy they are (alpha varies around the truth), as real prompts do
        per_prompt = {
            k: _prompt_row((rng.random(positions) < np.clip(rng.normal(alpha_true, 0.08), 0, 1)).astype(float)) for k in range(prompts)
        }
        resampled = resample_profiles(base, {("d", "t"): per_prompt}, count=100, seed=trial)
        speedups = [predict(p, ["d", "t"], [4], "iid", 64).speedup for p in resampled]
        lo, hi = np.percentile(speedups, 5), np.percentile(speedups, 95)
        covered += lo <= truth <= hi
    assert 0.75 <= covered / trials <= 0.99, covered / trials  # nominal 0.90


def _three_levels(prompts: int = 6, positions: int = 40) -> tuple[Profile, dict]:
    """A profile of d1 -> d2 -> t and per-prompt rows of its three pairs, prompts of differing ease."""
    rng = np.random.default_rng(1)
    base = Profile(
        target="t",
        models=[
            {"name": "d1", "latency": {1: {"points": {64: {1: 0.5, 8: 0.6}}, "spread": 0.1}}},
            {"name": "d2", "latency": {64: {1: 3.0, 8: 3.5}}},
            {"name": "t", "latency": {64: {1: 20.0, 8: 22.0}}},
        ],
        acceptance=[{"drafter": a, "verifier": b, "alpha": 0.6} for a, b in (("d1", "d2"), ("d2", "t"), ("d1", "t"))],
    )
    by_pair = {
        (a.drafter, a.verifier): {k: _prompt_row((rng.random(positions) < rng.uniform(0.4, 0.9)).astype(float)) for k in range(prompts)}
        for a in base.acceptance
    }
    return base, by_pair


def test_a_bootstrap_for_some_plans_prices_them_as_one_of_every_width():
    base, by_pair = _three_levels()
    plans = [Plan(("d1", "d2", "t"), (6, 3), Prediction(0.0, 0.0, 0.0)), Plan(("d2", "t"), (4,), Prediction(0.0, 0.0, 0.0))]
    every = resample_profiles(base, by_pair, count=20, drift=True, sample=3)
    some = resample_profiles(base, by_pair, count=20, drift=True, sample=3, widths=widest(plans))
    assert len(some[0].acceptance[0].visited) == 6 < len(every[0].acceptance[0].visited)
    for plan in plans:
        for a, b in zip(every, some):
            assert predict(b, plan.chain, plan.widths, "empirical", 64).speedup == pytest.approx(
                predict(a, plan.chain, plan.widths, "empirical", 64).speedup, rel=1e-12
            )


def test_prompts_counted_twice_pool_as_a_prompt_listed_twice():
    _, by_pair = _three_levels()
    rows = [by_pair[("d1", "d2")][k] for k in range(3)]
    weighted = PromptTable(rows).pool(np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]]))
    for pooled, listed in zip(weighted, ([rows[0], rows[0], rows[2]], [rows[1], *[rows[2]] * 3])):
        alpha, positions, run_lengths, visited = pool_rows(listed)[:4]
        assert (pooled.positions, pooled.alpha) == (positions, pytest.approx(alpha))
        assert pooled.run_lengths == pytest.approx(run_lengths) and len(pooled.visited) == len(visited)
        assert all(p == pytest.approx(v) for p, v in zip(pooled.visited, visited))


def test_no_interval_without_per_prompt_rows():
    base = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 20.0}}}], acceptance=[])
    assert resample_profiles(base, {}, count=10) == []


def test_calibration_scales_each_model_by_its_drift_at_each_pass_size():
    from hsd_planner.validation.calibration import Calibration
    from hsd_planner.validation.report import ValidationReport

    profile = Profile(
        target="t",
        models=[
            {"name": "ngram", "latency": {64: {1: 0.2, 8: 0.2}}, "lookup": True},
            {"name": "d", "latency": {64: {1: 2.0, 8: 2.5}}},
            {"name": "t", "latency": {64: {1: 20.0, 2: 22.0, 8: 30.0, 16: 50.0}, 512: {1: 40.0, 8: 60.0}}},
        ],
        acceptance=[{"drafter": "ngram", "verifier": "t", "alpha": 0.8}],
    )
    at = 64
    now = {"t": {1: 26.0, 8: 33.0}, "d": {1: 2.0, 8: 2.5}}  # the target 1.3x slower at n = 1, 1.1x at n = 8; d unchanged
    calibration = Calibration(profile, {m: (lambda n, m=m: now[m][n]) for m in now}, at)
    assert calibration.factor("t", 1) == 1.0  # no sample yet: no drift
    calibration.measure(rounds=3)
    assert abs(calibration.factor("t", 1) - 1.3) < 1e-12 and abs(calibration.factor("t", 8) - 1.1) < 1e-12
    assert abs(calibration.factor("t", 16) - 1.1) < 1e-12  # held beyond 8
    assert abs(calibration.factor("t", 2) - 1.3 ** (2 / 3) * 1.1 ** (1 / 3)) < 1e-12  # log-linear: log2(2) / log2(8) = 1/3
    assert calibration.factor("d", 4) == 1.0 and calibration.factor("ngram", 4) == 1.0
    report = ValidationReport(1, 1, "t", "w", "p", 1, 100, [100], "greedy", "empirical", [], 0, calibration=calibration.record())
    assert abs(report.drift - (1.3 * 1.1) ** 0.5) < 1e-12  # the summary's one figure, from the stored reference passes
    scaled = calibration.apply(profile)
    t = scaled.model("t").latency[1].points
    assert abs(t[64][1] - 26.0) < 1e-9 and abs(t[64][8] - 33.0) < 1e-9 and abs(t[512][1] - 52.0) < 1e-9 and abs(t[64][16] - 55.0) < 1e-9
    assert scaled.model("d").latency == profile.model("d").latency
    assert profile.model("t").latency[1].points[64][1] == 20.0  # the profile itself is untouched
    # single tokens slowed down more than passes of 8: the curve is flatter now, so a plan verifying
    # 8 tokens a round gains more over autoregressive decoding than the profile promised
    raw = predict(profile, ["ngram", "t"], [7], "iid", 64)
    cal = predict(scaled, ["ngram", "t"], [7], "iid", 64)
    assert cal.speedup > 1.1 * raw.speedup


def test_calibrated_figures_in_the_report():
    from dataclasses import replace

    from hsd_planner.cli.render import format_validation
    from hsd_planner.validation.calibration import CalibrationRecord, ModelReference
    from hsd_planner.validation.report import PlanResult, ValidationReport

    auto = PlanResult(
        1,
        "autoregressive",
        Plan(("t",), (), Prediction(20.0, 1.0, 1.0)),
        25.0,
        1.0,
        1.0,
        1.0,
        8,
        [],
        calibrated_ms_per_token=26.0,
        calibrated_speedup=1.0,
    )
    plan = PlanResult(
        2,
        "best",
        Plan(("d", "t"), (4,), Prediction(10.0, 2.0, 2.0)),
        10.0,
        2.0,
        2.5,
        1.0,
        8,
        [],
        calibrated_ms_per_token=10.5,
        calibrated_speedup=26.0 / 10.5,
    )
    report = ValidationReport(1, 1, "t", "w", "p", 1, 100, [100], "greedy", "empirical", [auto, plan], 2)
    assert abs(report.median_abs_error - 0.1) < 1e-12  # raw: |20/25 - 1| = 0.2 and 0
    assert abs(report.median_abs_error_calibrated - (0.04 + 0.05) / 2) < 1e-12
    assert abs(report.median_abs_speedup_error - abs(2.0 / 2.5 - 1)) < 1e-12  # autoregressive decoding is not counted
    assert abs(report.median_abs_speedup_error_calibrated - abs(26.0 / 10.5 / 2.5 - 1)) < 1e-12
    assert report.to_dict()["plans"][1]["calibrated_speedup_error"] == plan.calibrated_speedup_error
    # the pick's calibrated speed-up is 24% above the profile's: the report says the machine changed state
    assert report.state_changed and report.target_ratios == {}
    reference = CalibrationRecord(None, {"t": ModelReference({1: 20.0, 8: 30.0}, {1: [26.0, 26.0], 8: [33.0, 33.0]})})
    noted = ValidationReport(1, 1, "t", "w", "p", 1, 100, [100], "greedy", "empirical", [auto, plan], 2, calibration=reference)
    assert noted.target_ratios == pytest.approx({1: 1.3, 8: 1.1})
    assert "another state" in format_validation(noted)
    same = ValidationReport(1, 1, "t", "w", "p", 1, 100, [100], "greedy", "empirical", [auto, replace(plan, calibrated_speedup=2.05)], 2)
    assert not same.state_changed and "another state" not in format_validation(same)


def test_a_pick_whose_levels_drafted_otherwise_than_predicted_is_noted():
    """A level of the pick more than 10% off its predicted rounds (the target: tokens per round; a
    middle level: rounds per round above) is named in the report and in a note; within 10%, nothing."""
    from dataclasses import replace

    from hsd_planner.cli.render import format_validation
    from hsd_planner.validation.report import LevelResult, PlanResult, ValidationReport

    def report(middle_rounds: float, tokens: float) -> ValidationReport:
        levels = [
            LevelResult("ngram", 30, 90, 40, 0.01),
            LevelResult("m", 30, 80, 75, 1.0, 2.3, 3.0, predicted_rounds=2.5, measured_rounds=middle_rounds),
            LevelResult("t", 10, 0, 0, 2.0, tokens, 8.5),
        ]
        auto = PlanResult(1, "autoregressive", Plan(("t",), (), Prediction(40.0, 1.0, 1.0)), 40.0, 1.0, 1.0, 1.0, 8, levels[2:])
        pick = PlanResult(
            2, "best", Plan(("ngram", "m", "t"), (4, 8), Prediction(10.0, 8.5, 4.0)), 11.0, tokens, 40.0 / 11.0, 1.0, 8, levels
        )
        return ValidationReport(1, 1, "t", "w", "p", 3, 100, [100] * 3, "greedy", "empirical", [auto, pick], 2)

    shifted = report(middle_rounds=3.0, tokens=7.0)
    assert [(x.drafter, x.verifier, x.what) for x in shifted.acceptance_shift] == [
        ("m", "t", "tokens per round"),
        ("ngram", "m", "rounds per round above"),
    ]
    assert shifted.acceptance_shift[1].change == pytest.approx(0.2)
    assert shifted.to_dict()["acceptance_shift"][1]["change"] == pytest.approx(0.2)
    note = format_validation(shifted).splitlines()[-1]
    assert (
        note.startswith("note: these prompts draft otherwise")
        and "ngram under m: 3.00 rounds per round above, 2.50 predicted (+20%)" in note
    )
    steady = report(middle_rounds=2.6, tokens=8.0)
    assert steady.acceptance_shift == [] and "draft otherwise" not in format_validation(steady)
    # with the bootstrap's spread of the target's tokens per round, the note says where prompt sets like the profiled ones fall
    spread = replace(shifted, plans=[shifted.plans[0], replace(shifted.plans[1], predicted_accepted_interval=(7.6, 9.4))])
    assert spread.acceptance_shift[0].spread == (7.6, 9.4)
    note = format_validation(spread).splitlines()[-1]
    assert "m under t: 7.00 tokens per round, 8.50 predicted (-18%; 7.60-9.40 for 90% of prompt sets drawn like the profiled ones)" in note


def test_a_pick_whose_output_left_the_targets_own_text_is_noted():
    """Greedy plans whose output differed from the autoregressive run's (rounding in passes over
    several tokens) are counted per plan, and the report says so of the pick; an identical pick
    gets no note."""
    from dataclasses import replace

    from hsd_planner.cli.render import format_validation
    from hsd_planner.validation.report import PlanResult, ValidationReport

    auto = PlanResult(1, "autoregressive", Plan(("t",), (), Prediction(40.0, 1.0, 1.0)), 40.0, 1.0, 1.0, 1.0, 8, [])
    pick = PlanResult(
        2, "best", Plan(("ngram", "t"), (4,), Prediction(20.0, 2.0, 2.0)), 20.0, 2.0, 2.0, 1.0, 8, [], same_text=1, text_runs=6
    )
    left = ValidationReport(1, 1, "t", "w", "p", 6, 100, [100] * 6, "greedy", "empirical", [auto, pick], 2)
    assert "left the target's own greedy output in 5 of its 6 runs" in format_validation(left)
    assert left.to_dict()["plans"][1]["same_text"] == 1 and left.to_dict()["plans"][1]["text_runs"] == 6
    same = replace(left, plans=[auto, replace(pick, same_text=6)])
    assert "own greedy output" not in format_validation(same)


def test_the_summary_says_how_many_held_out_prompts_would_expect_five_percent():
    """A draw expecting more than 5 % names the held-out count that would expect 5 % (the bootstrap
    pools m prompts of a resample of the n profiled: spread ~ 1/m + 1/n); where the n profiled
    prompts alone leave more, it says to profile more; within 5 %, neither."""
    from dataclasses import replace

    from hsd_planner.cli.render import format_validation
    from hsd_planner.validation import ERROR_GOAL, prompts_for_error
    from hsd_planner.validation.report import PlanResult, ValidationReport

    auto = PlanResult(1, "autoregressive", Plan(("t",), (), Prediction(40.0, 1.0, 1.0)), 40.0, 1.0, 1.0, 1.0, 8, [])
    pick = PlanResult(
        2, "best", Plan(("ngram", "t"), (4,), Prediction(20.0, 2.0, 2.0)), 20.0, 2.0, 2.0, 1.0, 8, [], expected_abs_speedup_error=0.113
    )
    drawn = ValidationReport(1, 1, "t", "w", "p", 4, 100, [100] * 4, "greedy", "empirical", [auto, pick], 2, profiled_prompts=48)
    assert drawn.prompts_for_error_goal == prompts_for_error(0.113, 4, 48) == 32
    assert drawn.to_dict()["prompts_for_error_goal"] == 32 and drawn.to_dict()["profiled_prompts"] == 48
    assert "about 32 held-out prompts would expect 5%" in format_validation(drawn)
    # the mean of the 32 drawn from a resample of 48 spreads as expected: sigma^2 (1/32 + 1/48) <= goal^2 < the same at 31
    sigma2 = 0.113**2 / (1 / 4 + 1 / 48)
    assert sigma2 * (1 / 32 + 1 / 48) <= ERROR_GOAL**2 < sigma2 * (1 / 31 + 1 / 48)
    few = replace(drawn, profiled_prompts=8)  # 8 profiled prompts alone leave sigma/sqrt(8) > 5 %
    assert few.prompts_for_error_goal is None and "the 8 profiled prompts alone leave more than 5%: profile more" in format_validation(few)
    within = replace(drawn, plans=[auto, replace(pick, expected_abs_speedup_error=0.04)])
    assert "would expect" not in format_validation(within) and "profile more" not in format_validation(within)
    assert replace(drawn, profiled_prompts=None).prompts_for_error_goal is None  # no bootstrap: no count


def test_a_run_is_calibrated_by_the_reference_rounds_around_it():
    from hsd_planner.validation.calibration import Calibration

    profile = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 20.0, 8: 30.0}}}])
    states = iter([20.0, 30.0] * 2 + [30.0, 33.0] * 2)  # two rounds as profiled, then two in a slower state
    calibration = Calibration(profile, {"t": lambda n: next(states)}, 64, passes=1)
    assert calibration.measure(rounds=2) == 1 and calibration.measure(rounds=2) == 3
    assert calibration.factor("t", 1, at=[0, 1]) == 1.0 and calibration.factor("t", 8, at=[0, 1]) == 1.0
    assert abs(calibration.factor("t", 1, at=[2, 3]) - 1.5) < 1e-12 and abs(calibration.factor("t", 8, at=[2, 3]) - 1.1) < 1e-12
    assert abs(calibration.ratio("t", 1) - 1.25) < 1e-12  # every round: the median of 20, 20, 30, 30
    assert abs(calibration.apply(profile, at=[2, 3]).model("t").latency[1].points[64][1] - 30.0) < 1e-9


def test_a_reference_round_keeps_the_median_of_its_passes():
    from hsd_planner.validation.calibration import Calibration

    profile = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 20.0, 8: 30.0}}}])
    # per round, passes in turn (1, 8) x 3; the second pass of n = 1 is a slow spell of twice its time
    times = iter([22.0, 30.0, 44.0, 31.0, 21.0, 29.0] * 2)
    calls: list[int] = []
    calibration = Calibration(profile, {"t": lambda n: calls.append(n) or next(times)}, 64)
    assert calibration.measure(rounds=2) == 1
    assert calls == [1, 8] * 6  # interleaved over pass sizes
    assert calibration.samples["t"] == {1: [22.0, 22.0], 8: [30.0, 30.0]}  # one median per round, the spell gone
    assert abs(calibration.factor("t", 1) - 1.1) < 1e-12


@pytest.mark.parametrize("sample", [None, 6])
def test_expanded_intervals_hold_their_nominal_rate_where_percentiles_fall_short(sample):
    """8 items drawn from a normal population; the bootstrap of their mean (with ``sample``, of the
    mean of 6 items drawn from each resample, a prediction of a new set of 6). Over 2,000 such
    draws, the expanded interval holds the population's mean (the mean of 6 new items) about 90%
    of the time; the plain percentile interval markedly less."""
    from hsd_planner.stats import expanded

    n, trials, count = 8, 2000, 400
    rng = np.random.default_rng(7)
    held = {"percentile": 0, "expanded": 0}
    for _ in range(trials):
        items = rng.normal(size=n)
        draws = items[rng.integers(n, size=(count, n))]
        if sample is not None:  # the mean of `sample` items drawn from each resample
            draws = np.take_along_axis(draws, rng.integers(n, size=(count, sample)), axis=1)
        means = draws.mean(axis=1)
        truth = 0.0 if sample is None else rng.normal(size=sample).mean()
        for kind, levels in (("percentile", (5.0, 95.0)), ("expanded", expanded(n, sample))):
            lo, hi = np.percentile(means, levels)
            held[kind] += lo <= truth <= hi
    assert 0.87 <= held["expanded"] / trials <= 0.93, held
    assert held["percentile"] / trials <= 0.85, held


def test_the_runs_timing_moves_a_speedup_by_the_targets_spread_over_the_runs():
    from hsd_planner.plan import LatencyCurve, ModelProfile
    from hsd_planner.solving import timed, timing_noise

    def profile(spread: float) -> Profile:
        curve = LatencyCurve(points={64: {1: 80.0, 4: 120.0}}, spread=spread)
        return Profile(target="t", models=[ModelProfile(name="t", latency={1: curve, 4: curve.scaled(3.0)})], acceptance=[])

    lookup = Plan(("ngram", "t"), (4,), Prediction(0.0, 0.0, 0.0))
    # two means of `runs` runs each, every run moved independently by the target's spread
    assert timing_noise(profile(0.06), lookup, runs=8) == pytest.approx(0.06 * (2 / 8) ** 0.5)
    assert timing_noise(profile(0.06), lookup, runs=2) == pytest.approx(2 * timing_noise(profile(0.06), lookup, runs=8))
    assert timing_noise(profile(0.0), lookup, runs=8) == 0.0  # a curve without measured spread adds nothing
    assert timing_noise(profile(0.06), lookup, runs=8, batch_size=2) == 0.0  # no curve at that batch size
    # the drawn factors are exp(sigma z): log-normal around the bootstrap's own values, seeded
    moved = np.log(np.array(timed([1.5] * 4000, 0.05)) / 1.5)
    assert abs(moved.mean()) < 0.003 and moved.std() == pytest.approx(0.05, rel=0.05)
    assert timed([1.5] * 10, 0.05) == timed([1.5] * 10, 0.05) != timed([1.5] * 10, 0.05, seed=1)
    assert timed([1.2, 3.0], 0.0) == [1.2, 3.0]
