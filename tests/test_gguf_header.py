"""GGUF files that claim too much: each refused in one line, quickly, before anything is made
from them in the model cache.

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
from hsd_runtime.terms.errors import ModelNotFoundError
from hsd_runtime.terms.limits import MAX_GGUF_ARRAY, MAX_GGUF_HEADER
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
