"""``hsd-plan validate`` and ``hsd-plan demo`` on tiny models."""

import json
import sqlite3
import statistics
from types import SimpleNamespace

import pytest

from hsd_planner.plan import Plan, Prediction
from hsd_planner.store import open_db
from hsd_planner.validation import prompts_for_error
from hsd_planner.validation.results import speedup_interval, workload_ms
from hsd_planner.validation.runner import _Entry, _measure, _one_row, _units
from hsd_runtime import CachePool, Hierarchy, NgramDrafter, TreeShape
from tests.helpers import SOLVABLE_PROFILE, run
from tests.tiny import tiny_llama

FAST = SOLVABLE_PROFILE


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n".join(f"w{i} w{i + 1} w{i} w{i + 1} w{i + 2}" for i in range(40)))
    return path


@pytest.fixture
def solved(tiny_dirs, prompts):
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    assert run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 6, *FAST).exit_code == 0
    result = run("solve", "--t-max", "4", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_validate_reports_stores_and_plots(solved, prompts, tmp_path, isolated_db):
    plot = tmp_path / "v.png"
    result = run(
        "validate",
        "--candidates",
        "all",
        "--prompts",
        prompts,
        "--max-prompts",
        3,
        "--max-new-tokens",
        8,
        "--device",
        "cpu",
        "--plot",
        plot,
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["prompt_count"] == 3 and report["prompts"].endswith(":validate")
    auto = [p for p in report["plans"] if len(p["chain"]) == 1]
    assert len(auto) == 1 and auto[0]["measured_speedup"] == 1.0 and auto[0]["measured_mean_accepted_length"] == 1.0
    for p in report["plans"]:
        assert len(p["levels"]) == len(p["chain"])
        # greedy hierarchies are exact: every plan decodes as many tokens as autoregressive decoding (same EOS stops)
        assert p["tokens"] == auto[0]["tokens"] and p["measured_mean_accepted_length"] >= 1.0
        # speed-up over the target's own decoding measured in the same validation
        assert p["measured_speedup"] == pytest.approx(auto[0]["measured_ms_per_token"] / p["measured_ms_per_token"])
        # a middle level: its rounds per round of the level above, predicted and measured; no other level has them
        for k, level in enumerate(p["levels"]):
            middle = 0 < k < len(p["chain"]) - 1
            assert (level["predicted_rounds"] is not None, level["measured_rounds"] is not None) == (middle, middle)
            if middle:
                assert level["measured_rounds"] == pytest.approx(level["forward_passes"] / p["levels"][k + 1]["forward_passes"])
    assert all(abs(x["change"]) > 0.1 for x in report["acceptance_shift"])
    # the solver's pick is the solve's best plan; regret is its measured latency over the best measured, minus one
    best = solved["plans"][0]
    assert report["pick"] == best["id"]
    pick = next(p for p in report["plans"] if p["plan_id"] == best["id"])
    fastest = min(p["measured_ms_per_token"] for p in report["plans"])
    assert report["regret"] == pytest.approx(pick["measured_ms_per_token"] / fastest - 1.0)
    errors = sorted(abs(p["predicted_ms_per_token"] / p["measured_ms_per_token"] - 1.0) for p in report["plans"])
    assert report["median_abs_error"] == pytest.approx(statistics.median(errors))
    with sqlite3.connect(isolated_db) as conn:
        stored = conn.execute(
            "SELECT plan_id, measured_ms_per_token, error FROM validation_runs WHERE validation_id = ?", (report["validation_id"],)
        ).fetchall()
        regret = conn.execute("SELECT regret FROM validations WHERE id = ?", (report["validation_id"],)).fetchone()[0]
    assert sorted(stored) == sorted((p["plan_id"], p["measured_ms_per_token"], p["error"]) for p in report["plans"])
    assert regret == pytest.approx(report["regret"])
    # every model the plans run has reference passes, and the calibrated predictions are stored beside the raw ones
    models = {n for p in report["plans"] for n in p["chain"] if n != "ngram"}
    assert set(report["calibration"]["models"]) == models
    runs = len(report["plans"]) * 3  # 3 prompts, one repeat
    assert all(
        len(s) == 3 + runs for m in report["calibration"]["models"].values() for s in m["samples_ms"].values()
    )  # 3 before, 1 per run
    with sqlite3.connect(isolated_db) as conn:
        calibrated = dict(
            conn.execute("SELECT plan_id, calibrated_ms_per_token FROM validation_runs WHERE validation_id = ?", (report["validation_id"],))
        )
        summary = conn.execute(
            "SELECT median_abs_speedup_error_calibrated FROM validations WHERE id = ?", (report["validation_id"],)
        ).fetchone()[0]
    assert calibrated == {p["plan_id"]: pytest.approx(p["calibrated_ms_per_token"]) for p in report["plans"]}
    assert summary == pytest.approx(report["median_abs_speedup_error_calibrated"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every plan above autoregressive decoding carries the 90% interval of its predicted speed-up,
    # whether the measured one fell inside, and the validation the share that did
    drafted = [p for p in report["plans"] if len(p["chain"]) > 1 and not _is_tree(p)]
    assert drafted
    for p in drafted:
        lo, hi = p["predicted_speedup_lo"], p["predicted_speedup_hi"]
        assert 0 < lo <= hi and p["covered"] == (lo <= p["measured_speedup"] <= hi)
        assert p["interval_width"] == pytest.approx((hi - lo) / p["predicted_speedup"])
    assert auto[0]["covered"] is None
    hits = [p["covered"] for p in report["plans"] if p["covered"] is not None]
    assert report["coverage"] == pytest.approx(sum(hits) / len(hits))
    with sqlite3.connect(isolated_db) as conn:
        covered = dict(conn.execute("SELECT plan_id, covered FROM validation_runs WHERE validation_id = ?", (report["validation_id"],)))
        coverage = conn.execute("SELECT coverage FROM validations WHERE id = ?", (report["validation_id"],)).fetchone()[0]
    assert {k: None if v is None else bool(v) for k, v in covered.items()} == {p["plan_id"]: p["covered"] for p in report["plans"]}
    assert coverage == pytest.approx(report["coverage"])
    # every chain plan with a speed-up interval carries one for its tokens per target round, over the same bootstrap
    for p in drafted:
        lo, hi = p["predicted_accepted_interval"]
        assert 1.0 <= lo <= hi <= p["widths"][-1] + 1
    assert auto[0]["predicted_accepted_interval"] is None
    # each such plan the error the bootstrap expects from the draw alone: a median deviation, inside
    # the interval's farther end (a 90% interval holds more than the median deviation)
    for p in drafted:
        lo, hi, pred = p["predicted_speedup_lo"], p["predicted_speedup_hi"], p["predicted_speedup"]
        assert 0 <= p["expected_abs_speedup_error"] <= max(pred / lo - 1, 1 - pred / hi)
    expected = [p["expected_abs_speedup_error"] for p in report["plans"] if p["expected_abs_speedup_error"] is not None]
    assert report["expected_abs_speedup_error"] == pytest.approx(statistics.median(expected))
    assert auto[0]["expected_abs_speedup_error"] is None
    # from that expectation, the 6 profiled prompts and the 3 drawn: how many held-out prompts would expect 5 %
    assert report["profiled_prompts"] == 6
    assert report["prompts_for_error_goal"] == prompts_for_error(report["expected_abs_speedup_error"], 3, 6)
    # greedy in fp32 on torch: every plan's output is the target's own, run by run, and so stored
    assert auto[0]["same_text"] is None
    assert all(p["same_text"] == p["text_runs"] == 3 for p in report["plans"] if len(p["chain"]) > 1)
    with sqlite3.connect(isolated_db) as conn:
        texts = dict(conn.execute("SELECT plan_id, same_text FROM validation_runs WHERE validation_id = ?", (report["validation_id"],)))
    assert texts == {p["plan_id"]: p["same_text"] for p in report["plans"]}


def _is_tree(plan: dict) -> bool:
    return any(isinstance(w, str) for w in plan["widths"])


def test_a_three_level_plans_middle_level_reports_its_rounds_per_round_above(solved, prompts, tiny_dirs):
    result = run("solve", "--t-max", "4", "--require", f"ngram,{tiny_dirs['draft']}", "--json")
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["plans"][0]
    assert len(best["chain"]) == 3
    result = run(
        "validate", "--plan", best["id"], "--prompts", prompts, "--max-prompts", 2, "--max-new-tokens", 8, "--device", "cpu", "--json"
    )
    assert result.exit_code == 0, result.output
    plan = next(p for p in json.loads(result.stdout)["plans"] if p["plan_id"] == best["id"])
    lookup, middle, target = plan["levels"]
    assert middle["measured_rounds"] == pytest.approx(middle["forward_passes"] / target["forward_passes"])
    assert middle["predicted_rounds"] >= 1.0 and lookup["predicted_rounds"] is None and target["predicted_rounds"] is None


def test_validate_one_plan_by_id(solved, prompts):
    plan = solved["plans"][0]["id"]
    result = run("validate", "--plan", plan, "--prompts", prompts, "--max-prompts", 2, "--max-new-tokens", 4, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "median |error|" in result.output and "regret" in result.output


@pytest.mark.parametrize("count", [1, 2])
def test_repeats_reuse_the_prompts_prefill_and_the_prefill_is_still_measured(solved, prompts, count):
    """With --repeats 2 a run of the prompt a plan ran last reuses its cached prefill (the same
    tokens, every repeat); every plan still reports a measured prefill, even of one prompt."""
    args = ["--candidates", "all", "--prompts", prompts, "--max-prompts", count, "--max-new-tokens", 6, "--device", "cpu"]
    once = json.loads(run("validate", *args, "--json").stdout)
    twice = run("validate", *args, "--repeats", 2, "--json")
    assert twice.exit_code == 0, twice.output
    report = json.loads(twice.stdout)
    assert report["prompt_count"] == count
    for p in report["plans"]:
        assert p["prefill_ms"] > 0
        assert p["tokens"] == 2 * next(q["tokens"] for q in once["plans"] if q["plan_id"] == p["plan_id"])


def test_validate_without_a_plan(isolated_db):
    result = run("validate")  # read-only commands do not create a database
    assert result.exit_code == 1 and "there is no database at" in result.output and not isolated_db.exists()
    open_db(str(isolated_db))  # an empty, migrated database
    result = run("validate")
    assert result.exit_code == 1 and "no plan in the database" in result.output


def test_validate_unknown_plan_id(solved):
    result = run("validate", "--plan", 9999)
    assert result.exit_code == 1 and "no plan with id 9999" in result.output


def test_validate_plan_whose_model_is_gone(solved, prompts, tiny_dirs, isolated_db):
    with sqlite3.connect(isolated_db) as conn:
        conn.execute("UPDATE plans SET chain = json_array('/gone/model', json_extract(chain, '$[#-1]')) WHERE kind = 'best'")
        plan = conn.execute("SELECT id FROM plans WHERE kind = 'best'").fetchone()[0]
    result = run("validate", "--plan", plan, "--prompts", prompts, "--device", "cpu")
    assert result.exit_code == 1 and f"plan {plan}" in result.output and "cannot be run" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_validate_with_an_empty_held_out_split(solved, tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("w2 w2 w3\n")  # a single prompt, which the hash puts in the profiling split
    result = run("validate", "--prompts", one, "--device", "cpu")
    assert result.exit_code == 1 and "split" in result.output and "is empty" in result.output


@pytest.mark.parametrize("prompt_count, repeats", [(1, 2), (3, 1), (4, 2), (6, 1)])
def test_plans_share_their_models_prefills_and_each_still_measures_one(prompt_count, repeats):
    """A validation's plans share one cache per model: of every prompt, the plans that lead it
    feed it afresh and the others reuse that prefill, so the target is prefilled about once per
    prompt, not once per plan, and every plan still has a run that measured its prefill."""
    target, drafter, pool = tiny_llama(0, layers=3), tiny_llama(1, layers=1), CachePool()
    unknown = Prediction(0.0, 0.0, 0.0)
    entries = [
        _Entry(1, "best", Plan(("ngram", "d", "t"), (3, 2), unknown)),
        _Entry(2, "top", Plan(("d", "t"), (3,), unknown)),
        _Entry(9, "autoregressive", Plan(("t",), (), unknown)),
    ]
    hierarchies = [
        Hierarchy([NgramDrafter(), drafter, target], [3, 2], caches=pool),
        Hierarchy([drafter, target], [3], caches=pool),
        Hierarchy([target], [], caches=pool),
    ]
    built = {e.key: h for e, h in zip(entries, hierarchies)}
    counter = iter(range(1000))
    reference = SimpleNamespace(measure=lambda rounds=1: next(counter))  # the reference timer's round index
    setting = SimpleNamespace(mode="greedy", temperature=1.0, top_p=1.0, lenience=1.0)
    prompts = [[0, 5 + k, 9, 5 + k, 9, 13] for k in range(prompt_count)]
    units = {1: _units(prompt_count, 1, repeats)}
    runs = _measure(built, {1: entries}, units, prompts, SimpleNamespace(setting=setting), 8, reference, lambda _n: None)
    fed = {p: [r.levels[-1].prefill_tokens > 0 for r in results] for p, results in runs.results.items()}
    assert all(any(f) for f in fed.values())  # every plan measured a prefill
    assert sum(map(sum, fed.values())) == max(len(built), prompt_count - 1)  # once per plan, or per prompt the warm-up did not feed
    auto = [r.tokens for r in runs.results[(1, entries[2].key)]]
    assert all([r.tokens for r in results] == auto for results in runs.results.values())  # greedy: every plan decodes the target's tokens


def test_a_plan_that_decodes_one_prompt_at_a_time_is_told_apart():
    """Above batch size 1 a validation leaves out what the runtime decodes one prompt at a time
    (a draft tree here), with the runtime's reason; a chain decodes a batch of two."""
    target, drafter = tiny_llama(0, layers=2), tiny_llama(1, layers=1)
    tree = _one_row(Hierarchy([drafter, target], [TreeShape((2, 1))]), [0, 5, 9])
    assert tree is not None and "tree" in tree
    assert _one_row(Hierarchy([NgramDrafter(), drafter, target], [2, 2]), [0, 5, 9, 5, 9]) is None


def test_past_validations_widen_the_predicted_intervals(solved, prompts, isolated_db, monkeypatch):
    from alembic.command import downgrade, upgrade

    from hsd_planner.solving import MIN_RESIDUALS, intervals, past_misses, past_plans, timing_noise, widened
    from hsd_planner.stats import miss_score
    from hsd_planner.store.db import alembic_config
    from hsd_planner.store.validations import speedup_scores

    args = ("validate", "--candidates", "all", "--prompts", prompts, "--max-prompts", 2, "--max-new-tokens", 6, "--device", "cpu", "--json")
    first = json.loads(run(*args).stdout)
    assert first["interval_history"] == 0  # nothing validated before: the bootstrap alone
    assert all(
        (p["predicted_speedup_lo"], p["predicted_speedup_hi"]) == (p["bootstrap_speedup_lo"], p["bootstrap_speedup_hi"])
        for p in first["plans"]
    )
    db = open_db(f"sqlite:///{isolated_db}")
    target = first["target"]
    with sqlite3.connect(isolated_db) as conn:
        hardware = conn.execute("SELECT hardware_id FROM solves").fetchone()[0]
    while sum(map(len, speedup_scores(db, target, hardware))) < MIN_RESIDUALS:
        assert run(*args).exit_code == 0
    past = speedup_scores(db, target, hardware)
    with sqlite3.connect(isolated_db) as conn:
        stored = conn.execute("SELECT COUNT(DISTINCT validation_id) FROM validation_runs").fetchone()[0]
    assert len(past) == stored  # one group of misses per validation: its plans ran on the same prompts
    with sqlite3.connect(isolated_db) as conn:
        workload = conn.execute("SELECT workload_id FROM solves").fetchone()[0]
    assert speedup_scores(db, target, hardware, workload) == past and speedup_scores(db, target, hardware, workload + 1) == []
    # another machine's or target's are not read
    assert speedup_scores(db, target, hardware + 1) == [] and speedup_scores(db, "other", hardware) == []
    timing: list[tuple[tuple[str, ...], int, int]] = []

    def noted(profile, plan, runs, batch_size=1):
        timing.append((plan.chain, runs, batch_size))
        return timing_noise(profile, plan, runs, batch_size)

    monkeypatch.setattr(intervals, "timing_noise", noted)
    report = json.loads(run(*args).stdout)
    # each drafted plan's bootstrap interval is timed as its runs are: 2 prompts once each, beside as many of
    # autoregressive decoding (the arithmetic: tests/test_bootstrap.py)
    assert {tuple(p["chain"]) for p in report["plans"] if len(p["chain"]) > 1 and p["bootstrap_speedup_lo"] is not None} <= {
        c for c, *_ in timing
    }
    assert all(runs == 2 and batch == 1 for _, runs, batch in timing), timing
    assert report["interval_history"] == past_plans(past) == sum(map(len, past))
    # how often the intervals held over every validation stored for the target here, this one included
    with sqlite3.connect(isolated_db) as conn:
        held = conn.execute("SELECT COUNT(DISTINCT validation_id), COUNT(*), SUM(covered) FROM validation_runs WHERE covered IS NOT NULL")
        validations, plans, inside = held.fetchone()
    assert report["coverage_history"] == {"validations": validations, "plans": plans, "inside": inside} and validations >= 3
    banded = [p for p in report["plans"] if len(p["chain"]) > 1 and p["bootstrap_speedup_lo"] is not None]
    assert banded
    for p in banded:
        # the past misses, in units of this plan's own bootstrap interval, around its prediction
        band = (p["bootstrap_speedup_lo"], p["bootstrap_speedup_hi"])
        assert [p["predicted_speedup_lo"], p["predicted_speedup_hi"]] == pytest.approx(list(widened(band, p["predicted_speedup"], past)))
    # what this validation stored: each plan's miss in units of its bootstrap interval, not of the widened one
    mine = [
        miss_score(p["measured_speedup"], p["predicted_speedup"], (p["bootstrap_speedup_lo"], p["bootstrap_speedup_hi"])) for p in banded
    ]
    mine = [x for x in mine if x is not None]
    assert speedup_scores(db, target, hardware)[len(past) :] == [pytest.approx(mine)]
    # a workload widens by its own validations once they hold MIN_RESIDUALS plans, by every workload's before
    assert past_misses(db, target, hardware, workload) == speedup_scores(db, target, hardware, workload)
    assert past_misses(db, target, hardware, workload + 1) == speedup_scores(db, target, hardware)
    # a solve now prints its intervals widened by the same history
    solve = json.loads(run("solve", "--t-max", "4", "--json").stdout)
    assert solve["interval_history"] == past_plans(speedup_scores(db, target, hardware))
    # a database from before the bootstrap's own interval was kept scores its runs against their stored interval
    cfg = alembic_config(f"sqlite:///{isolated_db}")
    downgrade(cfg, "0022_same_text")
    upgrade(cfg, "head")
    with sqlite3.connect(isolated_db) as conn:
        rows = conn.execute(
            "SELECT predicted_speedup_lo, predicted_speedup_hi, bootstrap_speedup_lo, bootstrap_speedup_hi FROM validation_runs"
        )
        assert all((lo, hi) == (blo, bhi) for lo, hi, blo, bhi in rows)
    assert sum(map(len, speedup_scores(db, target, hardware))) == sum(map(len, past)) + len(mine)
    # the text says it too, over one validation more
    text = run(*args[:-1]).stdout
    assert f"over the {validations + 1} validations of this target stored on this machine" in text
    # the first validation moved onto another workload's profile: each workload reads its own once
    # they hold MIN_RESIDUALS plans (the rest here), every workload's before (the one moved)
    every = speedup_scores(db, target, hardware)
    with sqlite3.connect(isolated_db) as conn:
        other = _copied(conn, "workloads", "id = ?", workload, content_hash="another prompt set")
        first, solve_id = conn.execute("SELECT id, solve_id FROM validations ORDER BY id LIMIT 1").fetchone()
        moved = _copied(conn, "solves", "id = ?", solve_id, workload_id=other)
        conn.execute("UPDATE validations SET solve_id = ? WHERE id = ?", (moved, first))
    assert speedup_scores(db, target, hardware, other) == every[:1] and past_plans(every[1:]) >= MIN_RESIDUALS
    assert past_misses(db, target, hardware, workload) == every[1:]
    assert past_misses(db, target, hardware, other) == every


def _copied(conn: sqlite3.Connection, table: str, where: str, key: object, **changed: object) -> int:
    """A copy of the row of ``table`` ``where`` picks, with ``changed`` columns; its new id."""
    names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] != "id"]
    row = dict(zip(names, conn.execute(f"SELECT {', '.join(names)} FROM {table} WHERE {where}", (key,)).fetchone())) | changed
    cursor = conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
    return int(cursor.lastrowid)


def test_a_solve_is_validated_on_its_own_profile_after_a_newer_one(solved, prompts, tiny_dirs):
    # a newer profile of the same workload at another length: the older solve still predicts from its own
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    longer = [*FAST[:-4], "--max-new-tokens", "12", "--device", "cpu"]
    assert run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 6, *longer).exit_code == 0
    best = solved["plans"][0]
    report = json.loads(
        run(
            "validate",
            "--plan",
            best["id"],
            "--prompts",
            prompts,
            "--max-prompts",
            2,
            "--max-new-tokens",
            solved["max_new_tokens"],
            "--json",
        ).output
    )
    mine = next(p for p in report["plans"] if p["plan_id"] == best["id"])
    # tokens per round depend on acceptance and length alone, not on the prompts' contexts
    assert mine["predicted_mean_accepted_length"] == pytest.approx(best["predicted_mean_accepted_length"])


def test_the_measured_figure_is_the_workloads_time_over_its_tokens():
    """A plan's measured ms per token is each prompt's median over its repeats, weighted by the
    prompt's tokens: the workload's time over its tokens, which the latency model predicts. The
    median over the runs, what validate reported before, follows the typical prompt instead."""

    def r(ms: float, tokens: int) -> SimpleNamespace:
        return SimpleNamespace(ms_per_token=ms, total_tokens=tokens)

    runs = [r(40, 100), r(44, 100), r(42, 100), r(10, 300), r(12, 300), r(11, 300), r(30, 200), r(30, 200), r(90, 200)]
    assert workload_ms(runs, 3) == pytest.approx((42 * 100 + 11 * 300 + 30 * 200) / 600)
    assert statistics.median(x.ms_per_token for x in runs) == 30  # the old figure: 56% slower here
    assert workload_ms([r(20, 0), r(10, 50)]) == 10  # a run that made no token weighs nothing
    # the interval of the measured speed-up resamples the same figure: for a plan twice as fast on
    # every prompt it is that ratio, whatever the prompts drawn
    auto = [r(2 * x.ms_per_token, x.total_tokens) for x in runs]
    assert speedup_interval(auto, runs, 3) == pytest.approx((2.0, 2.0))
