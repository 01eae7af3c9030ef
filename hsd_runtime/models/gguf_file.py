"""A GGUF file's layout checked before anything is made from it.

Reading a GGUF for real (transformers' reader, llama.cpp's loader) takes seconds and happens
after a cache entry's folder and lock are made; a file holding only a header, a truncated one or
one that is not a language model would fail there, and leave them behind. This walks the header,
the metadata and the tensor table (the layout of https://github.com/ggml-org/ggml/blob/master/docs/gguf.md:
magic, version, counts, key-value pairs, tensor infos, aligned data) in a fraction of a second,
without decoding any value, and refuses in one line what cannot be a model.

Every reader after this one decodes the whole metadata into memory, so what a header declares is
bounded before it is believed: a count of entries times the fewest bytes each can take must fit in
what is left of the file (a header that declares 2^62 strings is refused at once, not walked), an
array holds at most :data:`MAX_GGUF_ARRAY` entries and the metadata with the tensor table at most
:data:`MAX_GGUF_HEADER` bytes. Arrays of fixed-size values are stepped over, never read; arrays
of strings are walked by their lengths alone. Last, the hyperparameters llama.cpp asserts on are
checked (:mod:`.gguf_hparams`): it aborts the whole process where they do not hold.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from ..terms.errors import ModelNotFoundError
from ..terms.limits import MAX_GGUF_ARRAY, MAX_GGUF_ENTRIES, MAX_GGUF_HEADER
from .gguf_hparams import hparams_refusal

__all__ = ["check_gguf"]

# value type -> bytes of one value (GGUF metadata types 0..12; 8 is a string, 9 an array)
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_INTS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 10: "Q", 11: "q"}  # integer value types -> struct format
_REQUIRED = ("general.architecture", "tokenizer.ggml.model")  # what makes a GGUF a language model with its tokenizer
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_MAX_LAYER_ARRAY = 512  # integer arrays kept for the hyperparameter checks: one entry per block (llama.cpp's most)
_MIN_KV, _MIN_TENSOR = 13, 24  # bytes of the smallest key-value pair (empty key, one byte) and tensor info (empty name, no dims)


class _Truncated(Exception):
    pass


class _Refused(Exception):
    """What the header claims that no model's does; the text follows the file's name."""


class _Cursor:
    """Little-endian reads from a mapped file's header; running past its end raises :class:`_Truncated`,
    past :data:`MAX_GGUF_HEADER` raises :class:`_Refused`."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.at = buf, 0

    @property
    def left(self) -> int:
        """Bytes of the file past the cursor."""
        return len(self.buf) - self.at

    def skip(self, n: int) -> int:
        """Step over ``n`` bytes, reading none; return where they start."""
        start = self.at
        self._move(start + n)
        return start

    def _move(self, to: int) -> None:
        if to > len(self.buf):
            raise _Truncated
        if to > MAX_GGUF_HEADER:
            raise _Refused(f"has a header (metadata and tensor table) of more than {MAX_GGUF_HEADER:,} bytes; no model's is that large")
        self.at = to

    def u32(self) -> int:
        return _U32.unpack_from(self.buf, self.skip(4))[0]

    def u64(self) -> int:
        return _U64.unpack_from(self.buf, self.skip(8))[0]

    def count(self, what: str, least: int) -> int:
        """A count of ``what``, each of at least ``least`` bytes: refused past :data:`MAX_GGUF_ENTRIES` or the file's end."""
        n = self.u64()
        if n * least > self.left:
            raise _Refused(f"is not a whole GGUF file: it declares {n:,} {what}, more than the {self.left:,} bytes left in it hold")
        if n > MAX_GGUF_ENTRIES:
            raise _Refused(f"declares {n:,} {what}; a model has at most {MAX_GGUF_ENTRIES:,}")
        return n

    def string(self) -> bytes:
        n = self.u64()
        return bytes(self.buf[self.skip(n) : self.at])

    def skip_value(self, key: str, kind: int) -> None:
        """Step over a value of type ``kind`` (an array's entries counted against the file first)."""
        if kind in _FIXED:
            self.skip(_FIXED[kind])
        elif kind == _STRING:
            self.skip(self.u64())
        elif kind == _ARRAY:
            item, n = self.u32(), self.u64()
            if item not in _FIXED and item != _STRING:
                raise _Refused(f"holds metadata {key} as an array of value type {item}, which GGUF arrays do not hold")
            least = _FIXED.get(item, 8)  # a string takes its 8-byte length at least
            if n * least > self.left:
                raise _Refused(
                    f"is not a whole GGUF file: it declares {n:,} entries in its metadata {key}, more than the {self.left:,} bytes left in it hold"
                )
            if n > MAX_GGUF_ARRAY:
                raise _Refused(f"declares {n:,} entries in its metadata {key}; a model's arrays hold at most {MAX_GGUF_ARRAY:,}")
            if item in _FIXED:
                self.skip(n * least)
            else:
                self._skip_strings(n)
        else:
            raise _Refused(f"holds metadata {key} of value type {kind}, which GGUF does not define")

    def _skip_strings(self, n: int) -> None:
        """Step over ``n`` strings by their lengths alone (a vocabulary: 262,144 strings in a few ms)."""
        buf, at, end = self.buf, self.at, min(len(self.buf), MAX_GGUF_HEADER)
        unpack = _U64.unpack_from
        for _ in range(n):
            if at + 8 > end:
                self._move(at + 8)  # past the file's end or the header's bound: refused there
            at += 8 + unpack(buf, at)[0]
        self._move(at)


def check_gguf(path: Path) -> dict[str, int | str]:
    """Refuse ``path`` in one line unless it is a whole GGUF (version 2 or 3) of a language model:
    its metadata names an architecture and a tokenizer, claims no more than the file holds, its
    hyperparameters hold what llama.cpp asserts, and its tensor data is all there. Returns its
    scalar metadata: every integer and string value that is not in an array (the architecture,
    its block count, ...), read on the way."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ModelNotFoundError(f"{path} is not a GGUF file (no GGUF magic bytes)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _walk(path, _Cursor(buf))
    except _Truncated:
        raise ModelNotFoundError(f"{path} is not a whole GGUF file (it is cut short); is it complete?") from None
    except _Refused as exc:
        raise ModelNotFoundError(f"{path} {exc}") from None
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None


def _walk(path: Path, cur: _Cursor) -> dict[str, int | str]:
    cur.skip(4)
    version = cur.u32()
    if version not in (2, 3):
        raise ModelNotFoundError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
    n_tensors = cur.count("tensors", _MIN_TENSOR)
    n_kv = cur.count("metadata keys", _MIN_KV)
    keys: dict[str, int] = {}
    scalars: dict[str, int | str] = {}
    arrays: dict[str, tuple[int, ...]] = {}  # the short integer arrays: per-block hyperparameters
    for _ in range(n_kv):
        key, kind = cur.string().decode(errors="replace"), cur.u32()
        start = cur.at
        cur.skip_value(key, kind)
        keys[key] = kind
        if kind in _INTS:
            scalars[key] = struct.unpack_from("<" + _INTS[kind], cur.buf, start)[0]
        elif kind == _STRING:
            scalars[key] = bytes(cur.buf[start + 8 : cur.at]).decode(errors="replace")
        elif kind == _ARRAY:
            item, n = _U32.unpack_from(cur.buf, start)[0], _U64.unpack_from(cur.buf, start + 4)[0]
            if item in _INTS and n <= _MAX_LAYER_ARRAY:
                arrays[key] = struct.unpack_from(f"<{n}{_INTS[item]}", cur.buf, start + 12)
    alignment = max(1, int(scalars["general.alignment"])) if keys.get("general.alignment") == 4 else 32  # a uint32 only, as the format says
    missing = [k for k in _REQUIRED if k not in keys]
    if missing or n_tensors == 0:
        what = f"no {', '.join(missing)} in its metadata" if missing else "no tensors"
        raise ModelNotFoundError(f"{path} holds {what}: it is not a language model's GGUF file")
    ends = []
    for _ in range(n_tensors):
        cur.string()
        dims = cur.u32()
        if dims > 8:
            raise _Truncated
        cur.skip(8 * dims)
        cur.u32()  # the tensor's type
        ends.append(cur.u64())  # its offset in the data section
    data = -(-cur.at // alignment) * alignment
    if data + max(ends) >= len(cur.buf):
        raise _Truncated  # the last tensor starts at or past the end: the data section is cut off
    reason = hparams_refusal(scalars, arrays)
    if reason is not None:
        raise ModelNotFoundError(f"{path} declares {reason}; llama.cpp would abort on it")
    return scalars
