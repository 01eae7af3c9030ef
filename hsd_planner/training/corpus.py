"""Corpora on disk: several samples per prompt with the teacher's signal, cached and reused.

:func:`build_corpus` samples several continuations of every prompt of a prompt set's profiling
split (the validation split is never trained on) and computes their signal, cached on disk under
a key of the target (its weights' digest included, :func:`model_digest`), the prompts and every
setting; a cached corpus is reused across runs, divergences and students, and an entry whose key
no longer matches (other weights under the same spec, an older format, a damaged file) is refused
with one line. The cache is checked before any model is loaded (:func:`check_cache`), its files
are checked regular and bounded before they are opened (a FIFO would block the read), and an
entry is written into a private folder and renamed into place whole: a failed write leaves no
entry behind.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from hsd_runtime import LoadedModel, SamplingConfig
from hsd_runtime.models.cache import cache_dir, shareable
from hsd_runtime.models.files import check_folder, open_input, read_input, staging_folder, stat_input, stat_path
from hsd_runtime.terms.json_text import JSONTextError, parse_json
from hsd_runtime.terms.limits import MAX_CONFIG_BYTES

from ..errors import DistillError, PathError, first_line
from ..limits import MAX_TRAINING_CORPUS_BYTES
from .sampling import by_length, sample_batched
from .teacher import TeacherRows, continuation_hidden, teacher_signal

__all__ = ["Corpus", "CorpusKey", "build_corpus", "check_cache", "corpus_hidden", "corpus_root", "model_digest"]

FORMAT = 1  # of the cached files; a cache written by another format is refused
KEY_FILE, DATA_FILE = "key.json", "corpus.pt"  # the files of a cache entry
_SAMPLE_STRIDE = 4099  # model_digest reads every this-many-th weight (and every tensor's sum)


def model_digest(model: nn.Module) -> str:
    """A digest of a model's configuration and weights: equal digests mean the same teacher.

    Reads every tensor's name, shape, dtype and sum and a strided sample of its values (hashing
    every byte of a 1.5B model would take seconds each time a corpus is looked up).
    """
    h = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        h.update(config.to_json_string(use_diff=False).encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().reshape(-1)
            h.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
            if flat.is_floating_point() and flat.numel():
                h.update(f"{float(flat.sum(dtype=torch.float64)):.10e}".encode())  # no fp64 copy of the tensor
                h.update(flat[::_SAMPLE_STRIDE].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


class CorpusKey(BaseModel):
    """What determines a corpus: the teacher (spec and weights), the prompts, every setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = FORMAT
    target: str
    weights: str  # model_digest of the teacher
    prompts: str  # the prompt set's name
    prompts_hash: str
    samples_per_prompt: int
    max_new_tokens: int
    temperature: float
    top_k: int  # 0: complete rows
    seed: int

    @property
    def request(self) -> str:
        """A digest of everything but the weights: where the corpus for this request lives."""
        fields = self.model_dump(exclude={"weights"})
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Corpus:
    """Sequences and their teacher signal: sequence i is ``prompts[i] + continuations[i]``, its
    rows are ``signal.rows(offsets[i], offsets[i + 1])``, one per continuation token."""

    key: CorpusKey
    prompts: list[list[int]]
    continuations: list[list[int]]
    signal: TeacherRows
    offsets: list[int]

    @property
    def positions(self) -> int:
        return self.offsets[-1]

    def teacher(self, i: int) -> TeacherRows:
        return self.signal.rows(self.offsets[i], self.offsets[i + 1])


def corpus_root() -> Path:
    """Where corpora are cached: ``corpora/`` under the model cache (``$HSD_PLAN_CACHE``)."""
    return cache_dir() / "corpora"


def _offsets(continuations: Sequence[list[int]]) -> list[int]:
    out = [0]
    for c in continuations:
        out.append(out[-1] + len(c))
    return out


def _file_digest(fh: BinaryIO, limit: int) -> str:
    """The SHA-256 of the rest of the open file ``fh``, reading at most ``limit`` bytes."""
    h = hashlib.sha256()
    left = limit
    while left > 0:
        block = fh.read(min(1 << 20, left))
        if not block:
            break
        h.update(block)
        left -= len(block)
    return h.hexdigest()


def check_cache(root: Path | None, request: str, what: str) -> None:
    """Refuse, with one line and before any model is loaded, a corpus cache that can neither give
    the corpus of ``request`` (:attr:`CorpusKey.request`) nor keep it once made.

    The cache ``root`` (default :func:`corpus_root`; ``what`` names it in messages) must be a
    folder or one that can be made, never a file, a FIFO or a symbolic link that leads nowhere, and
    the entry of ``request``, when there, a folder. A cache that holds the entry's key already is
    only read (a team's read-only cache serves); else it must be writable.
    """
    root = root or corpus_root()
    if check_folder(root, what, writable=False):
        entry = root / request
        if check_folder(entry, "the cached corpus", writable=False) and stat_path(entry / KEY_FILE, "the cached corpus") is not None:
            try:  # a FIFO in a file's place would block the read later: refused now
                stat_input(entry / KEY_FILE, "its key", MAX_CONFIG_BYTES)
                stat_input(entry / DATA_FILE, "its data", MAX_TRAINING_CORPUS_BYTES)
            except PathError as exc:
                raise DistillError(f"the cached corpus {entry} is damaged ({exc}); delete {entry} to rebuild it") from None
            return  # read, never written: _load checks it against the teacher
    check_folder(root, what)


def _load(folder: Path, key: CorpusKey) -> Corpus | None:
    """The cached corpus for ``key``; None when there is none; DistillError when it is stale or damaged.

    Each file of the entry is checked a regular file of bounded size before it is opened (a FIFO
    would block the read), and its data is read once: hashed, then loaded from the same descriptor.
    """
    meta_file, data_file = folder / KEY_FILE, folder / DATA_FILE
    refresh = f"delete {folder} to rebuild it"
    try:
        if stat_path(meta_file, "the cached corpus key") is None:
            return None
        meta = parse_json(read_input(meta_file, "the cached corpus key", MAX_CONFIG_BYTES))
        stored = CorpusKey(**meta["key"])
    except Exception as exc:  # a FIFO, bad JSON, a foreign key: any unreadable key is a damaged entry
        why = str(exc) if isinstance(exc, (PathError, JSONTextError)) else type(exc).__name__
        raise DistillError(f"the cached corpus {folder} has an unreadable key ({why}); {refresh}") from None
    if stored != key:
        differ = [
            f"{k} {getattr(stored, k)!r} (now {getattr(key, k)!r})" for k in CorpusKey.model_fields if getattr(stored, k) != getattr(key, k)
        ]
        raise DistillError(f"the cached corpus {folder} is stale: it was made with {', '.join(differ)}; {refresh}")
    damaged = f"the cached corpus {folder} is damaged"
    try:
        with open_input(data_file, "its data", MAX_TRAINING_CORPUS_BYTES) as fh:
            if _file_digest(fh, MAX_TRAINING_CORPUS_BYTES) != meta.get("sha256"):
                raise DistillError(f"{damaged} (its data does not match its key's checksum); {refresh}")
            fh.seek(0)
            data = torch.load(fh, weights_only=True)
        signal = TeacherRows(data["ids"], data["logits"], data["logz"], data["log_tail"], int(data["width"]))
        prompts, continuations = data["prompts"], data["continuations"]
    except PathError as exc:  # missing, a FIFO, a folder, too large
        raise DistillError(f"{damaged} ({exc}); {refresh}") from None
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise DistillError(f"{damaged} ({type(exc).__name__}); {refresh}") from None
    return Corpus(stored, prompts, continuations, signal, _offsets(continuations))


def _save(folder: Path, corpus: Corpus) -> None:
    """Write ``corpus`` as the cache entry ``folder``: into a private folder beside it, data first,
    then the key that vouches for it, made shareable and renamed to ``folder`` whole.

    A failure (no space, no permission) is one line and leaves no entry behind; an entry another
    process finished meanwhile is kept (it holds the same corpus, or one _load refuses as stale).
    """
    root = folder.parent
    try:
        with staging_folder(root) as stage:
            _write_entry(stage, corpus)
            shareable(stage)  # mkdtemp makes it private (0700); a team may share the cache
            _rename_entry(stage, folder)
    except (OSError, RuntimeError) as exc:  # torch's zip writer reports a failed write as a RuntimeError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc)
        raise DistillError(f"cannot cache the corpus in {root}: {why}; give a writable --cache") from None


def _write_entry(stage: Path, corpus: Corpus) -> None:
    """The files of a cache entry, in ``stage``: the data, then the key with the data's checksum."""
    s = corpus.signal
    data = {
        "prompts": corpus.prompts,
        "continuations": corpus.continuations,
        "ids": s.ids,
        "logits": s.logits,
        "logz": s.logz,
        "log_tail": s.log_tail,
        "width": s.width,
    }
    torch.save(data, stage / DATA_FILE)
    with open_input(stage / DATA_FILE, "the corpus just written", MAX_TRAINING_CORPUS_BYTES) as fh:
        digest = _file_digest(fh, MAX_TRAINING_CORPUS_BYTES)
    meta = {"key": corpus.key.model_dump(), "sha256": digest, "sequences": len(corpus.prompts)}
    (stage / KEY_FILE).write_text(json.dumps(meta, indent=1))


def _rename_entry(stage: Path, folder: Path) -> None:
    """Rename the finished ``stage`` to ``folder``. A folder there without a key (left by a run
    killed mid-write) holds nothing _load would read: it is replaced. One with a key was finished
    by another process meanwhile: it stays, and ``stage`` is dropped."""
    try:
        os.rename(stage, folder)  # replaces an empty folder too
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if stat_path(folder / KEY_FILE, "the cached corpus") is not None:
        return
    leftover = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".old-"))
    os.rename(folder, leftover / "entry")
    shutil.rmtree(leftover, ignore_errors=True)
    os.rename(stage, folder)


def build_corpus(
    target: LoadedModel,
    key: CorpusKey,
    prompts: Sequence[list[int]],
    gen_batch: int,
    root: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[Corpus, bool]:
    """The corpus of ``key``: ``key.samples_per_prompt`` continuations of every prompt sampled from
    the target, with the target's signal at every position; read from the cache under ``root``
    (default :func:`corpus_root`) when there, else made and cached. Returns it and whether it came
    from the cache. ``progress(stage, done, total)`` is called as sequences and positions are made.

    Sample j of prompt i is seeded with ``key.seed``, i and j: the same key makes the same corpus.
    """
    folder = (root or corpus_root()) / key.request
    cached = _load(folder, key)
    if cached is not None:
        return cached, True
    step = progress or (lambda _stage, _done, _total: None)
    rows = [(i, j) for i in range(len(prompts)) for j in range(key.samples_per_prompt)]
    seq_prompts = [list(prompts[i]) for i, _ in rows]
    seeds = [key.seed * 1_000_003 + i * 1_009 + j for i, j in rows]
    sampling = SamplingConfig(mode="sample", temperature=key.temperature)
    continuations = sample_batched(
        target.model, target, seq_prompts, key.max_new_tokens, sampling, seeds, gen_batch, lambda done: step("sampling", done, len(rows))
    )
    total = sum(len(c) for c in continuations)
    done = [0]

    def advance(n: int) -> None:
        done[0] += n
        step("teacher signal", done[0], total)

    signal = teacher_signal(target.model, seq_prompts, continuations, target.logits_width, key.top_k, key.temperature, gen_batch, advance)
    corpus = Corpus(key, seq_prompts, continuations, signal, _offsets(continuations))
    _save(folder, corpus)
    return corpus, False


def corpus_hidden(
    model: nn.Module,
    corpus: Corpus,
    gen_batch: int,
    layers: Sequence[int] = (),
    progress: Callable[[int, int], None] | None = None,
) -> torch.Tensor:
    """:func:`continuation_hidden` at every row of ``corpus`` ``[R, d]`` (or ``[R, len(layers) d]``),
    in corpus order, one padded pass per batch of sequences of similar length (a batch pays for its
    longest row); ``progress(done, total)`` after each pass."""
    keep = [i for i, cont in enumerate(corpus.continuations) if cont]
    out: torch.Tensor | None = None
    done = 0
    for batch in by_length([len(corpus.prompts[i]) + len(corpus.continuations[i]) for i in keep], gen_batch):
        seqs = [keep[j] for j in batch]
        rows = continuation_hidden(model, [corpus.prompts[i] for i in seqs], [corpus.continuations[i] for i in seqs], layers=layers)
        if out is None:
            out = rows.new_empty((corpus.positions, rows.shape[-1]))
        start = 0
        for i in seqs:  # corpus rows are sequence after sequence: each sequence's rows at its offset
            n = len(corpus.continuations[i])
            out[corpus.offsets[i] : corpus.offsets[i] + n] = rows[start : start + n]
            start += n
        done += start
        if progress is not None:
            progress(done, corpus.positions)
    assert out is not None
    return out
