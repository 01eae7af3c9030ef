"""``hsd-plan generate`` through click's CliRunner on tiny models."""

import importlib
import json

import pytest

from tests.helpers import run


def test_generate_json_with_check(tiny_dirs):
    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}:layers=3,{tiny_dirs['target']}"
    result = run(
        "generate",
        "--chain",
        chain,
        "--widths",
        "3,2,2",
        "--prompt",
        "w1 w2 w3 w1 w2",
        "--max-new-tokens",
        12,
        "--check",
        "--json",
        "--dtype",
        "fp32",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["chain"][0] == "ngram" and out["widths"] == [3, 2, 2]
    assert len(out["tokens"]) == 12 and isinstance(out["text"], str)
    assert out["check"]["identical"] and out["check"]["exact"]
    assert [lv["model"] for lv in out["levels"]] == out["chain"]
    assert {"forward_passes", "proposed", "accepted"} <= set(out["levels"][0])
    assert out["measured_ms_per_token"] > 0 and out["prefill_ms"] >= 0


def test_generate_prints_text_and_level_table(tiny_dirs):
    result = run(
        "generate",
        "--chain",
        f"{tiny_dirs['draft']},{tiny_dirs['target']}",
        "--widths",
        "2",
        "--prompt",
        "w5 w6",
        "--max-new-tokens",
        6,
        "--check",
        "--dtype",
        "fp32",
    )
    assert result.exit_code == 0, result.output
    assert "ms/token" in result.output and "identical to the target" in result.output


def test_generate_samples(tiny_dirs):
    args = [
        "generate",
        "--chain",
        f"{tiny_dirs['draft']},{tiny_dirs['target']}",
        "--widths",
        "2",
        "--prompt",
        "w5",
        "--max-new-tokens",
        8,
        "--mode",
        "sample",
        "--temperature",
        "0.7",
        "--top-p",
        "0.9",
        "--seed",
        "3",
        "--json",
    ]
    first, second = run(*args), run(*args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["tokens"] == json.loads(second.stdout)["tokens"]


@pytest.mark.parametrize(
    "chain, extra, fragment",
    [
        ("nope-model", [], "unknown model 'nope-model'"),
        ("{other},{target}", ["--widths", "2"], "different tokenizers"),
        ("{draft},{target}", ["--widths", "2,2"], "needs 1 widths"),
        ("{draft},{target}", ["--widths", "two"], "neither a number nor a tree shape"),
        ("{draft},{target}", ["--widths", "2", "--check", "--mode", "sample"], "--check compares greedy"),
        ("{target}:layers=7", [], "layers=7 is out of range"),
        ("{target},ngram", [], "cannot be ngram"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tiny_dirs, chain, extra, fragment):
    result = run("generate", "--chain", chain.format(**tiny_dirs), "--prompt", "w1", *extra)
    assert result.exit_code != 0
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_empty_prompt(tiny_dirs):
    result = run("generate", "--chain", str(tiny_dirs["target"]), "--prompt", "  ")
    assert result.exit_code == 1 and "prompt is empty" in result.output


def test_a_failed_check_prints_the_report_then_one_error_line(tiny_dirs, monkeypatch):
    """A greedy check that differs where identity is guaranteed: the report, then ``Error: ...``, exit status 1."""
    from hsd_planner.generate import CheckResult

    command = importlib.import_module("hsd_planner.cli.generate")  # the module: the package's attribute is the command

    real = command.generate_text

    def differing(*args, **kwargs):
        report = real(*args, **kwargs)
        report.check = CheckResult(identical=False, first_divergence=3, agreement=0.5, exact=True)
        return report

    monkeypatch.setattr(command, "generate_text", differing)
    chain = f"ngram,{tiny_dirs['target']}"
    result = run("generate", "--chain", chain, "--widths", 3, "--prompt", "w1 w2 w3", "--max-new-tokens", 6, "--check", "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["check"]["first_divergence"] == 3
    assert result.stderr.strip() == "Error: speculative output differs from the target's greedy output at new token 3"
