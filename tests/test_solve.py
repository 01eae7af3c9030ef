"""``hsd-plan solve`` on a real profile of tiny models, and the planner API without a database."""

import json
import sqlite3

import pytest

from hsd_planner import Profile, SolveConfig, predict, solve
from hsd_planner.plan.latency import Level, RunLengths, hierarchy_latency
from tests.helpers import SOLVABLE_PROFILE, run

FAST = SOLVABLE_PROFILE


@pytest.fixture
def profiled(tiny_dirs, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i} w{i + 1}" for i in range(8)))
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    result = run("profile", "--models", chain, "--prompts", prompts, *FAST)
    assert result.exit_code == 0, result.output
    return tiny_dirs


def test_a_solve_ranks_for_a_length_on_the_acceptance_profiled_at_it(profiled, tmp_path, isolated_db):
    prompts = tmp_path / "p.txt"  # the fixture's prompts, profiled again at 10 new tokens
    chain = f"ngram,{profiled['draft']},{profiled['target']}"
    longer = [*FAST[:-4], "--max-new-tokens", "10", "--device", "cpu"]
    assert run("profile", "--models", chain, "--prompts", prompts, *longer).exit_code == 0

    def solved(*args: str) -> tuple[int | None, int]:
        report = json.loads(run("solve", "--t-max", "4", "--json", *args).stdout)
        with sqlite3.connect(isolated_db) as conn:
            (length,) = conn.execute(
                "SELECT settings.max_new_tokens FROM solves JOIN settings ON settings.id = solves.setting_id WHERE solves.id = ?",
                (report["solve_id"],),
            ).fetchone()
        return report["max_new_tokens"], length

    assert solved() == (10, 10)  # the newest profile, and its own length
    assert solved("--max-new-tokens", "6") == (6, 6)  # the older profile measured at 6 tokens
    assert solved("--max-new-tokens", "7") == (7, 10)  # no profile at 7: the newest


def test_solve_prints_and_stores_plans(profiled, isolated_db):
    result = run("solve", "--t-max", "4", "--top", "3", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["target"] == str(profiled["target"])
    assert report["chain"][-1] == report["target"] and len(report["widths"]) == len(report["chain"]) - 1
    kinds = [p["kind"] for p in report["plans"]]
    assert kinds[0] == "best" and "autoregressive" in kinds and "single" in kinds
    best = report["plans"][0]
    # singles are re-predicted separately: equal plans may differ in the last bits
    assert best["predicted_ms_per_token"] <= min(p["predicted_ms_per_token"] for p in report["plans"]) * (1 + 1e-9)
    with sqlite3.connect(isolated_db) as conn:
        stored = conn.execute("SELECT id, kind, predicted_ms_per_token FROM plans ORDER BY rank").fetchall()
    assert [(r[0], r[1]) for r in stored] == [(p["id"], p["kind"]) for p in report["plans"]]
    text = run("solve", "--acceptance", "iid", "--max-depth", "1")
    assert text.exit_code == 0 and "autoregressive" in text.output
    forced = json.loads(run("solve", "--require", str(profiled["draft"]), "--exclude", "ngram", "--json").stdout)
    assert all(str(profiled["draft"]) in p["chain"] for p in forced["plans"] if p["kind"] in ("best", "top"))
    assert all("ngram" not in p["chain"] for p in forced["plans"])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--target", "nope-model"], "no profile for target nope-model"),
        (["--mode", "sample"], "no acceptance profile for sample decoding"),
        (["--workload", "missing"], "no workload named 'missing'"),
        (["--t-max", "0"], "'--t-max': 0 is not in the range 1<=x<=64"),
        (["--t-max", "100000"], "100000 is not in the range 1<=x<=64"),
        (["--require", "ngram:n=9"], "required model ngram:n=9 is not among"),
    ],
)
def test_solve_bad_input(profiled, args, fragment):
    result = run("solve", *args)
    assert result.exit_code in (1, 2) and fragment in result.output  # 2: a usage error (an option out of range)
    assert len(result.output.strip().splitlines()) == 1


def test_solve_without_any_profile():
    result = run("solve")
    assert result.exit_code == 1 and "run hsd-plan profile first" in result.output


def test_target_without_acceptance_against_it(profiled, tmp_path):
    # a model with a latency profile but no acceptance data against it
    lone = f"{profiled['draft']}:layers=1"
    assert run("profile", "--models", lone, "--skip-acceptance", *FAST).exit_code == 0
    result = run("solve", "--target", lone)
    assert result.exit_code == 1 and f"no model has acceptance data against the target {lone}" in result.output


PROFILE = {
    "target": "big",
    "models": [
        {"name": "ngram", "lookup": True, "latency": {64: {1: 0.05, 8: 0.05}}},
        {"name": "small", "latency": {64: {1: 4.0, 8: 4.4}, 512: {1: 5.0, 8: 5.6}}},
        {"name": "big", "latency": {64: {1: 30.0, 8: 33.0}, 512: {1: 34.0, 8: 38.0}}},
    ],
    "acceptance": [
        {"drafter": "ngram", "verifier": "small", "alpha": 0.3},
        {"drafter": "ngram", "verifier": "big", "alpha": 0.3},
        {"drafter": "small", "verifier": "big", "alpha": 0.8, "run_lengths": [1.0, 0.8, 0.7, 0.65, 0.6]},
    ],
}


def test_planner_api_without_a_database():
    profile = Profile.model_validate(PROFILE)
    sol = solve(profile, SolveConfig(t_max=6, acceptance="iid", context_len=64))
    assert sol.autoregressive.prediction.ms_per_token == 30.0
    assert sol.best.prediction.ms_per_token < sol.best_single.prediction.ms_per_token * 1.0000001
    again = predict(profile, list(sol.best.chain), list(sol.best.widths), acceptance="iid", context_len=64)
    assert again.ms_per_token == pytest.approx(sol.best.prediction.ms_per_token)
    # the cost curve interpolates in n and in context length
    assert profile.model("big").latency[1](4, 288) == pytest.approx((31.2857142857 + 35.7142857143) / 2, rel=1e-6)
    # empirical runs are used when given
    emp = predict(profile, ["small", "big"], [3], acceptance="empirical", context_len=64)
    levels = [Level(lambda n: 4.0 + 0.4 * (n - 1) / 7), Level(lambda n: 30 + 3 * (n - 1) / 7, RunLengths([1.0, 0.8, 0.7, 0.65, 0.6]))]
    assert emp.ms_per_token == pytest.approx(hierarchy_latency(levels, [3]).ms_per_token)


def test_planner_api_errors():
    profile = Profile.model_validate(PROFILE)
    with pytest.raises(Exception, match="no latency profile for huge"):
        predict(profile, ["small", "huge"], [2])
    with pytest.raises(Exception, match="no acceptance data for big verified by small"):
        predict(profile, ["big", "small"], [2])


def test_default_context_comes_from_the_workload(profiled, isolated_db):
    with sqlite3.connect(isolated_db) as con:
        lengths = json.loads(con.execute("SELECT prompt_tokens FROM workloads").fetchone()[0])
    assert len(lengths) == 6 and all(n > 0 for n in lengths)  # the profiling split of 8 prompts
    report = json.loads(run("solve", "--json").stdout)
    expected = sorted(n + 6 // 2 for n in lengths)  # FAST continues each prompt by 6 tokens
    assert report["context_len"] == int((expected[2] + expected[3]) / 2)
    named = json.loads(run("solve", "--context-len", 32, "--json").stdout)
    assert named["context_len"] == 32


def test_solve_on_a_curated_profile_file_finishes():
    """An in-memory database has no WAL; opening one must not wait for a mode it can never get."""
    import subprocess
    import sys
    from pathlib import Path

    curated = Path(__file__).resolve().parents[1] / "profiles" / "amd-epyc-avx512bf16-smollm2-builtin.json"
    out = subprocess.run(
        [sys.executable, "-m", "hsd_planner", "solve", "--profile-file", str(curated), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["chain"][-1] == "smollm2-135m"


def test_a_pick_on_few_prompts_says_its_sample_is_thin(profiled, isolated_db):
    from hsd_planner.solving import THIN_PROMPTS, SolveReport

    draft, target = str(profiled["draft"]), str(profiled["target"])
    report = json.loads(run("solve", "--require", draft, "--exclude", "ngram", "--json").stdout)
    assert report["chain"] == [draft, target]
    with sqlite3.connect(isolated_db) as con:
        prompts, positions = con.execute(
            "SELECT a.prompts, a.positions FROM acceptance a JOIN models d ON a.drafter_id = d.id JOIN models v ON a.verifier_id = v.id"
            " WHERE d.spec = ? AND v.spec = ?",
            (draft, target),
        ).fetchone()
    assert (report["sample_prompts"], report["sample_positions"]) == (prompts, positions) and prompts == 6
    assert report["thin_sample"] and THIN_PROMPTS > 6
    text = run("solve", "--require", draft, "--exclude", "ngram").output
    assert "rests on 6 prompts" in text and "--max-prompts" in text
    enough = SolveReport(1, "t", "w", "hw", "greedy", None, "empirical", 256, [], sample_prompts=THIN_PROMPTS)
    assert not enough.thin_sample and not SolveReport(1, "t", "w", "hw", "greedy", None, "empirical", 256, []).thin_sample
