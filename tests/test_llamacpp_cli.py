"""The commands on the llama.cpp engine.

With the packaged SmolLM2-135M GGUF (real model, slow): generate with --check (speculative
against autoregressive on the same engine), a drafter re-quantized by llama.cpp's quantizer and
cached, profile -> solve -> validate with profiles kept apart from the torch engine's, and bad
input refused in one line. With tiny GGUFs written in-process (``tests/gguf_tiny.py``, fast): the
engine's refusals, each one line and a non-zero exit that leaves nothing half-made behind: the
binding missing, a GGUF llama.cpp cannot load, levels whose vocabularies differ, the quantizer
failing or its copy unusable, a cache that cannot hold the copy.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli
from hsd_runtime.models import llamacpp as engine
from hsd_runtime.models.packaged import cache_dir, packaged_gguf, quantized_path
from tests.gguf_tiny import CHAR_TOKENS, char_gguf
from tests.helpers import one_line_error, run

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"
pytestmark = pytest.mark.skipif(SKIPPED, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")

PROMPT = "Write a short poem about the sea."


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (("--chain", "smollm2-135m:dtype=bf16,smollm2-135m"), "runs on the torch engine only"),
        (("--chain", "smollm2-135m:layers=31,smollm2-135m"), "it has 30 decoder layers (use 1..30)"),
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


@pytest.mark.slow
def test_a_gguf_file_is_read_as_it_is(tmp_path, monkeypatch):
    """A .gguf path runs directly on llama.cpp: nothing is converted into the cache for it.

    The run gets a cache of its own, empty, so the check holds on a machine whose cache is new:
    the tokenizer's entry (a folder and its lock, made whenever it was not extracted before) is
    all the run may leave there, never converted weights.
    """
    gguf = packaged_gguf("smollm2-135m")  # a single-package GGUF: read in place, not assembled into the cache
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    code, out = _run("generate", "--engine", "llamacpp", "--chain", f"ngram,{gguf}", "--widths", "3", "--prompt", PROMPT,
                     "--max-new-tokens", "8", "--json")  # fmt: skip
    assert code == 0, out
    made = sorted(p.relative_to(cache_dir()) for p in cache_dir().rglob("*"))
    tokenizer = [p for p in made if len(p.parts) > 1 and p.parts[0] == "converted" and "-tokenizer" in p.parts[1]]
    assert tokenizer, made  # the tokenizer was extracted into this cache: the check below saw the run's writes
    assert [p for p in made if p not in tokenizer and p != Path("converted")] == []


@pytest.mark.slow
def test_the_demo_runs_on_llamacpp(tmp_path, isolated_db):
    plot = tmp_path / "demo.png"
    code, out = _run(
        "demo", "--engine", "llamacpp", "--family", "smollm2", "--max-prompts", "2", "--validate-prompts", "1",
        "--max-new-tokens", "16", "--rounds", "2", "--repeats", "1", "--plot", str(plot), "--json",
    )  # fmt: skip
    assert code == 0, out
    assert plot.stat().st_size > 0 and "smollm2-135m:quant=q4_0:engine=llamacpp" in out


# --- refusals on tiny GGUFs (fast) --------------------------------------------------------------


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    """Tiny GGUFs: a target and a drafter of one vocabulary, a drafter of another, and a whole GGUF
    without its attention head count (llama.cpp's quantizer copies it, its loader refuses it)."""
    root = tmp_path_factory.mktemp("gguf")
    other = [*CHAR_TOKENS[:5], *(t.upper() for t in CHAR_TOKENS[5:31]), *CHAR_TOKENS[31:]]
    return {
        "target": char_gguf(root / "target.gguf", seed=0, layers=2),
        "draft": char_gguf(root / "draft.gguf", seed=1),
        "other": char_gguf(root / "other.gguf", seed=2, tokens=other),
        "headless": char_gguf(root / "headless.gguf", seed=3, head_count=False),
    }


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A model cache of the test's own."""
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _generate(chain: str, *more: str) -> object:
    return run("generate", "--engine", "llamacpp", "--chain", chain, "--widths", "2", "--prompt", "ab cd", "--max-new-tokens", "4", *more)


def _quant_entries(cache: Path) -> list[str]:
    """Files in the cache's quantized folder, lock files aside."""
    return sorted(p.name for p in (cache / "gguf-quant").glob("*") if not p.name.endswith(".lock"))


def test_tiny_ggufs_run_and_a_quantized_copy_is_cached(ggufs, cache):
    ok = _generate(f"{ggufs['draft']}:quant=q4_0,{ggufs['target']}", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["engine"] == "llamacpp"
    assert [name.endswith(".q4_0.gguf") for name in _quant_entries(cache)] == [True]


def test_generate_opens_contexts_of_the_cells_it_needs_and_its_check_shares_the_targets(ggufs, cache, monkeypatch):
    """A few-token generation opens contexts of llama.cpp's fewest cells (64), not the model's 512,
    and ``--check`` decodes the reference on the target's context instead of opening a third."""
    from hsd_runtime.models import llamacpp

    opened, real = [], llamacpp.LlamaCppCache.__init__

    def spy(self, model, width, cells=None):
        real(self, model, width, cells)
        opened.append(self.n_ctx)

    monkeypatch.setattr(llamacpp.LlamaCppCache, "__init__", spy)
    ok = _generate(f"{ggufs['draft']},{ggufs['target']}", "--check", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["check"]["identical"] in (True, False)
    assert opened == [llamacpp.TREE_SEQS, llamacpp.TREE_SEQS]


def test_a_long_prompt_is_prefilled_once(ggufs, cache, monkeypatch):
    """The warm-up runs on the prompt's first tokens: a long prompt (here 300 tokens, where a user's
    2,400 took minutes on two cores) is fed to the target once, by the timed generation."""
    from hsd_planner.generate import WARMUP_TOKENS
    from hsd_runtime.models import llamacpp

    fed, real = [], llamacpp.LlamaCppCache.feed

    def spy(self, tokens, start, keep, tree=None):
        if self.model.path == ggufs["target"]:
            fed.append(len(tokens))
        return real(self, tokens, start, keep, tree)

    monkeypatch.setattr(llamacpp.LlamaCppCache, "feed", spy)
    prompt = " ".join(["ab cd ef gh ij"] * 20)  # 300 tokens of one character each
    ok = run("generate", "--engine", "llamacpp", "--chain", f"ngram,{ggufs['target']}", "--widths", "2", "--prompt", prompt,
             "--max-new-tokens", "4", "--json")  # fmt: skip
    assert ok.exit_code == 0, ok.output
    prompt_tokens = json.loads(ok.stdout)["prompt_tokens"]
    assert prompt_tokens >= 300 and fed[0] <= WARMUP_TOKENS and fed.count(prompt_tokens) == 1, fed
    assert sum(fed) < prompt_tokens + 2 * WARMUP_TOKENS  # the prompt once, the warm-up and a few short passes


def test_a_missing_binding_is_one_line_naming_the_install_step(ggufs, cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp fails as where it is not installed
    monkeypatch.setattr(engine, "_state", {})
    one_line_error(_generate(f"{ggufs['draft']},{ggufs['target']}"), "install it with bash scripts/install.sh")


def test_a_gguf_llama_cpp_cannot_load_is_one_line(ggufs, cache):
    """A whole GGUF (its layout checks out) that llama.cpp's loader refuses: its reason, in one line."""
    one_line_error(_generate(f"{ggufs['headless']},{ggufs['target']}"), f"llama.cpp cannot load {ggufs['headless']} (")
    assert "error loading model: check_tensor_dims" in _generate(f"{ggufs['headless']},{ggufs['target']}").output  # the cause


def test_levels_whose_vocabularies_differ_are_one_line(ggufs, cache):
    one_line_error(_generate(f"{ggufs['other']},{ggufs['target']}"), "different tokenizers")


def test_a_copy_llama_cpp_cannot_load_is_never_cached(ggufs, cache):
    """The quantizer copies a GGUF llama.cpp cannot run (it reads tensors, it builds no model): the
    copy is refused in one line naming the source, and nothing is left in the cache for a later run."""
    one_line_error(
        _generate(f"{ggufs['headless']}:quant=q4_0,{ggufs['target']}"), f"llama.cpp cannot load {ggufs['headless']} quantized to q4_0"
    )
    assert _quant_entries(cache) == []


def _writes_half(code: int):
    """A quantizer that writes half of its source and returns ``code`` (a full disk, a failed write)."""

    def quantize(source: bytes, out: bytes, params: object) -> int:
        data = Path(source.decode()).read_bytes()
        Path(out.decode()).write_bytes(data[: len(data) // 2])
        return code

    return quantize


@pytest.mark.parametrize(
    "code, message",
    [(1, "llama.cpp could not quantize"), (0, "llama.cpp's quantizer wrote an incomplete copy")],
    ids=["fails", "reports-success-on-a-short-write"],
)
def test_a_failing_quantizer_leaves_nothing_a_later_run_would_take(ggufs, cache, monkeypatch, code, message):
    """The quantizer fails halfway, or reports success on a short write: one line, nothing in the
    cache; the next run, with a quantizer that works, makes the copy and runs."""
    chain = f"{ggufs['draft']}:quant=q8_0,{ggufs['target']}"
    with monkeypatch.context() as patched:
        patched.setattr(engine.binding(), "llama_model_quantize", _writes_half(code))
        one_line_error(_generate(chain), message)
    assert _quant_entries(cache) == []
    ok = _generate(chain)
    assert ok.exit_code == 0, ok.output
    assert len(_quant_entries(cache)) == 1


def test_a_cache_that_cannot_hold_the_copy_is_one_line(ggufs, cache):
    cache.mkdir(parents=True)
    (cache / "gguf-quant").write_text("a file where the folder of quantized copies goes")
    one_line_error(_generate(f"{ggufs['draft']}:quant=q4_0,{ggufs['target']}"), "point HSD_PLAN_CACHE at a writable folder")


def test_a_cache_entry_that_cannot_be_made_is_one_line(ggufs, cache):
    """The entry's lock file cannot be made (here a folder holds its name; a full or read-only
    disk fails the same call): one line naming the cache folder, nothing cached."""
    entry = quantized_path(ggufs["draft"], "q4_0")
    (entry.parent / f".{entry.name}.lock").mkdir(parents=True)
    one_line_error(
        _generate(f"{ggufs['draft']}:quant=q4_0,{ggufs['target']}"), f"the model cache folder {entry.parent} cannot hold {entry.name}"
    )
    assert not entry.exists()


def test_a_profile_stopped_by_the_quantizer_runs_whole_when_rerun(ggufs, cache, isolated_db, tmp_path, monkeypatch):
    """The quantizer fails while profile loads its models: one line, nothing stored; the same
    command then profiles every model."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["ab cd ef gh", "ij kl mn op", "qr st uv wx", "yz ab cd ef"]) + "\n")
    args = ["profile", "--engine", "llamacpp", "--models", f"ngram,{ggufs['draft']}:quant=q8_0,{ggufs['target']}", "--prompts", prompts,
            "--max-prompts", "2", "--max-new-tokens", "4", "--latency-grid", "1,2", "--context-lens", "8", "--repeats", "1", "--json"]  # fmt: skip
    with monkeypatch.context() as patched:
        patched.setattr(engine.binding(), "llama_model_quantize", _writes_half(1))
        one_line_error(run(*args), "llama.cpp could not quantize")
    assert _quant_entries(cache) == []
    ok = run(*args)
    assert ok.exit_code == 0, ok.output
    assert f"{ggufs['draft']}:quant=q8_0:engine=llamacpp" in ok.output


def test_every_llamacpp_profile_is_shown_exported_and_imported(ggufs, cache, isolated_db, tmp_path):
    """What profile stores on llama.cpp (re-quantized and cut copies, an n-gram with min=, a GGUF
    converted for torch beside them), profiles show and export write and an import reads back whole."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(["ab cd ef gh", "ij kl mn op", "qr st uv wx", "yz ab cd ef"]) + "\n")
    draft, target = ggufs["draft"], ggufs["target"]
    specs = ["ngram:n=4:min=2", f"{draft}:quant=q8_0", f"{target}:layers=1:quant=f16", f"{draft}:engine=torch:dtype=fp32", str(target)]
    result = run("profile", "--engine", "llamacpp", "--models", ",".join(specs), "--prompts", prompts, "--max-prompts", "2",
                 "--max-new-tokens", "4", "--latency-grid", "1,2", "--context-lens", "8", "--repeats", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert run("profiles", "show").exit_code == 0
    exported = tmp_path / "export.json"
    assert run("profiles", "export", exported).exit_code == 0
    stored = {m["spec"] for m in json.loads(exported.read_text())["models"]}
    assert stored == {"ngram:n=4:min=2", f"{draft}:quant=q8_0:engine=llamacpp", f"{target}:layers=1:quant=f16:engine=llamacpp",
                      f"{draft}:engine=torch:dtype=fp32", f"{target}:engine=llamacpp"}  # fmt: skip
    fresh = tmp_path / "fresh.db"
    assert run("profiles", "import", exported, "--db", fresh).exit_code == 0
    again = tmp_path / "again.json"
    assert run("profiles", "export", again, "--db", fresh).exit_code == 0
    assert json.loads(again.read_text()) == json.loads(exported.read_text())
