"""``hsd-plan export``: each stack's configuration, the restricted re-solve, the plan document."""

from __future__ import annotations

import ast
import json
import os
import shlex
import sqlite3
import subprocess

import pytest
import yaml
from sqlalchemy.orm import Session

from hsd_planner.export import STACKS, PlanDocument, json_schema, plan_document
from hsd_planner.export.restrict import restricted_solve, restrictions, unloadable
from hsd_planner.export.schema import shipped_schema
from hsd_planner.plan import SolveConfig, predict
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.store.plans import load_plan
from hsd_planner.store.schema import Acceptance, Hardware, Latency, ModelRow, Setting, Workload
from hsd_runtime.terms.shape import TreeShape
from tests.helpers import one_line_error, run

# name -> (parameters, c(1) ms, ms per extra token in a pass); the target is "big"
MODELS = {
    "ngram": (0, 0.05, 0.0),
    "small:quant=int8": (9, 1.2, 0.1),
    "small": (10, 2.0, 0.1),
    "mid": (100, 8.0, 0.3),
    "big:layers=2": (500, 30.0, 1.0),
    "big": (1000, 100.0, 2.0),
}
ALPHA = {
    ("ngram", "small"): 0.4,
    ("ngram", "mid"): 0.4,
    ("ngram", "big"): 0.35,
    ("small:quant=int8", "big"): 0.7,
    ("small", "mid"): 0.85,
    ("small", "big"): 0.7,
    ("mid", "big"): 0.9,
    ("big:layers=2", "big"): 0.6,
}
SIBLINGS = {("small", "big"): [0.7, 0.9, 0.96, 0.98, 0.99, 0.99, 0.99, 0.99]}  # A(k): trees pay for this pair


def _store_profile(db, models: dict = MODELS, alpha: dict = ALPHA) -> None:
    """A profile written straight into ``db``: ``models`` (name -> parameters, c(1) ms, ms per
    extra token) timed on one machine, ``alpha`` per pair on one workload."""
    with Session(db) as s, s.begin():
        hw = Hardware(fingerprint="hw1", device="cpu", device_name="test CPU", threads=2, torch_version="2.13", capability="AVX2")
        wl = Workload(name="w", content_hash="h" * 64, count=8)
        setting = Setting(mode="greedy", temperature=1.0, top_p=1.0, dtype="fp32", max_new_tokens=32)
        rows = {name: ModelRow(spec=name, parameters=p) for name, (p, _, _) in models.items()}
        s.add_all([hw, wl, setting, *rows.values()])
        s.flush()
        for name, (_, c1, slope) in models.items():
            dtype = "-" if name.startswith("ngram") else "fp32"
            for ctx in (64, 512):
                for n in (1, 2, 4, 8, 16, 32, 64):
                    ms = (c1 + slope * (n - 1)) * (1.2 if ctx == 512 else 1.0)
                    key = {"model_id": rows[name].id, "hardware_id": hw.id, "dtype": dtype, "n_tokens": n, "context_len": ctx}
                    s.add(Latency(**key, median_ms=ms, p10_ms=ms, p90_ms=ms, repeats=1))
        for (d, v), a in alpha.items():
            s.add(
                Acceptance(
                    drafter_id=rows[d].id,
                    verifier_id=rows[v].id,
                    workload_id=wl.id,
                    setting_id=setting.id,
                    alpha=a,
                    positions=400,
                    prompts=8,
                    run_lengths=[a**g for g in range(65)],
                    siblings=SIBLINGS.get((d, v)),
                )
            )


@pytest.fixture
def solved(isolated_db):
    """A profile written straight into the database, and solves that store plans of every depth
    (0 to 3) and a draft tree: ``{description: plan id}``."""
    db = open_db(str(isolated_db))
    _store_profile(db)
    plans: dict[str, int] = {}
    for config in (
        SolveConfig(require=("ngram", "small", "mid"), t_max=6),
        SolveConfig(require=("small", "mid"), max_depth=2, t_max=6),
        SolveConfig(t_max=6),
    ):
        for p in solve_and_store(db, config=config).plans:
            depth = len(p.plan.widths)
            key = "tree" if depth and isinstance(p.plan.widths[0], TreeShape) else f"depth {depth}"
            plans.setdefault(key, p.id)
    assert {"depth 0", "depth 1", "depth 2", "depth 3", "tree"} <= set(plans), plans
    return db, plans


def _exported(plan_id, fmt, *extra):
    result = run("export", "--plan", plan_id, "--format", fmt, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("fmt", list(STACKS))
@pytest.mark.parametrize("kind", ["depth 0", "depth 1", "depth 2", "depth 3", "tree"])
def test_every_format_exports_what_its_stack_can_run(solved, fmt, kind):
    _, plans = solved
    out = _exported(plans[kind], fmt)
    stack = STACKS[fmt][0]
    assert (out["stack"], out["version"]) == (stack.name, stack.version)
    pick, exported = out["pick"], out["exported"]
    # one drafter level at most, no tree; a pick beyond that says why and is re-solved
    assert len(exported["widths"]) <= 1 and all(isinstance(w, int) for w in exported["widths"])
    assert bool(out["restriction"]) == (kind in ("depth 2", "depth 3", "tree") or any(":" in m for m in pick["chain"][:-1]))
    if not out["restriction"]:
        assert exported == pick
    text = run("export", "--plan", plans[kind], "--format", fmt)
    assert text.exit_code == 0
    assert f"for {stack.name} {stack.version}:" in text.output.splitlines()[1]  # stderr's header, then the file's comment
    payload, k = out["payload"], (exported["widths"] or [0])[0]
    drafter = exported["chain"][0] if k else None
    _check_payload(fmt, payload, drafter, k)


def _check_payload(fmt: str, payload: dict, drafter: str | None, k: int) -> None:
    lookup = drafter == "ngram"
    if fmt == "hf":
        from transformers import GenerationConfig

        config = GenerationConfig(**payload["generation_config"])
        assert config.do_sample is False
        if drafter is None:
            assert "assistant_model" not in payload["generate_kwargs"]
        elif lookup:
            assert (config.prompt_lookup_num_tokens, config.max_matching_ngram_size) == (k, 3)
        else:
            fixed = (config.num_assistant_tokens, config.num_assistant_tokens_schedule, config.assistant_confidence_threshold)
            assert fixed == (k, "constant", 0.0)  # k every round: no early stop on the assistant's confidence
            assert payload["generate_kwargs"]["assistant_model"] == drafter
    elif fmt == "vllm":
        spec = payload["speculative_config"]
        if drafter is None:
            assert spec is None and "--speculative-config" not in payload["command"]
        else:
            assert spec["num_speculative_tokens"] == k and spec["method"] == ("ngram" if lookup else "draft_model")
            assert json.loads(shlex.split(payload["command"])[-1]) == spec
    elif fmt == "sglang":
        args = payload["server_args"]
        if drafter is None:
            assert args == []
        else:
            assert args[args.index("--speculative-num-draft-tokens") + 1] == str(k + 1)  # SGLang counts the root too
            assert args[1] == ("NGRAM" if lookup else "STANDALONE")
            assert not any("match-window" in a for a in args)  # flags SGLang no longer has
    elif fmt == "llamacpp":
        model = drafter is not None and not lookup
        args = payload["server_args"]
        assert "request" not in payload  # the server reads no per-request speculative fields
        assert ("-md" in args) == model and not {"--draft-max", "--draft-min"} & set(args)  # removed: the server exits
        if model:  # -md alone drafts nothing
            assert args[:2] == ["--spec-type", "draft-simple"] and args[args.index("--spec-draft-n-max") + 1] == str(k)
            assert args[args.index("--spec-draft-n-min") + 1] == "0" and args[args.index("--spec-draft-p-min") + 1] == "0"
        elif lookup:
            assert args[:2] == ["--spec-type", "ngram-simple"] and args[args.index("--spec-ngram-simple-size-m") + 1] == str(k)
    elif fmt == "trtllm":
        spec = payload["speculative_config"]
        assert spec is None if drafter is None else spec["max_draft_len"] == k


def test_the_restricted_solve_is_the_best_expressible_plan(solved):
    db, plans = solved
    for kind in ("depth 3", "tree"):
        stored = load_plan(db, plans[kind])
        for versions in STACKS.values():
            for stack in versions:
                got = restricted_solve(stored.profile, stack, stored.solve.t_max, stored.solve.acceptance_model, stored.contexts)
                assert not restrictions(stored.profile, got, stack)
                # brute force: autoregressive, and every loadable drafter at every width
                target = stored.profile.target
                options = [((target,), ())] + [
                    ((m.name, target), (t,))
                    for m in stored.profile.models
                    if m.name != target and unloadable(m.name, m.lookup, stack) is None
                    for t in range(1, stored.solve.t_max + 1)
                ]
                best = min(predict(stored.profile, c, w, stored.solve.acceptance_model, stored.contexts).ms_per_token for c, w in options)
                assert got.prediction.ms_per_token == pytest.approx(best, rel=1e-12)
    # the legacy llama.cpp server has no n-gram drafter: its plan differs from the newest one's
    legacy = _exported(plans["depth 3"], "llamacpp", "--stack-version", "legacy")
    assert legacy["exported"]["chain"][0] != "ngram" and any("n-gram" in r for r in legacy["restriction"])


def test_llama_server_gets_only_a_lookup_profiled_as_its_ngram_simple_runs(isolated_db):
    # the plain lookup (longest suffix, earliest occurrence) is the pick; llama-server's
    # ngram-simple drafts otherwise, so its export is the best lookup profiled with its rule
    server_lookup = "ngram:n=2:rule=llama-server"
    models = {k: MODELS[k] for k in ("ngram", "small", "big")} | {server_lookup: (0, 0.05, 0.0)}
    alpha = {("ngram", "big"): 0.8, (server_lookup, "big"): 0.75, ("small", "big"): 0.5}
    db = open_db(str(isolated_db))
    _store_profile(db, models, alpha)
    pick = solve_and_store(db, config=SolveConfig(t_max=6, max_depth=1)).plans[0]
    assert pick.plan.chain[0] == "ngram"
    out = _exported(pick.id, "llamacpp")
    assert out["exported"]["chain"][0] == server_lookup and "rule=llama-server" in out["restriction"][0]
    args, k = out["payload"]["server_args"], out["exported"]["widths"][0]
    assert args == ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", str(k)]
    assert out["exported"]["predicted_ms_per_token"] > out["pick"]["predicted_ms_per_token"]
    assert _exported(pick.id, "vllm")["restriction"] == []  # vLLM's lookup is mapped from the plain one


def test_an_expressible_pick_is_exported_with_its_stored_prediction(solved):
    db, plans = solved
    stored = load_plan(db, plans["depth 1"])
    again = predict(
        stored.profile, stored.plan.chain, stored.plan.widths, stored.solve.acceptance_model, stored.contexts, stored.solve.max_new_tokens
    )
    assert stored.solve.max_new_tokens is not None  # ranked for the profiled length, not the steady state
    assert again.ms_per_token == pytest.approx(stored.plan.prediction.ms_per_token, rel=1e-12)


def test_plan_document_round_trips_and_ships_its_schema(solved, tmp_path):
    db, plans = solved
    out = tmp_path / "plan.json"
    result = run("export", "--plan", plans["tree"], "--format", "json", "--out", out)
    assert result.exit_code == 0, result.output
    doc = PlanDocument.model_validate_json(out.read_text())
    assert doc == plan_document(load_plan(db, plans["tree"]))
    assert PlanDocument.model_validate_json(doc.model_dump_json()) == doc
    assert doc.schema_version == 2 and "x" in str(doc.widths[0]) and doc.schedule[0].widths == doc.widths
    assert doc.profile.hardware.device_name == "test CPU" and doc.profile.dtype == "fp32" and doc.profile.workload.name == "w"
    assert {s.stack for s in doc.stacks} == {v[0].name for v in STACKS.values()} and all(s.restriction for s in doc.stacks)
    assert shipped_schema() == json_schema(), "run: python -m hsd_planner.export"


def test_model_map_names_the_served_models(solved):
    _, plans = solved
    drafter = _exported(plans["depth 1"], "vllm")["exported"]["chain"][0]
    out = _exported(plans["depth 1"], "vllm", "--model-map", "big=org/Big-Instruct", "--model-map", f"{drafter}=org/Drafter")
    assert out["payload"]["model"] == "org/Big-Instruct" and out["payload"]["speculative_config"]["model"] == "org/Drafter"
    assert "vllm serve org/Big-Instruct" in out["payload"]["command"]


def test_out_file_rules(solved, tmp_path, isolated_db):
    _, plans = solved
    target = tmp_path / "serve.sh"
    assert run("export", "--plan", plans["depth 1"], "--format", "sglang", "--out", target).exit_code == 0
    assert target.read_text().startswith("# hsd-plan plan") and "sglang.launch_server" in target.read_text()
    again = run("export", "--plan", plans["depth 1"], "--format", "vllm", "--out", target)
    assert again.exit_code == 1 and "pass --force" in again.output and "sglang" in target.read_text()
    assert run("export", "--plan", plans["depth 1"], "--format", "vllm", "--out", target, "--force").exit_code == 0
    assert "vllm serve" in target.read_text()
    link, fifo, folder = tmp_path / "link", tmp_path / "fifo", tmp_path / "dir"
    link.symlink_to(target)
    os.mkfifo(fifo)
    folder.mkdir()
    unlinked = run("export", "--plan", plans["depth 1"], "--format", "sglang", "--out", link)
    assert unlinked.exit_code == 1 and "is a symbolic link; pass --force" in unlinked.output
    for path, fragment in (
        (fifo, "is a FIFO"),
        (folder, "is a folder"),
        ("/dev/null", "is a character device"),
        (isolated_db, "an SQLite database"),
        (f"{isolated_db}-wal", "write-ahead log of the SQLite database"),
        (f"{folder}/", "names a folder"),
        ("", "is empty"),
    ):
        result = run("export", "--plan", plans["depth 1"], "--format", "vllm", "--out", path, "--force")
        assert result.exit_code == 1 and fragment in result.output and len(result.output.strip().splitlines()) == 1
    assert "vllm serve" in target.read_text() and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    # with --force a link is replaced itself: the file it pointed to is never written through it
    assert run("export", "--plan", plans["depth 1"], "--format", "sglang", "--out", link, "--force").exit_code == 0
    assert not link.is_symlink() and "sglang" in link.read_text() and "vllm serve" in target.read_text()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--plan", "999", "--format", "vllm"], "no plan with id 999"),
        (["--format", "tensorflow"], "Invalid value for '--format'"),
        (["--format", "vllm", "--model-map", "big"], "is not spec=served-name"),
        (["--format", "vllm", "--model-map", "=x"], "is not spec=served-name"),
        (["--format", "vllm", "--model-map", "nope=x"], "names nope, which is not in the plan"),
        (["--format", "vllm", "--stack-version", "0.1"], "no mapping for vLLM 0.1; known versions: 0.31"),
        (["--format", "json", "--model-map", "big=x"], "--model-map applies to a serving stack's format"),
    ],
)
def test_bad_input_is_one_line(solved, tmp_path, args, fragment):
    out = tmp_path / "never.txt"
    result = run("export", *args, "--out", out)
    assert result.exit_code in (1, 2) and fragment in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_export_without_a_database():
    result = run("export", "--format", "vllm")
    assert result.exit_code == 1 and result.output.startswith("Error:")


def test_solve_exports_its_pick(solved):
    out = json.loads(run("solve", "--t-max", "4", "--export", "trtllm", "--hardware", "hw1", "--json").stdout)
    assert out["export"]["plan_id"] == out["plans"][0]["id"] and out["export"]["version"] == "1.3.0rc24"
    text = run("solve", "--t-max", "4", "--export", "hf", "--hardware", "hw1")
    assert text.exit_code == 0 and "GenerationConfig(" in text.output and "transformers 5.23:" in text.output
    bad = run("solve", "--model-map", "big=x", "--hardware", "hw1")
    assert bad.exit_code == 1 and "give --export FORMAT too" in bad.output


# --- a name that holds a newline never leaves its string ---------------------------------------------

HOSTILE_TARGET = "/m/t\ntouch injected-target\n.gguf"
HOSTILE_DRAFTER = "/m/d\n__import__('os').system('touch injected-drafter')\n#\u2028x"


@pytest.mark.parametrize("stack", [s for versions in STACKS.values() for s in versions], ids=lambda s: f"{s.format}-{s.version}")
def test_a_name_with_a_newline_stays_inside_its_string_in_every_export(stack, tmp_path):
    """Whatever a name holds, the export's comment stays one line and every name stays one word of
    a command or one string of the code: running the file runs nothing it names."""
    from hsd_planner.export.stacks import Served, comment_line

    served = Served(HOSTILE_TARGET, HOSTILE_DRAFTER, False, 3, 0, "greedy", None)
    text = "\n".join(
        [comment_line(f"hsd-plan plan 1 for {stack.label}: {HOSTILE_DRAFTER} -> {HOSTILE_TARGET}"), *stack.render(served).lines]
    )
    assert text.splitlines()[0].startswith("# hsd-plan plan 1") and "\n" not in comment_line(HOSTILE_TARGET + HOSTILE_DRAFTER)
    if stack.format == "hf":  # imports and assignments only; the names are string constants
        tree = ast.parse(text)
        assert all(isinstance(node, (ast.ImportFrom, ast.Assign)) for node in tree.body), ast.dump(tree)
        names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert {HOSTILE_TARGET, HOSTILE_DRAFTER} <= names
    elif stack.format == "trtllm":  # YAML: the comment, then the drafter as one string
        config = yaml.safe_load(text)
        assert set(config) == {"disable_overlap_scheduler", "speculative_config"}
        assert config["speculative_config"]["speculative_model"] == HOSTILE_DRAFTER
    else:  # shell: each command a function that records its words
        stubs = "".join(f'{c}() {{ printf "%s\\0" "$@" >> words; }}\n' for c in ("vllm", "python", "llama-server"))
        (tmp_path / "export.sh").write_text(stubs + text + "\n")
        done = subprocess.run(["bash", "export.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["export.sh", "words"]  # nothing injected ran
        words = (tmp_path / "words").read_text().split("\0")
        assert HOSTILE_TARGET in words and (HOSTILE_DRAFTER in words or stack.format == "vllm")


def test_a_stored_name_with_a_newline_is_refused_by_export(solved, tmp_path, isolated_db):
    """A profile written past hsd-plan's checks (straight into the database) whose model name holds
    a newline: every export is one line that names it, and writes nothing."""
    _, plans = solved
    with sqlite3.connect(isolated_db) as con:
        con.execute("UPDATE models SET spec = 'mid' || char(10) || 'touch injected' WHERE spec = 'mid'")
        con.execute("UPDATE plans SET chain = replace(chain, '\"mid\"', '\"mid\\ntouch injected\"')")
    for fmt in ("hf", "vllm", "llamacpp", "json"):
        out = tmp_path / f"plan.{fmt}"
        result = run("export", "--plan", plans["depth 2"], "--format", fmt, "--out", out)
        one_line_error(result, "holds the control character U+000A")
        assert not out.exists()


def test_a_draft_model_that_stops_on_its_confidence_is_exported_to_llama_server_alone():
    """pmin=P is llama-server's draft-simple rule: exported with --spec-draft-p-min P (p_min 0 for a
    drafter that drafts k every round); the other stacks stop otherwise or never, so it is not theirs."""
    from hsd_planner.export.stacks import Served, stack_for

    served = Served("t.gguf", "d.gguf", False, 6, 0, "greedy", None, p_min=0.75, n_min=2)
    args = stack_for("llamacpp").render(served).payload["server_args"]
    assert args == ["--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "6", "--spec-draft-n-min", "2",
                    "--spec-draft-p-min", "0.75"]  # fmt: skip
    legacy = stack_for("llamacpp", "legacy").render(served).payload["server_args"]
    assert legacy == ["-md", "d.gguf", "--draft-max", "6", "--draft-min", "2", "--draft-p-min", "0.75"]
    plain = stack_for("llamacpp").render(Served("t.gguf", "d.gguf", False, 6, 0, "greedy", None)).payload["server_args"]
    assert plain[-2:] == ["--spec-draft-p-min", "0"]
    for fmt in ("hf", "vllm", "sglang", "trtllm"):
        assert "ten likeliest" in (unloadable("qwen2.5-coder-0.5b:pmin=0.75", False, stack_for(fmt)) or "")
    assert unloadable("qwen2.5-coder-0.5b:pmin=0.75", False, stack_for("llamacpp")) is None


def test_an_ngram_mod_lookup_is_exported_to_llama_server_alone(isolated_db):
    """ngram:rule=ngram-mod is llama-server's ngram-mod: exported with its n-gram size, its n_min
    and the plan's k as n_max, when it is the best lookup the server runs, with a note that the
    server's table serves all its requests; no other stack has a lookup that keeps state between
    rounds, so there the best other plan is exported."""
    from hsd_planner.export.stacks import stack_for
    from hsd_planner.store.profiles import load_profile

    mod = "ngram:n=2:rule=ngram-mod:nmin=3"
    simple = "ngram:n=2:rule=llama-server"
    models = {k: MODELS[k] for k in ("small", "big")} | {mod: (0, 0.05, 0.0), simple: (0, 0.05, 0.0)}
    alpha = {(mod, "big"): 0.8, (simple, "big"): 0.6, ("small", "big"): 0.5}
    db = open_db(str(isolated_db))
    _store_profile(db, models, alpha)
    # its drafted tables hold its drops, width by width: no n_min of a stopping model on top (which
    # would price a kept walk at a width below n_min as a one-token pass)
    assert load_profile(db, target="big")[0].model(mod).n_min == 0
    pick = solve_and_store(db, config=SolveConfig(t_max=6, max_depth=1)).plans[0]
    assert pick.plan.chain[0] == mod
    out = _exported(pick.id, "llamacpp")
    k = out["exported"]["widths"][0]
    assert out["restriction"] == [] and out["payload"]["server_args"] == [
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "3", "--spec-ngram-mod-n-max", str(k),
    ]  # fmt: skip
    # the server's one table for all requests is said, not priced
    assert len(out["caveat"]) == 1 and "one ngram-mod table for all its requests" in out["caveat"][0]
    for fmt in ("hf", "vllm", "sglang", "trtllm"):
        assert "keeps state between rounds" in (unloadable(mod, True, stack_for(fmt)) or "")
        assert _exported(pick.id, fmt)["exported"]["chain"][0] != mod
    assert "ngram:rule=ngram-mod" in (unloadable("ngram", True, stack_for("llamacpp")) or "")


@pytest.mark.parametrize("mod", ["ngram:n=2:rule=ngram-mod:nmin=3", "ngram:n=2:rule=llama-server+ngram-mod:nmatch=3"])
@pytest.mark.parametrize("alpha", [0.605, 0.8], ids=["tied", "ahead"])
def test_a_plan_without_ngram_mod_predicted_within_the_tie_goes_to_llama_server(isolated_db, mod, alpha):
    """llama-server shares ngram-mod's table across its requests, which a per-request price does not
    hold: where the best plan without it is predicted within SHARED_STATE_TIE of an ngram-mod pick,
    that plan is exported, saying why, and is the plan document's llama.cpp entry; a pick ahead by
    more stays, with its caveat."""
    from hsd_planner.export.exporter import SHARED_STATE_TIE, plan_document
    from hsd_planner.store.plans import load_plan

    simple = "ngram:n=2:rule=llama-server"
    models = {"big": MODELS["big"], mod: (0, 0.05, 0.0), simple: (0, 0.05, 0.0)}
    db = open_db(str(isolated_db))
    _store_profile(db, models, {(mod, "big"): alpha, (simple, "big"): 0.6})
    plans = solve_and_store(db, config=SolveConfig(t_max=6, max_depth=1, top_k=8)).plans
    pick = plans[0]
    assert pick.plan.chain[0] == mod
    best_simple = min((p.plan for p in plans if p.plan.chain[0] == simple), key=lambda p: p.prediction.ms_per_token)
    slower = best_simple.prediction.ms_per_token / pick.plan.prediction.ms_per_token - 1
    out = _exported(pick.id, "llamacpp")
    llamacpp = next(s for s in plan_document(load_plan(db, pick.id)).stacks if s.stack == "llama.cpp server")
    if alpha < 0.7:
        assert 0 < slower < SHARED_STATE_TIE
        assert out["exported"]["chain"][0] == simple and out["exported"]["widths"] == list(best_simple.widths)
        assert out["payload"]["server_args"][:2] == ["--spec-type", "ngram-simple"] and out["caveat"] == []
        assert len(out["restriction"]) == 1 and "shares the ngram-mod table" in out["restriction"][0]
        assert f"within {100 * slower:.1f} %" in out["restriction"][0]
        assert llamacpp.chain[0] == simple
    else:
        assert slower > SHARED_STATE_TIE
        assert out["exported"]["chain"][0] == mod and out["restriction"] == [] and len(out["caveat"]) == 1
        assert llamacpp.chain[0] == mod


@pytest.mark.parametrize("name", ["ngram:n=2:rule=ngram-map-k", "ngram:n=3:rule=ngram-map-k4v:hits=2"])
def test_an_ngram_map_lookup_is_exported_to_no_stack(isolated_db, name):
    """ngram:rule=ngram-map-k(4v) runs on hsd-plan's engines as llama-server's first request on a
    slot does; the server begins its later requests on the key map the last one left and drafts
    far less, so the export to it is the best plan without the lookup, saying why."""
    from hsd_planner.export.stacks import stack_for

    simple = "ngram:n=2:rule=llama-server"
    models = {k: MODELS[k] for k in ("small", "big")} | {name: (0, 0.05, 0.0), simple: (0, 0.05, 0.0)}
    db = open_db(str(isolated_db))
    _store_profile(db, models, {(name, "big"): 0.8, (simple, "big"): 0.6, ("small", "big"): 0.5})
    pick = solve_and_store(db, config=SolveConfig(t_max=6, max_depth=1)).plans[0]
    assert pick.plan.chain[0] == name
    assert "key map from one request to the next" in (unloadable(name, True, stack_for("llamacpp")) or "")
    out = _exported(pick.id, "llamacpp")
    assert out["exported"]["chain"][0] == simple and out["payload"]["server_args"][:2] == ["--spec-type", "ngram-simple"]
    assert out["caveat"] == []  # ngram-simple keeps nothing between requests
    for fmt in ("hf", "vllm", "sglang", "trtllm"):
        assert "keeps state between rounds" in (unloadable(name, True, stack_for(fmt)) or "")
