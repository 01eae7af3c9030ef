"""Bootstrap intervals of predicted speed-up: they cover the truth at about their nominal rate."""

from types import SimpleNamespace

import numpy as np
import torch

from hsd_planner.plan import Profile, predict
from hsd_planner.profiling.acceptance import model_conditionals, run_length_sums, start_survival, visited_run_sums
from hsd_planner.store.bootstrap import resample_profiles


def _prompt_row(a: np.ndarray) -> SimpleNamespace:
    """Per-prompt acceptance sums of a drafter whose tokens are accepted as ``a`` says (the real code path)."""
    survival = start_survival(model_conditionals(torch.tensor(a, dtype=torch.float64)))
    run_sum, run_count = run_length_sums(survival)
    visit_sum, visit_count = visited_run_sums(survival)
    return SimpleNamespace(
        positions=len(a), alpha_sum=float(a.sum()), run_sum=run_sum, run_count=run_count, visit_sum=visit_sum, visit_count=visit_count
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


def test_no_interval_without_per_prompt_rows():
    base = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 20.0}}}], acceptance=[])
    assert resample_profiles(base, {}, count=10) == []


def test_calibration_scales_predictions_by_the_measured_drift():
    from hsd_planner.validation.calibration import Calibration
    from hsd_planner.validation.report import PlanResult, ValidationReport

    profile = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 20.0, 8: 30.0}, 512: {1: 40.0, 8: 60.0}}}])
    now = {1: 26.0, 8: 36.0}  # 1.3x and 1.2x slower than profiled at context 64
    calibration = Calibration(profile, None, context_len=100, timer=lambda n: now[n])
    calibration.measure(rounds=3)
    assert calibration.context_len == 64 and abs(calibration.drift - (1.3 * 1.2) ** 0.5) < 1e-12
    plan = PlanResult(1, "autoregressive", ["t"], [], 20.0, 25.0, 1.0, 1.0, 1.0, 1.0, 1.0, 8, [])
    report = ValidationReport(1, 1, "t", "w", "p", 1, 100, [100], "greedy", "empirical", [plan], 1, drift=calibration.drift)
    assert abs(report.median_abs_error - 0.2) < 1e-12  # raw: 20 predicted, 25 measured
    assert abs(report.median_abs_error_calibrated - abs(20.0 * calibration.drift / 25.0 - 1.0)) < 1e-12
