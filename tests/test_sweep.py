"""Interleaved latency sweeps: fair visiting order, and robustness to a machine that drifts."""

import statistics
from collections import Counter
from typing import ClassVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from hsd_planner.plan.profile import LatencyCurve
from hsd_planner.profiling import ProfileConfig, run_profile, runner, sweep
from hsd_planner.profiling.config import ProfiledModel
from hsd_planner.profiling.continuations import Assistant
from hsd_planner.profiling.timing import inversions, spread, summarize, sweep_order
from hsd_planner.prompts import load_prompts
from hsd_planner.store import Latency, open_db
from hsd_runtime import ModelLoader, parse_spec


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


def test_inversions_compare_neighbours_beyond_their_noise():
    assert inversions({1: [30, 31, 32], 2: [20, 21, 22], 4: [40, 41, 42]}) == [(1, 2)]
    assert inversions({1: [20, 26, 32], 2: [21, 22, 23]}) == []  # within the noise of n = 1
    assert inversions({1: [30.0], 2: [20.0]}) == []  # one sample: no noise estimate, no verdict


class _SlowSpellTimer:
    """n = 1 comes out slow for its first ``slow`` samples (a busy machine), then its true cost."""

    calls: ClassVar[Counter] = Counter()
    slow = 3

    def __init__(self, *_args, **_kwargs) -> None:
        pass

    def __call__(self, n: int) -> float:
        _SlowSpellTimer.calls[n] += 1
        return 50.0 if n == 1 and _SlowSpellTimer.calls[n] <= self.slow else 10.0 + n


@pytest.mark.parametrize("slow, kept", [(3, 0), (1000, 1)], ids=["slow-spell", "really-slower"])
def test_an_inverted_point_is_measured_again_and_kept_only_if_real(tiny_dirs, tmp_path, isolated_db, monkeypatch, slow, kept):
    monkeypatch.setattr(sweep, "PassTimer", _SlowSpellTimer)
    monkeypatch.setattr(_SlowSpellTimer, "calls", Counter())
    monkeypatch.setattr(_SlowSpellTimer, "slow", slow)
    config = ProfileConfig(models=[str(tiny_dirs["target"])], latency_grid=[1, 2, 4], context_lens=[8], repeats=3, acceptance=False)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\nw4 w5 w6\n")
    db = open_db(str(isolated_db))
    out = run_profile(db, config, load_prompts(prompts), ModelLoader(device="cpu", dtype="fp32"))
    assert _SlowSpellTimer.calls == {1: 3 + 6, 2: 3 + 6, 4: 3}  # the inverted pair twice its rounds again
    assert out.inverted == kept
    with Session(db) as s:
        median = {r.n_tokens: r.median_ms for r in s.scalars(select(Latency))}
    assert (median[1] < median[2]) == (not kept)


def _flat(ms_1: float, ms_n: float) -> LatencyCurve:
    return LatencyCurve(points={64: {1: ms_1, 8: ms_n}})


def test_continuations_are_drafted_by_the_drafter_predicted_fastest():
    ngram, bad, good, verifier = (
        ProfiledModel(parse_spec(spec), None if spec == "ngram" else object(), row_id=i)
        for i, spec in enumerate(["ngram", "a:layers=1", "a:layers=2", "a"])
    )
    curves = {0: _flat(0.2, 0.2), 1: _flat(5.0, 6.0), 2: _flat(20.0, 24.0), 3: _flat(100.0, 110.0)}
    assist = Assistant(curves, context=64)
    drafters = [ngram, bad, good]
    assert assist.choose(drafters, verifier) is ngram  # nothing measured: every drafter at 0.5, the free lookup wins
    assist.record(0, 3, alpha_sum=0.0, positions=10)  # the lookup never matches here
    assist.record(1, 3, alpha_sum=0.5, positions=10)  # the cheapest model is nearly never accepted
    assist.record(2, 3, alpha_sum=9.0, positions=10)
    assert assist.choose(drafters, verifier) is good
    assist.record(2, 3, alpha_sum=0.0, positions=1000)  # no drafter pays: plain decoding
    assert assist.choose(drafters, verifier) is None
    other = ProfiledModel(parse_spec("b"), object(), row_id=4)  # not measured against it yet: borrow the last acceptance
    curves[4] = _flat(100.0, 110.0)
    assert assist.choose([bad, good], other) is None


def test_latency_rounds_spread_over_the_acceptance_passes(tiny_dirs, tmp_path, isolated_db, monkeypatch):
    """Half the rounds before acceptance, the rest between the prompts' acceptance passes, none lost."""
    seen = []
    acceptance = runner.measure_acceptance

    def recording(run, verification, prompt):
        with Session(run.db) as s:
            seen.append(sorted({len(r.samples_ms) for r in s.scalars(select(Latency))}))
        return acceptance(run, verification, prompt)

    monkeypatch.setattr(runner, "measure_acceptance", recording)
    models = ["ngram", str(tiny_dirs["draft"]), str(tiny_dirs["target"])]
    config = ProfileConfig(models=models, latency_grid=[1, 2], context_lens=[8], repeats=5, max_new_tokens=4)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\nw4 w5 w6\n")
    db = open_db(str(isolated_db))
    run_profile(db, config, load_prompts(prompts), ModelLoader(device="cpu", dtype="fp32"))
    assert seen == [[3], [3], [4], [4]]  # two prompts, two verifiers each: 3 rounds first, one after the first prompt
    with Session(db) as s:
        assert min(len(r.samples_ms) for r in s.scalars(select(Latency))) >= 5  # noisy points get more


class _NoisyBatchTimer:
    """A pass over b sequences whose every other sample is three times slow: every point of b > 1 is noisy."""

    calls: ClassVar[Counter] = Counter()
    made: ClassVar[list] = []

    def __init__(self, _model, ctx: int, b: int, _seed: int = 0) -> None:
        self.ctx, self.b = ctx, b
        _NoisyBatchTimer.made.append((ctx, b))

    def __call__(self, n: int) -> float:
        _NoisyBatchTimer.calls[(self.ctx, self.b, n)] += 1
        return 10.0 * self.b * n * (3.0 if _NoisyBatchTimer.calls[(self.ctx, self.b, n)] % 2 else 1.0)


def test_points_of_a_batch_are_swept_with_the_same_care(tiny_dirs, tmp_path, isolated_db, monkeypatch):
    """c(n, b) points go through the one sweep: their rounds, then more rounds for a noisy point;
    a round visits a (model, context, batch size) group's points together, one group's timer at a time."""
    monkeypatch.setattr(sweep, "BatchPassTimer", _NoisyBatchTimer)
    monkeypatch.setattr(sweep, "BatchLookupTimer", _NoisyBatchTimer)
    monkeypatch.setattr(_NoisyBatchTimer, "calls", Counter())
    monkeypatch.setattr(_NoisyBatchTimer, "made", [])
    config = ProfileConfig(
        models=[str(tiny_dirs["target"])], latency_grid=[1, 2], context_lens=[8, 16], repeats=3, acceptance=False, batch_sizes=[1, 2]
    )
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\nw4 w5 w6\n")
    db = open_db(str(isolated_db))
    out = run_profile(db, config, load_prompts(prompts), ModelLoader(device="cpu", dtype="fp32"))
    # per point of b = 2: one warm-up, three rounds, three more for its noise
    assert _NoisyBatchTimer.calls == {(ctx, 2, n): 1 + 3 + 3 for ctx in (8, 16) for n in (1, 2)}
    assert len(_NoisyBatchTimer.made) <= 2 * (3 + 3)  # at most one timer per group and round
    assert out.noisy >= 4
    with Session(db) as s:
        rows = s.scalars(select(Latency).where(Latency.batch_size == 2)).all()
        assert len(rows) == 4 and all(len(r.samples_ms) == 6 and r.floor_ms is None for r in rows)
