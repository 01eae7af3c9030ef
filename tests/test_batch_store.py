"""Batch sizes end to end: c(n, b) rows and their migration, profile --batch-sizes, solve
--batch-sizes, the schedule exported to vLLM and TensorRT-LLM and in the plan document, and
validate --batch-sizes on tiny models."""

from __future__ import annotations

import json
import sqlite3

import pytest
from alembic.command import downgrade, upgrade
from click.testing import CliRunner
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from hsd_planner.cli import cli
from hsd_planner.export.schema import PlanDocument
from hsd_planner.store import open_db, resolve_url
from hsd_planner.store.db import alembic_config
from hsd_planner.store.exchange import export_document, import_document
from hsd_planner.store.plans import load_plan
from hsd_planner.store.profiles import load_profile
from hsd_planner.store.schedule import load_batch_plans
from hsd_planner.store.schema import Acceptance, Hardware, Latency, ModelRow, Setting, Workload
from hsd_planner.store.validations import plans_of_solve
from hsd_planner.validation import runner as validation_runner

FAST = ["--latency-grid", "1,2,4", "--context-lens", "8,32", "--repeats", "1", "--max-new-tokens", "6", "--device", "cpu"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _latency(**key) -> Latency:
    return Latency(**key, median_ms=1.0, p10_ms=1.0, p90_ms=1.0, repeats=1)


def test_migration_keys_latency_by_batch_size_and_downgrades_to_batch_one(isolated_db):
    url = resolve_url(str(isolated_db))
    cfg = alembic_config(url)
    open_db(str(isolated_db)).dispose()
    downgrade(cfg, "0012_validation_calibration")
    with sqlite3.connect(isolated_db) as conn:  # a database of before: one model, one plain latency row
        conn.execute(
            "INSERT INTO hardware (id, fingerprint, device, device_name, threads, torch_version, created_at) VALUES (1, 'hw', 'cpu', 'c', 2, '2', '2026-01-01')"
        )
        conn.execute("INSERT INTO models (id, spec, parameters, created_at) VALUES (1, 'm', 1, '2026-01-01')")
        conn.execute(
            "INSERT INTO latency (model_id, hardware_id, dtype, n_tokens, context_len, median_ms, p10_ms, p90_ms, repeats, created_at) "
            "VALUES (1, 1, 'fp32', 1, 64, 5.0, 5.0, 5.0, 1, '2026-01-01')"
        )
    upgrade(cfg, "head")
    db = open_db(str(isolated_db))
    with Session(db) as s, s.begin():
        assert [r.batch_size for r in s.query(Latency)] == [1]  # existing rows are b = 1
        s.add(_latency(model_id=1, hardware_id=1, dtype="fp32", n_tokens=1, context_len=64, batch_size=4))  # same key but b
    assert "batch_size" in {c["name"] for c in inspect(db).get_columns("plans")}
    db.dispose()
    downgrade(cfg, "0012_validation_calibration")
    with sqlite3.connect(isolated_db) as conn:
        assert conn.execute("SELECT n_tokens, median_ms FROM latency").fetchall() == [(1, 5.0)]  # b = 4 dropped, b = 1 kept
        columns = [row[1] for row in conn.execute("PRAGMA table_info(latency)")]
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert "batch_size" not in columns and "batch_plans" not in tables
    upgrade(cfg, "head")


def test_migration_moves_schedules_into_the_plan_table_and_back(isolated_db):
    cfg = alembic_config(resolve_url(str(isolated_db)))
    open_db(str(isolated_db)).dispose()
    downgrade(cfg, "0019_host_ms")
    prediction = "predicted_ms_per_token, predicted_mean_accepted_length, predicted_speedup"
    with sqlite3.connect(isolated_db) as conn:  # a solve of before: ranked plans, a schedule at b = 1 and 4, a validation
        conn.execute(
            "INSERT INTO hardware (id, fingerprint, device, device_name, threads, torch_version, created_at) VALUES (1, 'hw', 'cpu', 'c', 2, '2', '2026-01-01')"
        )
        conn.execute("INSERT INTO models (id, spec, parameters, created_at) VALUES (1, 't', 1, '2026-01-01')")
        conn.execute("INSERT INTO workloads (id, name, content_hash, count, created_at) VALUES (1, 'w', 'h', 4, '2026-01-01')")
        conn.execute("INSERT INTO settings (id, mode, temperature, top_p, dtype, max_new_tokens) VALUES (1, 'greedy', 1.0, 1.0, 'fp32', 8)")
        conn.execute(
            "INSERT INTO solves (id, target_id, workload_id, setting_id, hardware_id, acceptance_model, t_max, context_len, created_at) "
            "VALUES (1, 1, 1, 1, 1, 'empirical', 8, 64, '2026-01-01')"
        )
        for id_, rank, kind, chain, widths, ms in ((1, 0, "best", '["d", "t"]', "[4]", 5.0), (2, 1, "autoregressive", '["t"]', "[]", 9.0)):
            conn.execute(
                f"INSERT INTO plans (id, solve_id, rank, kind, chain, widths, {prediction}) VALUES (?, 1, ?, ?, ?, ?, ?, 2.0, ?)",
                (id_, rank, kind, chain, widths, ms, 9.0 / ms),
            )
        for b, chain, widths, ms in ((1, '["d", "t"]', "[3]", 5.5), (4, '["t"]', "[]", 3.0)):
            conn.execute(
                f"INSERT INTO batch_plans (solve_id, batch_size, chain, widths, {prediction}) VALUES (1, ?, ?, ?, ?, 1.5, 1.0)",
                (b, chain, widths, ms),
            )
        conn.execute(
            "INSERT INTO validations (id, solve_id, prompts_name, prompts, max_new_tokens, repeats, created_at) "
            "VALUES (1, 1, 'p', 2, 8, 1, '2026-01-01')"
        )
        conn.execute(
            "INSERT INTO validation_runs (validation_id, plan_id, chain, widths, predicted_ms_per_token, measured_ms_per_token, error, "
            "measured_speedup, predicted_mean_accepted_length, measured_mean_accepted_length, prefill_ms, tokens, levels, batch_size) "
            "VALUES (1, 1, '[\"d\", \"t\"]', '[4]', 5.0, 5.5, -0.1, 1.6, 2.0, 2.1, 3.0, 16, '[]', 1)"
        )
        before = conn.execute(f"SELECT solve_id, batch_size, chain, widths, {prediction} FROM batch_plans ORDER BY batch_size").fetchall()
    upgrade(cfg, "head")
    db = open_db(str(isolated_db))
    assert [(p.batch_size, p.plan.chain, p.plan.widths, p.plan.prediction.ms_per_token) for p in load_batch_plans(db, 1)] == [
        (1, ("d", "t"), (3,), 5.5),
        (4, ("t",), (), 3.0),
    ]
    assert [(p.id, p.kind, p.batch_size) for p in plans_of_solve(db, 1)] == [(1, "best", 1), (2, "autoregressive", 1)]
    assert load_plan(db).plan_id == 1  # the newest solve's pick, never a schedule's row
    assert "batch_plans" not in inspect(db).get_table_names()
    db.dispose()
    downgrade(cfg, "0019_host_ms")
    with sqlite3.connect(isolated_db) as conn:
        assert (
            conn.execute(f"SELECT solve_id, batch_size, chain, widths, {prediction} FROM batch_plans ORDER BY batch_size").fetchall()
            == before
        )
        assert conn.execute("SELECT id, kind FROM plans ORDER BY id").fetchall() == [(1, "best"), (2, "autoregressive")]
        assert conn.execute("SELECT plan_id FROM validation_runs").fetchall() == [(1,)]
        assert "batch_size" not in [row[1] for row in conn.execute("PRAGMA table_info(plans)")]
    upgrade(cfg, "head")


# a profile written straight into the database: a pass over b sequences of n tokens costs a fixed
# weight read plus compute in n * b; at b = 16 the fixed part is gone, so speculation cannot pay
MODELS = {"ngram": (0, 0.05, 0.0), "small": (10, 2.0, 0.2), "big": (1000, 20.0, 1.0)}
ALPHA = {("ngram", "small"): 0.3, ("ngram", "big"): 0.3, ("small", "big"): 0.8}
BATCHES = (1, 2, 4, 8, 16)


def _ms(name: str, n: int, b: int) -> float:
    _, fixed, per = MODELS[name]
    if b == 16:
        return (0.01 if name == "ngram" else 1.0) * 16 * n
    return fixed + per * n * b


@pytest.fixture
def batch_db(isolated_db):
    db = open_db(str(isolated_db))
    with Session(db) as s, s.begin():
        hw = Hardware(fingerprint="hw1", device="cpu", device_name="test CPU", threads=2, torch_version="2.13", capability="AVX2")
        wl = Workload(name="w", content_hash="h" * 64, count=8)
        setting = Setting(mode="greedy", temperature=1.0, top_p=1.0, dtype="fp32", max_new_tokens=32)
        models = {name: ModelRow(spec=name, parameters=p) for name, (p, _, _) in MODELS.items()}
        s.add_all([hw, wl, setting, *models.values()])
        s.flush()
        for name in MODELS:
            dtype = "-" if name == "ngram" else "fp32"
            for b in BATCHES:
                for n in (1, 2, 4, 8, 16):
                    key = dict(model_id=models[name].id, hardware_id=hw.id, dtype=dtype, n_tokens=n, context_len=64, batch_size=b)
                    ms = _ms(name, n, b)
                    s.add(Latency(**key, median_ms=ms, p10_ms=ms, p90_ms=ms, repeats=1))
        for (d, v), a in ALPHA.items():
            s.add(
                Acceptance(
                    drafter_id=models[d].id,
                    verifier_id=models[v].id,
                    workload_id=wl.id,
                    setting_id=setting.id,
                    alpha=a,
                    positions=400,
                    prompts=12,
                    run_lengths=[a**g for g in range(65)],
                )
            )
    return db


def test_batch_curves_are_read_back_and_survive_export_and_import(batch_db, tmp_path):
    profile, _ = load_profile(batch_db, hardware="hw1")
    assert "c(1) = 21.00 ms" in run("profiles", "show").output  # the plain curve's, not a batch's
    big = profile.model("big")
    assert sorted(big.latency) == [1, 2, 4, 8, 16] and big.latency[1](1, 64) == 21.0 and big.latency[4](2, 64) == 28.0
    doc = export_document(batch_db)
    fresh = open_db(str(tmp_path / "fresh.db"))
    import_document(fresh, doc)
    again, _ = load_profile(fresh, hardware="hw1")
    assert again.model("big").latency == big.latency


def test_solve_batch_sizes_stores_the_schedule_and_exports_it(batch_db):
    result = run("solve", "--batch-sizes", "1,2,4,8,16", "--t-max", "6", "--hardware", "hw1", "--json")
    assert result.exit_code == 0, result.output
    batch = json.loads(result.stdout)["batch"]
    assert [e["batch_size"] for e in batch["batch_sizes"]] == list(BATCHES)
    first, last = batch["schedule"][0], batch["schedule"][-1]
    assert first["min_batch"] == 1 and first["widths"]
    assert last["max_batch"] == 16 and last["widths"] == [] and last["chain"] == ["big"]
    assert batch["speculation_stops_paying_at"] == last["min_batch"]
    text = run("solve", "--batch-sizes", "1,4,16", "--hardware", "hw1")
    assert text.exit_code == 0 and "schedule:" in text.output and "speculation stops paying at batch size 16" in text.output
    newest = json.loads(run("solve", "--batch-sizes", "1,4,16", "--hardware", "hw1", "--json").stdout)["batch"]  # what export reads

    vllm = json.loads(run("export", "--format", "vllm", "--json").stdout)
    spec = vllm["payload"]["speculative_config"]
    table = spec["num_speculative_tokens_per_batch_size"]
    assert table[0][0] == 1 and table[-1][1] == 16 and table[-1][2] == 0  # [start, end, k], no speculation at 16
    assert all(a[1] + 1 == b[0] for a, b in zip(table, table[1:]))  # contiguous ranges
    assert spec["num_speculative_tokens"] == max(k for _, _, k in table) and spec["model"] == "small"
    ks = [k for _, _, k in table]
    assert ks == sorted(ks, reverse=True) and len(set(ks)) > 2
    # ranked for the solve's length as the solve's own plans were: where the best plan of a batch
    # size drafts with the same drafter, the table's k there is that plan's width
    k_at = {b: k for start, end, k in table for b in range(start, end + 1)}
    same = [e for e in newest["batch_sizes"] if e["chain"] == ["small", "big"]]
    assert same and all(k_at[e["batch_size"]] == e["widths"][0] for e in same)

    trt = run("export", "--format", "trtllm", "--json")
    trt_spec = json.loads(trt.stdout)["payload"]["speculative_config"]
    schedule = {int(b): k for b, k in trt_spec["draft_len_schedule"].items()}
    assert schedule[min(schedule)] == trt_spec["max_draft_len"] == max(ks) and schedule[16] == 0  # its smallest key holds the most
    # TensorRT-LLM's rule: a batch of s drafts the k of the smallest threshold >= s; it must give the vLLM table's k
    for start, end, k in table:
        for s in range(start, end + 1):
            assert schedule[min(t for t in schedule if t >= s)] == k
    yaml = run("export", "--format", "trtllm").output
    assert f"  draft_len_schedule: {{{min(schedule)}: " in yaml and ", 16: 0}" in yaml and "disable_overlap_scheduler: true" in yaml

    sglang = json.loads(run("export", "--format", "sglang", "--json").stdout)
    assert any("batch-size schedule" in r for r in sglang["restriction"])

    doc = PlanDocument.model_validate(json.loads(run("export", "--format", "json", "--json").stdout)["payload"])
    assert doc.schema_version == 2 and doc.schedule[-1].widths == [] and doc.schedule[-1].chain == ["big"]
    stacks = {s.stack: s for s in doc.stacks}
    assert [(e.min_batch, e.max_batch, e.k) for e in stacks["vLLM"].schedule] == [tuple(r) for r in table]
    assert stacks["SGLang"].schedule == []


def test_solve_batch_sizes_beyond_the_profile_is_refused(batch_db):
    result = run("solve", "--batch-sizes", "1,32", "--hardware", "hw1")
    assert result.exit_code == 1 and "batch size 32" in result.output and "--batch-sizes" in result.output
    assert run("solve", "--batch-sizes", "0,2").exit_code != 0


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n".join(f"w{i} w{i + 1} w{i} w{i + 1} w{i + 2}" for i in range(40)))
    return path


def test_profile_solve_and_validate_batch_sizes_on_tiny_models(tiny_dirs, prompts, isolated_db, monkeypatch):
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    result = run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 4, "--batch-sizes", "1,2,4", *FAST)
    assert result.exit_code == 0, result.output
    with Session(open_db(str(isolated_db))) as s:
        sizes = {r.batch_size for r in s.query(Latency)}
        assert sizes == {1, 2, 4} and s.query(Latency).filter_by(batch_size=4).count() == 3 * 2 * 3  # models x contexts x n
    shown = run("profiles", "show").output
    assert "batch sizes 2,4 too" in shown
    again = run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 4, "--batch-sizes", "1,2,4", *FAST, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["measured"] == 0  # resumed: nothing left to measure

    solved = run("solve", "--batch-sizes", "1,2,4", "--t-max", "3", "--json")
    assert solved.exit_code == 0, solved.output
    assert [e["batch_size"] for e in json.loads(solved.stdout)["batch"]["batch_sizes"]] == [1, 2, 4]

    fixed = ["--max-prompts", 3, "--max-new-tokens", 6, "--device", "cpu", "--prompts", prompts]
    result = run("validate", "--batch-sizes", "1,4", *fixed, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["batch_sizes"] == [1, 4] and {r["batch_size"] for r in report["plans"]} == {1, 4}
    for b in (1, 4):
        at = [r for r in report["plans"] if r["batch_size"] == b]
        # the default candidates (the pick and the best single drafter) at every batch size, beside the schedule's plan and
        # autoregressive decoding; a plan that decodes one sequence at a time is named among those not run
        kinds = {r["kind"] for r in at}
        assert any(r["chain"] == [str(tiny_dirs["target"])] for r in at)  # autoregressive decoding (under its first kind)
        assert all(r["plan_id"] is not None for r in at)
        assert "best" in kinds or any("at batch size 4" in why for why in report["skipped"])
    for r in report["plans"]:
        assert r["measured_ms_per_token"] > 0 and r["predicted_ms_per_token"] > 0
        assert r["measured_tokens_per_s"] == pytest.approx(1000 * r["batch_size"] / r["measured_ms_per_token"])
        if r["batch_size"] > 1:
            assert r["tokens"] % 6 == 0  # every sequence decodes exactly --max-new-tokens
        if not r["widths"]:
            assert r["measured_speedup"] == 1.0 and r["measured_mean_accepted_length"] == 1.0
    with Session(open_db(str(isolated_db))) as s:
        from hsd_planner.store.schema import ValidationRun

        assert {r.batch_size for r in s.query(ValidationRun).filter_by(validation_id=report["validation_id"])} == {1, 4}

    # refusals change nothing, and come before any plan runs
    monkeypatch.setattr(validation_runner, "_measure", lambda *_: pytest.fail("a plan ran before the refusal"))
    with sqlite3.connect(isolated_db) as con:  # the target's curve at b = 4 gone: b = 3 cannot be priced
        con.execute(f"DELETE FROM latency WHERE batch_size = 4 AND model_id = (SELECT id FROM models WHERE spec = '{tiny_dirs['target']}')")
        con.commit()
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before, counts = isolated_db.read_bytes(), _rows(isolated_db)
    for sizes, fragment in (("8", "outside the schedule"), ("2,3", f"no latency of {tiny_dirs['target']} at batch size 3")):
        result = run("validate", "--batch-sizes", sizes, *fixed)
        assert result.exit_code == 1 and fragment in result.output and len(result.output.strip().splitlines()) == 1, result.output
        assert isolated_db.read_bytes() == before and _rows(isolated_db) == counts


def test_validate_runs_the_plans_asked_for_at_every_batch_size(tiny_dirs, prompts, isolated_db):
    """--plan and --candidates choose the plans at every batch size, and one plan is predicted
    alike by validate and validate --batch-sizes 1 (one runner, one prediction rule)."""
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    result = run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 4, "--batch-sizes", "1,2", *FAST)
    assert result.exit_code == 0, result.output
    solved = run("solve", "--t-max", "3", "--no-trees", "--json")  # no schedule: the plans asked for, and the baseline
    assert solved.exit_code == 0, solved.output
    plans = {p["id"]: p for p in json.loads(solved.stdout)["plans"]}
    chosen = next(i for i, p in plans.items() if p["widths"])  # a speculative plan (the best single drafter may be none)
    auto = next(i for i, p in plans.items() if p["kind"] == "autoregressive")
    fixed = ["--max-prompts", 2, "--max-new-tokens", 6, "--device", "cpu", "--prompts", prompts, "--json"]

    plain = json.loads(run("validate", "--plan", chosen, *fixed).stdout)
    one = run("validate", "--plan", chosen, "--batch-sizes", "1", *fixed)
    assert one.exit_code == 0, one.output
    one = json.loads(one.stdout)
    assert [(r["plan_id"], r["batch_size"]) for r in plain["plans"]] == [(chosen, 1), (auto, 1)]
    assert [(r["plan_id"], r["batch_size"]) for r in one["plans"]] == [(chosen, 1), (auto, 1)]
    for a, b in zip(plain["plans"], one["plans"]):
        assert a["predicted_ms_per_token"] == b["predicted_ms_per_token"] and a["predicted_speedup"] == b["predicted_speedup"]

    both = json.loads(run("validate", "--plan", chosen, "--batch-sizes", "1,2", *fixed).stdout)
    assert [(r["plan_id"], r["batch_size"]) for r in both["plans"]] == [(chosen, 1), (auto, 1), (chosen, 2), (auto, 2)]
    assert both["plans"][0]["predicted_ms_per_token"] == plain["plans"][0]["predicted_ms_per_token"]

    every = run("validate", "--candidates", "all", "--batch-sizes", "2", *fixed)
    assert every.exit_code == 0, every.output
    ran = {(tuple(r["chain"]), tuple(r["widths"])) for r in json.loads(every.stdout)["plans"]}
    assert ran == {(tuple(p["chain"]), tuple(p["widths"])) for p in plans.values()}  # chains only: every plan runs at b = 2


def _rows(db) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def test_the_batch_timer_feeds_n_tokens_per_sequence_every_pass(tiny_dirs):
    from hsd_planner.profiling.batch import BatchPassTimer
    from hsd_runtime import ModelLoader

    model = ModelLoader(device="cpu", dtype="fp32").load(str(tiny_dirs["target"])).model
    timer = BatchPassTimer(model, 16, 3)
    fed, feed = [], timer._cache.feed_rows

    def spy(tokens, starts, keep):
        fed.append(([len(t) for t in tokens], starts, keep))
        return feed(tokens, starts, keep)

    timer._cache.feed_rows = spy
    for n in (1, 1, 4, 4, 1):
        assert timer(n) > 0
        # a pass of n tokens for each of the 3 sequences after the same 16 cached, every row's logits asked for
        assert fed[-1] == ([n] * 3, [16] * 3, n)
    assert len(fed) == 5


def test_a_validation_at_several_batch_sizes_prints_each_batch():
    from hsd_planner.cli.render import format_validation
    from hsd_planner.plan import Plan, Prediction
    from hsd_planner.validation import PlanResult, ValidationReport

    def result(plan_id, kind, chain, widths, pred, meas, b):
        return PlanResult(plan_id, kind, Plan(chain, widths, pred), meas, 2.0, 1.2, 40.0, 192, [], batch_size=b)

    plans = [
        result(1, "best", ("ngram", "t"), (3,), Prediction(20.0, 2.1, 1.5), 25.0, 1),
        result(2, "autoregressive", ("t",), (), Prediction(30.0, 1.0, 1.0), 30.0, 1),
        result(5, "schedule", ("ngram", "t"), (2,), Prediction(20.0, 2.1, 1.5), 25.0, 4),
        result(2, "autoregressive", ("t",), (), Prediction(30.0, 1.0, 1.0), 30.0, 4),
    ]
    skipped = ["plan 3 (d[3x2x1] -> t) at batch size 4: a draft tree decodes one sequence at a time"]
    report = ValidationReport(3, 1, "t", "w", "p:validate", 4, 48, [48] * 4, "greedy", "empirical", plans, 1, skipped=skipped)
    text = format_validation(report)
    assert text.splitlines()[1].split()[:2] == ["batch", "plan"]
    assert "ngram[2] -> t" in text and "-20.0%" in text and "160.0" in text  # b = 4 sequences at 25 ms per token each
    assert "not run: plan 3" in text and "(pick: plan 1 at batch size 1)" in text
    assert report.batch_sizes == [1, 4] and report.to_dict()["skipped"] == skipped
    assert report.regret == pytest.approx(0.0)  # the pick against the plans beside it, at batch size 1
