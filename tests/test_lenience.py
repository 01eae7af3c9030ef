"""Lenient verification (``lenience`` e < 1): opt-in, lossy by a stated law, exact at e = 1."""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch
from alembic.command import downgrade
from pydantic import ValidationError

from hsd_planner.store import open_db, resolve_url
from hsd_planner.store.db import alembic_config
from hsd_runtime import ChainError, Hierarchy, SamplingConfig, TreeShape, verify_sample
from tests.helpers import QUICK_PROFILE, one_line_error, run
from tests.law import ALPHA, PROMPT, exact_joint, g_test, law_model, lenient_joint, sample_counts

WIDTH = 2


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    return law_model(12), law_model(10, layers=2)  # drafter, target


def test_lenience_one_is_the_exact_rule_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        p = torch.softmax(torch.randn(4, 7, generator=gen) * 3, -1)
        q = torch.softmax(torch.randn(3, 7, generator=gen) * 3, -1)
        draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(3)]
        seed = int(torch.randint(0, 10**6, (1,), generator=gen))
        exact = verify_sample(draft, q, p, torch.Generator().manual_seed(seed))
        assert verify_sample(draft, q, p, torch.Generator().manual_seed(seed), 1.0) == exact
    assert SamplingConfig(mode="sample") == SamplingConfig(mode="sample", lenience=1.0)


def test_lenient_joint_reduces_to_the_target_law_at_one(pair):
    drafter, target = pair
    cfg = SamplingConfig(mode="sample")
    assert abs(lenient_joint(target, drafter, WIDTH, PROMPT, cfg) - exact_joint(target, PROMPT, cfg)).max() < 1e-7  # float32 warps


@pytest.mark.parametrize("lenience", [0.7, 0.4])
def test_lenient_chain_follows_its_stated_law_not_the_target(pair, lenience):
    drafter, target = pair
    cfg = SamplingConfig(mode="sample", lenience=lenience)
    stated = lenient_joint(target, drafter, WIDTH, PROMPT, cfg)
    assert abs(stated.sum() - 1.0) < 1e-6  # float32 warps, summed in float64
    sampled = sample_counts(Hierarchy([drafter, target], [WIDTH]), PROMPT, cfg)
    vocab = target.config.vocab_size
    assert g_test(sampled.counts, stated, vocab).pvalue > ALPHA  # the stated law
    assert g_test(sampled.counts, exact_joint(target, PROMPT, cfg), vocab).pvalue < ALPHA  # lossy: not the target's
    exact = sample_counts(Hierarchy([drafter, target], [WIDTH]), PROMPT, cfg.model_copy(update={"lenience": 1.0}))
    assert sampled.accepted[0] > exact.accepted[0]  # and it accepts more


def test_lenience_is_refused_where_it_has_no_meaning(pair):
    drafter, target = pair
    with pytest.raises(ValidationError, match="greedy decoding has no probabilities"):
        SamplingConfig(mode="greedy", lenience=0.5)
    with pytest.raises(ValidationError):
        SamplingConfig(mode="sample", lenience=0.0)
    tree = Hierarchy([drafter, target], [TreeShape((2, 2))])
    with pytest.raises(ChainError, match="verifies chains only"):
        tree.generate(PROMPT, 4, SamplingConfig(mode="sample", lenience=0.5))


def test_lenience_is_profiled_solved_validated_and_marked(tiny_dirs, tmp_path):
    """A lenient profile is its own setting; solve and validate read it back and say LOSSY."""
    db = tmp_path / "l.db"
    models = f"{tiny_dirs['draft']},{tiny_dirs['target']}"
    alpha = {}
    for e in ("1", "0.5"):
        result = run(
            "profile", "--models", models, "--db", db, "--mode", "sample", "--lenience", e, "--max-prompts", "3", *QUICK_PROFILE, "--json"
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        alpha[e] = next(a["alpha"] for a in report["acceptance"])
    assert alpha["0.5"] > alpha["1"]  # min(q, p / e) >= min(q, p)
    solved = run("solve", "--db", db, "--mode", "sample", "--lenience", "0.5", "--json")
    assert solved.exit_code == 0, solved.output
    assert json.loads(solved.stdout)["lenience"] == 0.5
    assert "LOSSY: lenience 0.5" in run("solve", "--db", db, "--mode", "sample", "--lenience", "0.5").output
    assert "LOSSY" not in run("solve", "--db", db, "--mode", "sample").output
    validated = run("validate", "--db", db, "--device", "cpu", "--max-prompts", "1", "--max-new-tokens", "4", "--repeats", "1", "--json")
    assert validated.exit_code == 0, validated.output
    assert json.loads(validated.stdout)["lenience"] == 1.0  # the newest solve: exact
    one_line_error(run("solve", "--db", db, "--mode", "sample", "--lenience", "0.7"), "with lenience 0.7")
    one_line_error(
        run("profile", "--models", models, "--db", db, "--lenience", "0.5", *QUICK_PROFILE), "greedy decoding has no probabilities"
    )
    generated = run(
        "generate", "--chain", models, "--widths", "2", "--prompt", "w1 w2", "--raw", "--mode", "sample",
        "--lenience", "0.7", "--device", "cpu", "--max-new-tokens", "6", "--json",
    )  # fmt: skip
    assert generated.exit_code == 0, generated.output
    assert json.loads(generated.stdout)["lenience"] == 0.7


def test_a_database_from_before_lenience_upgrades_with_every_row(tiny_dirs, tmp_path):
    """The settings table is rebuilt on SQLite; the rows that reference it must all survive
    (with foreign keys on, dropping the old copy would cascade into them)."""
    db = tmp_path / "old.db"
    models = f"{tiny_dirs['draft']},{tiny_dirs['target']}"
    assert run("profile", "--models", models, "--db", db, "--max-prompts", "2", *QUICK_PROFILE).exit_code == 0
    tables = ("acceptance", "acceptance_prompts", "continuations", "settings")

    def counts() -> dict[str, int]:
        with sqlite3.connect(db) as con:
            return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}

    before = counts()
    downgrade(alembic_config(resolve_url(str(db))), "0014_batch_sizes")
    open_db(str(db)).dispose()  # upgrades to head, foreign keys on as every hsd-plan connection has them
    assert counts() == before and all(before.values())
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT lenience FROM settings").fetchall() == [(1.0,)]
