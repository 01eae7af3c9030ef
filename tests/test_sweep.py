"""Interleaved latency sweeps: fair visiting order, and robustness to a machine that drifts."""

import statistics

from hsd_planner.profiling.timing import spread, summarize, sweep_order


def test_every_point_is_visited_equally_in_a_seeded_order():
    points = [(m, c, n) for m in "abc" for c in (64, 512) for n in (1, 2, 4, 8)]
    order = sweep_order(points, 5, seed=3)
    assert len(order) == 5 * len(points)
    assert all(order.count(p) == 5 for p in points)
    for r in range(5):  # each round is one full permutation
        assert sorted(order[r * len(points) : (r + 1) * len(points)]) == sorted(points)
    assert order == sweep_order(points, 5, seed=3) and order != sweep_order(points, 5, seed=4)


def _profile(order, true_ms):
    """Medians under a clock that runs 1.6x slower for a slow spell: the middle 30% of the sweep."""
    samples = {p: [] for p in true_ms}
    for i, p in enumerate(order):
        samples[p].append(true_ms[p] * (1.6 if 0.35 <= i / len(order) < 0.65 else 1.0))
    return {p: statistics.median(v) for p, v in samples.items()}


def test_drift_bends_a_burst_profile_but_not_an_interleaved_one():
    true_ms = {("m", n): 10.0 + n for n in (1, 2, 4, 8, 16, 32)}
    points, rounds = list(true_ms), 5
    burst = [p for p in points for _ in range(rounds)]  # the old way: all samples of a point at once
    interleaved = sweep_order(points, rounds, seed=0)

    def shape_error(measured):  # the curve's shape: each point relative to n = 1
        return max(
            abs(measured[p] / measured[points[0]] - true_ms[p] / true_ms[points[0]]) / (true_ms[p] / true_ms[points[0]]) for p in points
        )

    assert shape_error(_profile(burst, true_ms)) > 0.3  # the points measured in the slow spell came out 1.6x slow
    assert shape_error(_profile(interleaved, true_ms)) < 0.05  # every point saw at most two slow samples of five


def test_summary_and_spread():
    assert summarize([1.0, 2.0, 3.0, 4.0, 100.0])[0] == 3.0
    assert spread([10.0, 10.0]) == 1.0 and spread([10.0, 11.0, 20.0, 10.5, 10.2]) > 1.25
