"""GGUF files that claim too much, that llama.cpp would abort on, or that lack a block's weights:
each refused in one line, quickly, before anything is made from them in the model cache; and the
cache's entries made from a GGUF, made again where one was damaged since.

Headers are written byte by byte here (the layout of the GGUF spec); a claim larger than the disk
is a sparse file (``truncate``), which reads as zeros: empty strings, zero lengths.
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from hsd_runtime.models.gguf_file import check_gguf
from hsd_runtime.models.gguf_hparams import hparams_refusal
from hsd_runtime.terms.errors import ModelNotFoundError
from hsd_runtime.terms.limits import MAX_GGUF_ARRAY, MAX_GGUF_HEADER
from tests.gguf_tiny import char_gguf
from tests.helpers import one_line_error, run

_STRING, _ARRAY, _UINT8 = 8, 9, 0
_LLAMACPP = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") != "1"


def _kv(name: str, kind: int, payload: bytes) -> bytes:
    key = name.encode()
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", kind) + payload


def _gguf(path: Path, *pairs: bytes, size: int = 0) -> Path:
    """A GGUF version 3 header of ``pairs`` (no tensors), the file then grown to ``size`` bytes (sparse)."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + b"".join(pairs))
    if size:
        os.truncate(path, size)
    return path


CLAIMS = {
    # 2^62 strings of at least 8 bytes each in a 1 GiB file: refused by the count, never walked
    "strings-past-the-file": (lambda p: _gguf(p, _kv("tokenizer.ggml.tokens", _ARRAY, struct.pack("<IQ", _STRING, 2**62)), size=1 << 30),
                              "more than the"),
    # 64 GiB of bytes declared in a 65 GiB (sparse) file: it fits, but no model's array is that long
    "bytes-a-model-never-has": (lambda p: _gguf(p, _kv("tokenizer.ggml.scores", _ARRAY, struct.pack("<IQ", _UINT8, 64 << 30)), size=65 << 30),
                                f"a model's arrays hold at most {MAX_GGUF_ARRAY:,}"),
    # one string of 32 GiB in a 33 GiB file: past the bound of a whole header
    "a-string-past-the-header": (lambda p: _gguf(p, _kv("general.name", _STRING, struct.pack("<Q", 32 << 30)), size=33 << 30),
                                 f"more than {MAX_GGUF_HEADER:,} bytes"),
    # twice the array bound of empty strings, written out (zeros): refused by its count, not walked
    "too-many-strings": (lambda p: _gguf(p, _kv("tokenizer.ggml.merges", _ARRAY, struct.pack("<IQ", _STRING, 2 * MAX_GGUF_ARRAY)),
                                         size=20 * MAX_GGUF_ARRAY), "a model's arrays hold at most"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CLAIMS))
def test_a_header_that_claims_too_much_is_refused_at_once(tmp_path, name):
    make, fragment = CLAIMS[name]
    bad = make(tmp_path / "bad.gguf")
    started = time.monotonic()
    with pytest.raises(ModelNotFoundError, match=fragment):
        check_gguf(bad)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("engine", ["torch", "llamacpp"])
def test_commands_refuse_a_header_that_claims_too_much_in_one_line(tmp_path, monkeypatch, engine):
    if engine == "llamacpp" and not _LLAMACPP:
        pytest.skip("HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    bad = CLAIMS["bytes-a-model-never-has"][0](tmp_path / "bad.gguf")
    started = time.monotonic()
    one_line_error(run("generate", "--engine", engine, "--chain", bad, "--prompt", "ab cd"), "entries in its metadata")
    assert time.monotonic() - started < 10
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*"))


def test_a_vocabulary_is_walked_in_milliseconds(tmp_path):
    """The bound on one array's entries, of empty strings: walked by their lengths (the file then
    lacks what a model's metadata needs)."""
    full = _gguf(tmp_path / "full.gguf", _kv("tokenizer.ggml.tokens", _ARRAY, struct.pack("<IQ", _STRING, MAX_GGUF_ARRAY)),
                 size=9 * MAX_GGUF_ARRAY + 64)  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ModelNotFoundError, match=r"no general\.architecture"):
        check_gguf(full)
    assert time.monotonic() - started < 3


# --- what llama.cpp asserts on ------------------------------------------------------------------


def _llama(**more: int | str) -> dict[str, int | str]:
    meta: dict[str, int | str] = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 32}
    meta.update({"llama." + k.replace("__", "."): v for k, v in more.items()})
    return meta


@pytest.mark.parametrize(
    "meta, arrays, fragment",
    [
        (_llama(attention__head_count=4, attention__head_count_kv=3), {}, "head_count 4 over head_count_kv 3 in block 0"),
        (_llama(attention__head_count=4, attention__head_count_kv=0), {}, "head_count_kv 0"),
        (_llama(attention__head_count=4), {"llama.attention.head_count_kv": (2, 3)}, "head_count_kv 3 in block 1"),
        (_llama(attention__head_count=5), {}, "embedding_length 32 over attention.head_count 5"),
        (_llama(attention__head_count=4, rope__dimension_count=4), {}, "rope.dimension_count 4 and attention.key_length 8"),
        (_llama(attention__head_count=4, attention__value_length=16), {}, "key_length 8 and value_length 16"),
        (_llama(rope__scaling__type="bogus"), {}, "rope.scaling.type 'bogus'"),
        (_llama(expert_count=8, expert_used_count=9), {}, "expert_count 8 with expert_used_count 9"),
        (_llama(expert_group_count=2), {}, "no experts, so none used and no groups"),
        ({**_llama(), "llama.block_count": 600}, {}, "block_count 600"),
    ],
)
def test_what_llama_cpp_asserts_on_is_found(meta, arrays, fragment):
    reason = hparams_refusal(meta, arrays)
    assert reason is not None and fragment in reason, reason


@pytest.mark.parametrize(
    "meta, arrays",
    [
        (_llama(attention__head_count=4, attention__head_count_kv=2, rope__dimension_count=8), {}),
        (_llama(), {"llama.attention.head_count": (4, 0), "llama.attention.head_count_kv": (1, 0)}),  # block 1 has no attention
        (_llama(expert_count=8, expert_used_count=2), {}),
        ({**_llama(attention__head_count=4, attention__key_length=16, attention__value_length=8), "general.architecture": "gemma3"}, {}),
    ],
)
def test_what_llama_cpp_runs_is_let_through(meta, arrays):
    meta = {k.replace("llama.", f"{meta['general.architecture']}.", 1): v for k, v in meta.items()}
    assert hparams_refusal(meta, arrays) is None


@pytest.fixture(scope="module")
def uneven(tmp_path_factory) -> Path:
    """A whole tiny GGUF whose 4 heads share 3 key/value heads: llama.cpp loads it, then aborts
    the process (signal 6) building its first graph."""
    return char_gguf(tmp_path_factory.mktemp("gguf") / "uneven.gguf", seed=0, layers=2, kv_heads=3)


@pytest.mark.skipif(not _LLAMACPP, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")
def test_heads_llama_cpp_aborts_on_are_refused_before_it_runs(uneven, tmp_path, monkeypatch, isolated_db):
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    fragment = "head_count 4 over head_count_kv 3 in block 0"
    one_line_error(run("generate", "--engine", "llamacpp", "--chain", uneven, "--prompt", "ab cd"), fragment)
    one_line_error(run("profile", "--engine", "llamacpp", "--models", f"ngram,{uneven}", "--max-prompts", 1), fragment)
    assert not Path(isolated_db).exists()  # profile stored nothing
    one_line_error(run("generate", "--engine", "llamacpp", "--chain", f"{uneven}:quant=q8_0,{uneven}", "--prompt", "ab cd"), fragment)
    assert not list((tmp_path / "cache").rglob("*.gguf"))


@pytest.mark.skipif(not _LLAMACPP, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")
def test_the_quantizer_is_never_handed_such_a_file(uneven, tmp_path, monkeypatch):
    """Its source is checked before llama.cpp's quantizer reads it, whatever the cache already holds."""
    from hsd_runtime.models.llamacpp import quantized_gguf

    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelNotFoundError, match=r"llama\.cpp would abort on it"):
        quantized_gguf(uneven, "q8_0", threads=1)
    assert not list((tmp_path / "cache").rglob("*.gguf"))


# --- a block without its weights on the torch engine --------------------------------------------


def test_a_gguf_lacking_a_blocks_weight_is_refused_on_the_torch_engine(tmp_path, monkeypatch):
    """transformers would initialise the weight at random and the model would run, wrong."""
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    gguf = char_gguf(tmp_path / "lacking.gguf", seed=0, layers=2, leave_out=("blk.1.attn_q.weight",))
    result = run("generate", "--engine", "torch", "--chain", gguf, "--prompt", "ab cd", "--max-new-tokens", 2)
    one_line_error(result, "lacks weights its config declares (model.layers.1.self_attn.q_proj.weight)")
    assert not list((tmp_path / "cache").rglob("config.json"))  # nothing converted


def test_a_model_folder_lacking_a_weight_is_refused(tiny_dirs, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "lacking"
    shutil.copytree(tiny_dirs["draft"], folder)
    weights = load_file(folder / "model.safetensors")
    del weights["model.layers.1.mlp.down_proj.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    result = run("generate", "--chain", folder, "--prompt", "w1 w2", "--max-new-tokens", 2, "--device", "cpu")
    one_line_error(result, "lacks weights its config declares (model.layers.1.mlp.down_proj.weight)")


# --- a cache entry damaged since it was made --------------------------------------------------------


@pytest.mark.parametrize("kept", ["tokenizer_config.json", "tokenizer.json"])
def test_a_damaged_tokenizer_entry_is_made_again(tmp_path, monkeypatch, kept):
    """Its folder holding one file of the two (the other deleted by hand): extracted again from the
    GGUF, not read as it is (transformers would ask for sentencepiece)."""
    from hsd_runtime.models.sources import gguf_tokenizer

    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    gguf = char_gguf(tmp_path / "m.gguf", seed=0)
    first = gguf_tokenizer(gguf)
    entry = Path(first.name_or_path)
    for file in entry.iterdir():
        if file.name != kept:
            file.unlink()
    again = gguf_tokenizer(gguf)
    assert again.get_vocab() == first.get_vocab() and (entry / "tokenizer.json").is_file()


def test_a_damaged_conversion_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    gguf = char_gguf(tmp_path / "m.gguf", seed=0)
    generate = ("generate", "--engine", "torch", "--chain", gguf, "--prompt", "ab cd", "--max-new-tokens", 2, "--json")
    assert run(*generate).exit_code == 0
    (entry,) = (tmp_path / "cache" / "converted").glob("m-*")
    (entry / "tokenizer.json").unlink()
    result = run(*generate)
    assert result.exit_code == 0, result.output
    assert (entry / "tokenizer.json").is_file()
