"""A GGUF file's layout checked before anything is made from it.

Reading a GGUF for real (transformers' reader, llama.cpp's loader) takes seconds and happens
after a cache entry's folder and lock are made; a file holding only a header, a truncated one or
one that is not a language model would fail there, and leave them behind. This walks the header,
the metadata and the tensor table (the layout of https://github.com/ggml-org/ggml/blob/master/docs/gguf.md:
magic, version, counts, key-value pairs, tensor infos, aligned data) in a fraction of a second,
without decoding any value, and refuses in one line what cannot be a model.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from ..terms.errors import ModelNotFoundError
from ..terms.limits import MAX_GGUF_ENTRIES

__all__ = ["check_gguf"]

# value type -> bytes of one value (GGUF metadata types 0..12; 8 is a string, 9 an array)
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}  # integer value types -> struct format
_REQUIRED = ("general.architecture", "tokenizer.ggml.model")  # what makes a GGUF a language model with its tokenizer


class _Truncated(Exception):
    pass


class _Cursor:
    """Little-endian reads from a mapped file; running past its end raises :class:`_Truncated`."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.at = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.buf):
            raise _Truncated
        out = self.buf[self.at : self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def count(self) -> int:
        n = self.u64()
        if n > MAX_GGUF_ENTRIES:
            raise _Truncated
        return n

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.string()
        elif kind == _ARRAY:
            item, n = self.u32(), self.u64()
            if item in _FIXED:
                self.take(_FIXED[item] * n)
            elif item == _STRING:
                for _ in range(n):
                    self.string()
            else:
                raise _Truncated
        else:
            raise _Truncated


def check_gguf(path: Path) -> dict[str, int | str]:
    """Refuse ``path`` in one line unless it is a whole GGUF (version 2 or 3) of a language model:
    its metadata names an architecture and a tokenizer, and its tensor data is all there. Returns
    its scalar metadata: every integer and string value that is not in an array (the
    architecture, its block count, ...), read on the way."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ModelNotFoundError(f"{path} is not a GGUF file (no GGUF magic bytes)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _walk(path, _Cursor(buf))
    except _Truncated:
        raise ModelNotFoundError(f"{path} is not a whole GGUF file (it is cut short); is it complete?") from None
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None


def _walk(path: Path, cur: _Cursor) -> dict[str, int | str]:
    cur.take(4)
    version = cur.u32()
    if version not in (2, 3):
        raise ModelNotFoundError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
    n_tensors, n_kv = cur.count(), cur.count()
    keys: dict[bytes, int] = {}
    scalars: dict[str, int | str] = {}
    for _ in range(n_kv):
        key, kind = cur.string(), cur.u32()
        start = cur.at
        cur.skip_value(kind)
        keys[key] = kind
        if kind in _INTS:
            scalars[key.decode(errors="replace")] = struct.unpack(_INTS[kind], cur.buf[start : cur.at])[0]
        elif kind == _STRING:
            scalars[key.decode(errors="replace")] = bytes(cur.buf[start + 8 : cur.at]).decode(errors="replace")
    alignment = (
        max(1, int(scalars["general.alignment"])) if keys.get(b"general.alignment") == 4 else 32
    )  # a uint32 only, as the format says
    missing = [k for k in _REQUIRED if k.encode() not in keys]
    if missing or n_tensors == 0:
        what = f"no {', '.join(missing)} in its metadata" if missing else "no tensors"
        raise ModelNotFoundError(f"{path} holds {what}: it is not a language model's GGUF file")
    ends = []
    for _ in range(n_tensors):
        cur.string()
        dims = cur.u32()
        if dims > 8:
            raise _Truncated
        for _ in range(dims):
            cur.u64()
        cur.u32()  # the tensor's type
        ends.append(cur.u64())  # its offset in the data section
    data = -(-cur.at // alignment) * alignment
    if data + max(ends) >= len(cur.buf):
        raise _Truncated  # the last tensor starts at or past the end: the data section is cut off
    return scalars
