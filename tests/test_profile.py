"""``hsd-plan profile`` and ``hsd-plan profiles`` on tiny models, through the CLI."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from hsd_planner.profiling.acceptance import (
    VISIT_MAX,
    acceptance_from_logits,
    model_conditionals,
    ngram_acceptance,
    ngram_blocks,
    run_length_sums,
    start_survival,
    teacher_forced_logits,
    visited_run_sums,
)
from hsd_planner.profiling.pairs import pooled_logits
from hsd_runtime import CachePool, Hierarchy, SamplingConfig, ngram_lookup
from tests.helpers import QUICK_PROFILE, run
from tests.tiny import tiny_llama

FAST = QUICK_PROFILE


def count(db, table):
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i} w{i + 1}" for i in range(12)))
    return path


def models(tiny_dirs, *names):
    return ",".join(str(tiny_dirs[n]) if n in tiny_dirs else n for n in names)


def test_profile_measures_then_skips_on_rerun(tiny_dirs, prompt_file, isolated_db):
    args = ["profile", "--models", models(tiny_dirs, "ngram", "draft", "target"), "--prompts", prompt_file, *FAST, "--json"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    prompts = summary["workload"]["count"]
    # 3 models x 2 points of latency; per prompt 1 continuation for each of 2 verifiers + 3 pairs
    assert summary["measured"] == 3 * 2 + prompts * (2 + 3) and summary["skipped"] == 0
    assert {(a["drafter"], a["verifier"]) for a in summary["acceptance"]} == {
        ("ngram", str(tiny_dirs["draft"])),
        ("ngram", str(tiny_dirs["target"])),
        (str(tiny_dirs["draft"]), str(tiny_dirs["target"])),
    }
    for a in summary["acceptance"]:
        assert 0.0 <= a["alpha"] <= 1.0 and a["run_lengths"][0] == 1.0
        assert all(x >= y for x, y in zip(a["run_lengths"], a["run_lengths"][1:]))  # P(G >= g) decreases
    assert count(isolated_db, "acceptance_prompts") == 3 * prompts
    with sqlite3.connect(isolated_db) as con:  # the run lengths a decoder sees, for widths 1..64
        for (visited,) in con.execute("SELECT visited FROM acceptance"):
            tables = json.loads(visited)
            assert len(tables) == VISIT_MAX == 64 and all(t is None or (len(t) == b + 2 and t[0] == 1.0) for b, t in enumerate(tables))
        # the lookup's proposal lengths per width (P(L >= l), l = 0..b); a model always proposes b
        drafted = dict(con.execute("SELECT m.spec, a.drafted FROM acceptance a JOIN models m ON m.id = a.drafter_id"))
        assert json.loads(drafted[str(tiny_dirs["draft"])]) is None
        tables = json.loads(drafted["ngram"])
        assert len(tables) == VISIT_MAX and all(len(t) == b + 2 and t[0] == 1.0 for b, t in enumerate(tables))
        # the decoding loop's host work per pass, on every row of the models' curves; none for the lookup
        host = dict(con.execute("SELECT m.spec, MIN(l.host_ms) FROM latency l JOIN models m ON m.id = l.model_id GROUP BY m.spec"))
        assert host["ngram"] is None and host[str(tiny_dirs["draft"])] > 0 and host[str(tiny_dirs["target"])] > 0
        assert con.execute("SELECT COUNT(DISTINCT host_ms) FROM latency l JOIN models m ON m.id = l.model_id WHERE m.spec = ?",
                           (str(tiny_dirs["target"]),)).fetchone()[0] == 1  # fmt: skip
    again = json.loads(run(*args).stdout)
    assert again["measured"] == 0 and again["skipped"] == summary["measured"]
    forced = json.loads(run(*args, "--force").stdout)
    assert forced["measured"] == summary["measured"] and count(isolated_db, "acceptance_prompts") == 3 * prompts


def test_sampling_profile_and_text_summary(tiny_dirs, prompt_file):
    result = run(
        "profile",
        "--models",
        models(tiny_dirs, "draft", "target"),
        "--prompts",
        prompt_file,
        "--max-prompts",
        "2",
        "--mode",
        "sample",
        "--temperature",
        "0.8",
        *FAST,
    )
    assert result.exit_code == 0, result.output
    assert "acceptance alpha" in result.output and "c(1) ms" in result.output


def test_export_then_import_into_a_fresh_db_reproduces_the_rows(tiny_dirs, prompt_file, tmp_path):
    assert (
        run("profile", "--models", models(tiny_dirs, "ngram", "target"), "--prompts", prompt_file, "--max-prompts", "3", *FAST).exit_code
        == 0
    )
    exported = tmp_path / "export.json"
    assert run("profiles", "export", exported).exit_code == 0
    fresh = tmp_path / "fresh.db"
    first = run("profiles", "import", exported, "--db", fresh, "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["latency"] == 4
    again = json.loads(run("profiles", "import", exported, "--db", fresh, "--json").stdout)
    assert sum(again.values()) == 0  # merging twice adds nothing
    reexported = tmp_path / "re.json"
    run("profiles", "export", reexported, "--db", fresh)
    assert json.loads(reexported.read_text()) == json.loads(exported.read_text())
    shown = run("profiles", "show", "--db", fresh)
    assert "acceptance ngram ->" in shown.output


def test_every_profile_profile_stores_is_shown_exported_and_imported(tiny_dirs, tmp_path, isolated_db):
    """Specs with every option the torch engine takes, on prompts whose file name holds a tab: what
    profile stores, profiles show and export show and write, and an import reads back whole."""
    prompts = tmp_path / "code\tprompts.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i} w{i + 1}" for i in range(12)))
    draft, target = tiny_dirs["draft"], tiny_dirs["target"]
    specs = ["ngram:n=4:min=2", f"{draft}:quant=int8", f"{draft}:vocab=16", f"{target}:layers=2:dtype=fp32", str(target)]
    result = run("profile", "--models", ",".join(specs), "--prompts", prompts, "--max-prompts", "2", *FAST)
    assert result.exit_code == 0, result.output
    shown = run("profiles", "show")
    assert shown.exit_code == 0 and "code\\tprompts:profile" in shown.output, shown.output
    exported = tmp_path / "export.json"
    assert run("profiles", "export", exported).exit_code == 0
    assert {m["spec"] for m in json.loads(exported.read_text())["models"]} == set(specs)
    fresh = tmp_path / "fresh.db"
    assert run("profiles", "import", exported, "--db", fresh).exit_code == 0
    again = tmp_path / "again.json"
    assert run("profiles", "export", again, "--db", fresh).exit_code == 0
    assert json.loads(again.read_text()) == json.loads(exported.read_text())


def test_a_spec_too_long_to_store_is_refused_before_anything_loads(tiny_dirs, prompt_file, tmp_path, isolated_db):
    """A model path deep enough that its absolute spec passes the database's column is refused up
    front, not stored where profiles show and export would refuse it."""
    import shutil

    deep = tmp_path.joinpath(*["d" * 100] * 5) / "draft"
    shutil.copytree(tiny_dirs["draft"], deep)
    result = run("profile", "--models", f"{deep},{tiny_dirs['target']}", "--prompts", prompt_file, *FAST)
    assert result.exit_code == 1 and "characters as stored (its absolute path); a profile keeps at most 500" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not isolated_db.exists()


def test_import_of_a_wrong_schema_version_is_refused(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 0, "models": []}))
    result = run("profiles", "import", path)
    assert result.exit_code == 1 and "schema version 0" in result.output


@pytest.mark.parametrize(
    "names, extra, fragment",
    [
        (("draft", "no-such-model"), [], "unknown model 'no-such-model'"),
        (("other", "target"), [], "different tokenizers"),
        (("target",), [], "acceptance needs at least two models"),
        (("target", "target"), [], "listed twice"),
    ],
)
def test_bad_models_store_nothing(tiny_dirs, prompt_file, isolated_db, names, extra, fragment):
    result = run("profile", "--models", models(tiny_dirs, *names), "--prompts", prompt_file, *FAST, *extra)
    assert result.exit_code == 1 and fragment in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not isolated_db.exists() or count(isolated_db, "latency") == 0


def test_latency_only_profile_of_one_model(tiny_dirs, prompt_file, isolated_db):
    result = run("profile", "--models", models(tiny_dirs, "target"), "--prompts", prompt_file, "--skip-acceptance", *FAST)
    assert result.exit_code == 0, result.output
    assert count(isolated_db, "latency") == 2 and count(isolated_db, "acceptance") == 0


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("", "has no prompts"),
        ('{"prompt": "fine"}\n{"prompt": broken\n', "prompts.jsonl:2: the line is not JSON"),
        ('{"prompt": "fine", "id": ' + "9" * 5000 + "}\n", "prompts.jsonl:1: the line holds a number written with 5,000 characters"),
        ('{"text": "no prompt field"}\n', "prompts.jsonl:1: no 'prompt'"),
    ],
    ids=["empty", "broken", "long number", "no prompt"],
)
def test_bad_prompt_files(tiny_dirs, tmp_path, content, fragment):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    result = run("profile", "--models", models(tiny_dirs, "draft", "target"), "--prompts", path, *FAST)
    assert result.exit_code == 1 and fragment in result.output


def test_a_non_sqlite_db_is_refused_and_untouched(tiny_dirs, prompt_file, tmp_path):
    db = tmp_path / "notes.txt"
    db.write_text("not a database")
    result = run("profile", "--models", models(tiny_dirs, "draft", "target"), "--prompts", prompt_file, "--db", db, *FAST)
    assert result.exit_code == 1 and "not an SQLite database" in result.output
    assert db.read_text() == "not a database"


def _profile_process(tiny_dirs, prompt_file, db, *extra):
    cmd = [
        sys.executable,
        "-m",
        "hsd_planner",
        "profile",
        "--models",
        models(tiny_dirs, "ngram", "draft", "target"),
        "--prompts",
        str(prompt_file),
        "--db",
        str(db),
        *FAST,
        "--max-new-tokens",
        "40",
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )


def _ctrl_c_as_in_a_terminal() -> None:
    """Background jobs of a non-interactive shell (CI runners, nohup) ignore SIGINT, and children
    inherit that; restore the default so the profiler sees Ctrl-C as a user's terminal sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_rows(db, table, n, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if db.exists():
            try:
                if count(db, table) >= n:
                    return
            except sqlite3.OperationalError:
                pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("profiling made no progress")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_interrupted_profile_resumes_without_losing_work(tiny_dirs, tmp_path, sig):
    db = tmp_path / "interrupted.db"
    # enough work (90 profiled prompts x 3 pairs) that the signal lands mid-run on a fast machine
    prompt_file = tmp_path / "many.txt"
    prompt_file.write_text("\n".join(f"w{i % 40} w{(i * 7) % 40} w{i % 40} w{(i + 3) % 40}" for i in range(120)))
    proc = _profile_process(tiny_dirs, prompt_file, db)
    _wait_for_rows(db, "acceptance_prompts", 1, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert "rerun the same command to resume" in err
    with sqlite3.connect(db) as conn:
        kept = conn.execute("SELECT id, alpha_sum FROM acceptance_prompts ORDER BY id").fetchall()
    assert kept
    rerun = _profile_process(tiny_dirs, prompt_file, db, "--json")
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    summary = json.loads(out)
    assert summary["skipped"] >= len(kept)
    with sqlite3.connect(db) as conn:
        after = conn.execute("SELECT id, alpha_sum FROM acceptance_prompts ORDER BY id").fetchall()
    assert after[: len(kept)] == kept and len(after) == 3 * summary["workload"]["count"]


def test_two_processes_write_one_database_at_once(tiny_dirs, prompt_file, tmp_path):
    db = tmp_path / "shared.db"
    other = tmp_path / "other.txt"
    other.write_text("\n".join(f"w{i} w{i}" for i in range(20, 32)))
    a = _profile_process(tiny_dirs, prompt_file, db, "--json")
    b = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hsd_planner",
            "profile",
            "--models",
            models(tiny_dirs, "ngram", "draft", "target"),
            "--prompts",
            str(other),
            "--db",
            str(db),
            *FAST,
            "--max-new-tokens",
            "40",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    (out_a, err_a), (out_b, err_b) = a.communicate(timeout=300), b.communicate(timeout=300)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    n_a, n_b = json.loads(out_a)["workload"]["count"], json.loads(out_b)["workload"]["count"]
    assert count(db, "acceptance_prompts") == 3 * (n_a + n_b)
    assert count(db, "latency") == 3 * 2  # measured by one process, skipped or replaced by the other
    assert count(db, "models") == 3 and count(db, "hardware") == 1


def test_acceptance_math_on_known_cases():
    logits = torch.randn(5, 11)
    greedy, sample = SamplingConfig(), SamplingConfig(mode="sample")
    assert acceptance_from_logits(logits, logits, greedy).tolist() == [1.0] * 5
    assert torch.allclose(acceptance_from_logits(logits, logits, sample), torch.ones(5, dtype=torch.float64))
    disjoint = torch.full((1, 4), -1e9)
    p, q = disjoint.clone(), disjoint.clone()
    p[0, 0], q[0, 1] = 0.0, 0.0
    assert acceptance_from_logits(q, p, sample).tolist() == [0.0]
    # prompt "1 2 3 1 2", continuation "3 1": the n-gram drafter predicts 3 then 1
    p_logits = torch.nn.functional.one_hot(torch.tensor([3, 1]), 5).float()
    # block from t = 0: [3, 1], both right; from t = 1 the suffix "2 3" proposes [1]
    assert ngram_acceptance(ngram_blocks(2, [1, 2, 3, 1, 2], [3, 1], g_max=2), p_logits, greedy, g_max=2).tolist() == [
        [1.0, 1.0],
        [1.0, 0.0],
    ]
    sums, counts = run_length_sums(start_survival(model_conditionals(torch.tensor([1.0, 0.5, 1.0]), 3)))
    assert [s / c for s, c in zip(sums, counts)] == [1.0, 2.5 / 3, 1.0 / 2, 0.5 / 1]


def test_ngram_blocks_are_judged_where_they_land():
    """The block proposed at t is what the decoder drafts, not t's re-lookups at t + 1, t + 2."""
    greedy = SamplingConfig()
    prompt, continuation = [5, 6, 7, 8, 5, 6, 9], [7, 8]
    # at t = 0 the suffix "6 9" is new, "9" too: nothing; at t = 1 "9 7" new, "7" matches -> [8]
    p_logits = torch.nn.functional.one_hot(torch.tensor(continuation), 10).float()
    c = ngram_acceptance(ngram_blocks(2, prompt, continuation, g_max=2), p_logits, greedy, g_max=2)
    assert c.tolist() == [[0.0, 0.0], [1.0, 0.0]]
    # a block that runs ahead of a re-lookup: prompt "1 2 3 4 | 1 2", blocks copy "3 4 ..."
    prompt, continuation = [1, 2, 3, 4, 9, 1, 2], [3, 4, 5]
    p_logits = torch.nn.functional.one_hot(torch.tensor(continuation), 10).float()
    assert ngram_acceptance(ngram_blocks(2, prompt, continuation, g_max=3), p_logits, greedy, g_max=3)[0].tolist() == [1.0, 1.0, 0.0]


def _walk(accepted: list[list[int]], b: int, start: int = 0) -> tuple[int, int]:
    """(rounds, tokens) of a greedy decoder drafting b tokens a round over 0/1 conditionals, to
    the continuation's end."""
    m, t, rounds, tokens = len(accepted), start, 0, 0
    while t < m:
        g = 0
        while g < b and accepted[t][g]:
            g += 1
        rounds, tokens, t = rounds + 1, tokens + g + 1, t + g + 1
    return rounds, tokens


def _pooled(sums: list[list[float]], counts: list[float], bases: list[list[float]], b: int) -> float:
    """E[X] = sum_g P_b(G >= g) of one prompt's visited sums, as the planner pools them."""
    from hsd_planner.stats import pool_rows

    row = SimpleNamespace(positions=1, alpha_sum=0.0, run_sum=[], run_count=[], visit_sum=sums, visit_count=counts, visit_base=bases)
    table = pool_rows([row]).visited[b - 1]
    return sum(table)


def test_the_first_token_comes_from_a_round_not_the_prefill():
    """Why visited starts begin at position 0: the runtime's prefill emits no token, so every
    generation's first round drafts right after the prompt (N tokens alone take N rounds)."""
    result = Hierarchy([tiny_llama(0)], []).generate([0, 5, 9], 5, SamplingConfig())
    assert result.target_rounds == 5 and result.committed_per_round == [1] * 5


def test_visited_run_lengths_reproduce_a_greedy_decoder():
    """For 0/1 acceptance the visited distribution gives exactly the decoder's tokens per round,
    its rounds near the continuation's end included (the last position is rejected, so no run is
    cut off by the end)."""
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        m = 40 + trial
        bursty = (torch.rand(m, generator=gen) < 0.3).double()
        a = torch.repeat_interleave(bursty, 3)[:m]  # runs of three: bursty, unlike i.i.d.
        a[-1] = 0.0
        survival = start_survival(model_conditionals(a, 16))
        sums, counts, bases, _ = visited_run_sums(survival, b_max=8)
        accepted = model_conditionals(a, 16).int().tolist()
        for b in range(1, 9):
            rounds, tokens = _walk(accepted, b)
            assert counts[b - 1] == rounds
            assert abs(_pooled(sums, counts, bases, b) - tokens / rounds) < 1e-9


def test_a_reply_whose_end_is_unpredictable_is_priced_by_its_end_too():
    """A reply that restates its stub (drafts accepted) and then writes a body (rejected): the
    rounds in its last b positions are one-token rounds, and they count. Counting only the starts
    with room for all b positions gave 56 tokens in 18 rounds (3.1 a round) here, where the
    decoder gets 2.2."""
    a = torch.tensor([1.0] * 40 + [0.0] * 30)
    survival = start_survival(model_conditionals(a, 16))
    sums, counts, bases, _ = visited_run_sums(survival, b_max=15)
    rounds, tokens = _walk(model_conditionals(a, 16).int().tolist(), 15)
    assert (rounds, tokens) == (32, 70)
    assert abs(_pooled(sums, counts, bases, 15) - 70 / 32) < 1e-9


def test_a_lookups_proposal_lengths_are_the_decoders():
    """The lookup's visited proposal lengths and rounds are exactly those of a greedy decoder that
    drafts with it over the continuation (its text the verifier's): the rounds in which it
    proposes nothing, or fewer than b tokens, counted as they happen."""
    rng = random.Random(3)
    for _ in range(10):
        prompt = [rng.randrange(6) for _ in range(30)]
        continuation = [rng.randrange(6) if rng.random() < 0.5 else prompt[i % 30] for i in range(60)]
        m, order = len(continuation), 2
        p_logits = torch.nn.functional.one_hot(torch.tensor(continuation), 6).float()
        blocks = ngram_blocks(order, prompt, continuation, g_max=16)
        survival = start_survival(ngram_acceptance(blocks, p_logits, SamplingConfig(), g_max=16))
        visited = visited_run_sums(survival, b_max=6, lengths=[len(b) for b in blocks])
        for b in range(1, 7):
            t, proposed = 0, []
            while t < m:
                block = ngram_lookup(prompt + continuation[:t], order, min(b, m - t))
                g = next((i for i, x in enumerate(block) if x != continuation[t + i]), len(block))
                proposed.append(len(block))
                t += g + 1
            assert visited.counts[b - 1] == len(proposed)
            assert visited.drafted[b - 1] == [float(sum(n >= k for n in proposed)) for k in range(b + 1)]


def test_visited_run_lengths_match_a_sampled_decoder():
    """With fractional acceptance the visited sums are the decoder's expectation (Monte Carlo),
    over whole continuations (the last position is always rejected: no run is cut by the end)."""
    gen = torch.Generator().manual_seed(1)
    m = 30
    c = torch.rand(m, 8, generator=gen) ** 0.5
    for t in range(m):
        c[t, m - 1 - t :] = 0.0  # position m - 1 rejects, and nothing is drafted past the end
    survival = start_survival(c)
    sums, counts, bases, _ = visited_run_sums(survival, b_max=4)
    b, rounds, tokens, rng, cond = 4, 0, 0, random.Random(2), c.tolist()
    for _ in range(20000):
        t = 0
        while t < m:
            g = 0
            while g < b and rng.random() < cond[t][g]:
                g += 1
            rounds, tokens, t = rounds + 1, tokens + g + 1, t + g + 1
    assert abs(counts[b - 1] - rounds / 20000) < 0.02 * counts[b - 1]
    assert abs(_pooled(sums, counts, bases, b) - tokens / rounds) < 0.01 * tokens / rounds


def test_a_drafters_pass_over_a_continuation_keeps_the_prompt_its_own_continuation_prefilled():
    """Profiling runs a drafter's teacher-forced pass on the cache its own continuation used: the
    prompt stays, only the verifier's continuation (and the prompt's last token) is fed, and the
    rows are those of one pass over prompt + continuation."""
    drafter, verifier, pool = tiny_llama(1, layers=1), tiny_llama(0, layers=3), CachePool()
    prompt = [0, 5, 9, 5, 9, 13, 4]
    cand = SimpleNamespace(loaded=SimpleNamespace(model=drafter), spec="draft")
    Hierarchy([drafter], [], ["draft"], caches=pool).generate(prompt, 12)  # its own continuation
    continuation = Hierarchy([verifier], []).generate(prompt, 10).tokens
    stats = pool.get(drafter, "draft", 64).stats
    before = stats.tokens_fed
    rows = pooled_logits(pool, cand, prompt, continuation, 64)
    assert stats.tokens_fed - before == len(continuation) + 1
    assert torch.allclose(rows, teacher_forced_logits(drafter, prompt, continuation, 64), atol=1e-4)
