"""The commands on the llama.cpp engine, with the packaged SmolLM2-135M GGUF (real model, slow).

generate with --check (speculative against autoregressive on the same engine), a drafter
re-quantized by llama.cpp's quantizer and cached, profile -> solve -> validate with profiles kept
apart from the torch engine's, and bad input refused in one line.
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli
from hsd_runtime.packaged import cache_dir, packaged_gguf, quantized_path

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIPPED, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")]

PROMPT = "Write a short poem about the sea."


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_generate_checks_speculative_against_autoregressive_on_llamacpp():
    code, out = _run(
        "generate", "--engine", "llamacpp", "--chain", "ngram,smollm2-135m", "--widths", "4",
        "--prompt", PROMPT, "--max-new-tokens", "32", "--check", "--json",
    )  # fmt: skip
    assert code == 0, out
    report = json.loads(out)
    assert report["engine"] == "llamacpp" and report["dtype"] == "gguf"
    assert len(report["tokens"]) == 32 and report["levels"][1]["forward_passes"] > 0
    check = report["check"]
    # llama.cpp's passes over several tokens round differently from its one-token passes: the
    # check reports the agreement and does not fail (measured agreement: BENCHMARKS.md)
    assert check["exact"] is False and 0 < check["agreement"] <= 1


def test_a_quantized_drafter_is_made_once_and_found_in_the_cache():
    chain = "smollm2-135m:quant=q8_0,smollm2-135m"
    made = quantized_path(packaged_gguf("smollm2-135m"), "q8_0")  # keyed by the source file: one per install
    stamps = []
    for _ in range(2):
        code, out = _run("generate", "--engine", "llamacpp", "--chain", chain, "--widths", "3", "--prompt", PROMPT,
                         "--max-new-tokens", "8", "--json")  # fmt: skip
        assert code == 0, out
        stamps.append(made.stat().st_mtime_ns)
    assert made.stat().st_size > 100e6 and stamps[0] == stamps[1]  # the second run found it, did not make it again


def test_profile_solve_and_validate_on_llamacpp(tmp_path, isolated_db):
    code, out = _run(
        "profile", "--engine", "llamacpp", "--models", "ngram,smollm2-135m:quant=q4_0,smollm2-135m", "--max-prompts", "2",
        "--max-new-tokens", "16", "--latency-grid", "1,2,4", "--context-lens", "32", "--repeats", "3", "--json",
    )  # fmt: skip
    assert code == 0, out
    summary = json.loads(out)
    assert summary["hardware"]["kernels"].startswith("llamacpp-")
    assert "smollm2-135m:quant=q4_0:engine=llamacpp" in out and "smollm2-135m:engine=llamacpp" in out
    code, out = _run("solve", "--json")
    assert code == 0, out
    assert all(level.endswith("engine=llamacpp") or level.startswith("ngram") for level in json.loads(out)["plans"][0]["chain"])
    code, out = _run("validate", "--candidates", "top-k", "--max-prompts", "1", "--max-new-tokens", "16", "--json")
    assert code == 0, out
    assert "measured_ms_per_token" in json.loads(out)["plans"][0]
    # the same models on the torch engine are other models: their profile is not this one
    code, out = _run("solve", "--target", "smollm2-135m")
    assert code != 0 and "Error:" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (("--chain", "smollm2-135m:layers=4,smollm2-135m"), "runs on the torch engine only"),
        (("--chain", "smollm2-135m:quant=int8,smollm2-135m"), "quant=int8 is the torch engine's"),
        (("--chain", "qwen2.5-coder-0.5b,smollm2-135m"), "different tokenizers"),
        (("--chain", "{dir},smollm2-135m"), "the llama.cpp engine runs a packaged alias or a .gguf file"),
        (("--chain", "{bad},smollm2-135m"), "is GGUF version 0; versions 2 and 3 are read"),
    ],
)
def test_bad_input_on_llamacpp_is_one_line(tmp_path, args, message):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)  # the magic bytes and nothing a reader can use
    args = tuple(a.format(dir=tmp_path, bad=bad) for a in args)
    code, out = _run("generate", "--engine", "llamacpp", *args, "--widths", "2", "--prompt", PROMPT, "--max-new-tokens", "4")
    assert code != 0 and message in out and "Traceback" not in out
    assert out.strip().count("\n") == 0, out


def test_a_gguf_file_is_read_as_it_is(tmp_path):
    """A .gguf path runs directly on llama.cpp: nothing is converted into the cache for it."""
    converted = set((cache_dir() / "converted").glob("*"))
    gguf = packaged_gguf("smollm2-135m")
    code, out = _run("generate", "--engine", "llamacpp", "--chain", f"ngram,{gguf}", "--widths", "3", "--prompt", PROMPT,
                     "--max-new-tokens", "8", "--json")  # fmt: skip
    assert code == 0, out
    assert {p for p in (cache_dir() / "converted").glob("*") if not p.name.endswith("-tokenizer")} <= converted


def test_the_demo_runs_on_llamacpp(tmp_path, isolated_db):
    plot = tmp_path / "demo.png"
    code, out = _run(
        "demo", "--engine", "llamacpp", "--family", "smollm2", "--max-prompts", "2", "--validate-prompts", "1",
        "--max-new-tokens", "16", "--rounds", "2", "--repeats", "1", "--plot", str(plot), "--json",
    )  # fmt: skip
    assert code == 0, out
    assert plot.stat().st_size > 0 and "smollm2-135m:quant=q4_0:engine=llamacpp" in out
