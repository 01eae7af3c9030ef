"""The packaged real models (slow: minutes on 2 cores)."""

import json
import subprocess

import pytest
import torch

from hsd_planner.prompts import encode_prompt
from hsd_runtime import ModelLoader, TreeShape, build_hierarchy

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain why the sky is blue in two sentences.",
    "List three uses of a paper clip, then repeat the list.",
]


@pytest.fixture(scope="module")
def loader():
    return ModelLoader(device="cpu", dtype="fp32")


def test_smollm2_autoregressive_equals_transformers_generate(loader):
    model = loader.load("smollm2-135m")
    hierarchy, tokenizer = build_hierarchy(["smollm2-135m"], [], loader)
    ids = encode_prompt(tokenizer, PROMPTS[0])
    ours = hierarchy.generate(ids, 24).tokens
    theirs = model.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids) :].tolist()
    assert ours == theirs[: len(ours)]


def test_second_load_of_smollm2_reads_the_cache_and_never_converts(loader, monkeypatch):
    from transformers import AutoModelForCausalLM

    from hsd_runtime.models.packaged import converted_dir, packaged_gguf

    first = loader.load("smollm2-135m")  # converts the GGUF once, if the cache is cold
    cached = converted_dir(packaged_gguf("smollm2-135m"))
    stamps = {p: p.stat().st_mtime_ns for p in cached.rglob("*") if p.is_file()}
    calls = []
    real = AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **kw: calls.append((a, kw)) or real(*a, **kw))
    second = ModelLoader(device="cpu", dtype="fp32").load("smollm2-135m")
    assert calls and not any("gguf_file" in kw for _, kw in calls)  # loaded from the converted directory, not the GGUF
    assert {p: p.stat().st_mtime_ns for p in cached.rglob("*") if p.is_file()} == stamps  # nothing rewritten
    emb = lambda m: m.model.get_input_embeddings().weight  # noqa: E731
    assert torch.equal(emb(first), emb(second))


def test_gemma3_loads_and_generates():
    loader = ModelLoader(device="cpu", dtype="fp32")
    target, tokenizer = build_hierarchy(["gemma3-270m"], [], loader)
    ids = encode_prompt(tokenizer, "The capital of France is")
    reference = target.generate(ids, 12).tokens
    for widths in ([3], [TreeShape((2, 2))]):  # a chain, and a tree (sliding-window layers settle by cropping)
        hierarchy, _ = build_hierarchy(["gemma3-270m:layers=6", "gemma3-270m"], widths, loader)
        result = hierarchy.generate(ids, 12)
        assert len(result.tokens) >= 1 and result.tokens == reference


@pytest.mark.parametrize(
    "chain, widths", [("ngram,smollm2-135m:layers=8,smollm2-135m", "4,2"), ("smollm2-135m:layers=8,smollm2-135m", "3x2x1")]
)
def test_generate_command_as_a_user_runs_it(chain, widths):
    out = subprocess.run(
        [
            "hsd-plan",
            "generate",
            "--chain",
            chain,
            "--widths",
            widths,
            "--prompt",
            "Name the planets of the solar system.",
            "--max-new-tokens",
            "32",
            "--check",
            "--json",
            "--dtype",
            "fp32",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["check"]["identical"] and len(report["tokens"]) == 32


def test_profile_real_models_on_three_prompts(tmp_path):
    db = tmp_path / "real.db"
    out = subprocess.run(
        [
            "hsd-plan",
            "profile",
            "--models",
            "ngram,smollm2-135m:layers=2,smollm2-135m",
            "--max-prompts",
            "3",
            "--max-new-tokens",
            "24",
            "--latency-grid",
            "1,4,16",
            "--context-lens",
            "64",
            "--repeats",
            "3",
            "--dtype",
            "bf16",
            "--db",
            str(db),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert len(summary["latency"]) == 3 and len(summary["acceptance"]) == 3
    c = {row["model"]: row["c1_ms"] for row in summary["latency"]}
    assert c["ngram"] < c["smollm2-135m:layers=2"] < c["smollm2-135m"]


def test_demo_runs_end_to_end_with_reduced_sizes(tmp_path):
    plot = tmp_path / "demo.png"
    out = subprocess.run(
        [
            "hsd-plan",
            "demo",
            "--models",
            "ngram,smollm2-135m:layers=2,smollm2-135m",
            "--max-prompts",
            "2",
            "--validate-prompts",
            "1",
            "--max-new-tokens",
            "16",
            "--plot",
            str(plot),
            "--db",
            str(tmp_path / "demo.db"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["validation"]["plans"] and plot.read_bytes()[:4] == b"\x89PNG"
    assert any(len(p["chain"]) == 1 for p in report["validation"]["plans"])  # the autoregressive baseline
