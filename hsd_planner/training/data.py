"""The training data engine shared by every trainer: sequences and the teacher's dense signal.

A trainer needs, for many sequences, the teacher's next-token distribution at every position.
The engine makes both in batches, never one sequence and one token at a time:

- **Sampling** (:func:`sample_batched`): many sequences at once from any model (the target for
  offline data, the student for on-policy data), over one padded KV layout (prompts decoded in lockstep),
  each sequence from its own seeded generator, so a sequence depends on its prompt and seed only.
- **Teacher signal** (:func:`teacher_signal`): one teacher-forced pass over a right-padded batch
  of prompt + continuation gives the distribution at every continuation position; the engine keeps
  its top-k logits and the log-partition of the whole row (``logz``), from which the divergences of
  :mod:`.divergences` are computed over the top-k tokens and one tail bucket (exact when k is the
  vocabulary).
- **Corpora** (:func:`build_corpus`): several samples per prompt of a prompt set's profiling split
  (the validation split is never trained on), with their signal, cached on disk under a key of
  the target (its weights' digest included), the prompts and every setting; a cached corpus is
  reused across runs, divergences and students, and an entry whose key no longer matches (other
  weights under the same spec, an older format, a damaged file) is refused with one line. The
  cache is checked before any model is loaded (:func:`check_cache`), its files are checked regular
  and bounded before they are opened (a FIFO would block the read), and an entry is written into a
  private folder and renamed into place whole: a failed write leaves no entry behind.
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

from hsd_runtime import Hierarchy, LoadedModel, SamplingConfig
from hsd_runtime.learned.steering import layer_inputs
from hsd_runtime.models.cache import cache_dir, shareable
from hsd_runtime.models.files import check_folder, open_input, read_input, staging_folder, stat_input, stat_path
from hsd_runtime.models.output import apply_output_layer
from hsd_runtime.terms.json_text import JSONTextError, parse_json
from hsd_runtime.terms.limits import MAX_CONFIG_BYTES

from ..errors import DistillError, PathError, first_line
from ..limits import MAX_TRAINING_CORPUS_BYTES

__all__ = [
    "Corpus",
    "CorpusKey",
    "TeacherRows",
    "build_corpus",
    "by_length",
    "check_cache",
    "continuation_hidden",
    "corpus_root",
    "last_tokens",
    "model_digest",
    "sample_batched",
    "teacher_signal",
]

FORMAT = 1  # of the cached files; a cache written by another format is refused
KEY_FILE, DATA_FILE = "key.json", "corpus.pt"  # the files of a cache entry
_SAMPLE_STRIDE = 4099  # model_digest reads every this-many-th weight (and every tensor's sum)


@dataclass(frozen=True)
class TeacherRows:
    """The teacher's distribution at R positions, sparsely: ``ids`` ``[R, k]`` (int64) the k
    largest logits' token ids in decreasing order, ``logits`` ``[R, k]`` their raw logits (fp32),
    ``logz`` ``[R]`` the log-partition logsumexp(row / T) of the whole row at the key's
    temperature T, ``log_tail`` ``[R]`` the log of the probability outside the top k (computed
    from the whole row: 1 - sum(top k) would lose a small tail to rounding; -inf when complete),
    and ``width`` the vocabulary size V (k == V: the rows are complete)."""

    ids: torch.Tensor
    logits: torch.Tensor
    logz: torch.Tensor
    log_tail: torch.Tensor
    width: int

    @property
    def complete(self) -> bool:
        return self.ids.shape[-1] >= self.width

    def log_probs(self, temperature: float) -> torch.Tensor:
        """log p of the top-k tokens ``[R, k]`` at ``temperature`` (the temperature of ``logz``)."""
        return self.logits / temperature - self.logz[:, None]

    def rows(self, start: int, stop: int) -> TeacherRows:
        return TeacherRows(self.ids[start:stop], self.logits[start:stop], self.logz[start:stop], self.log_tail[start:stop], self.width)

    def take(self, index: torch.Tensor) -> TeacherRows:
        """The rows ``index`` ``[n]``, in that order."""
        return TeacherRows(self.ids[index], self.logits[index], self.logz[index], self.log_tail[index], self.width)

    @staticmethod
    def from_logits(logits: torch.Tensor, top_k: int, temperature: float) -> TeacherRows:
        """The sparse form of full logits ``[R, V]`` (fp32), keeping ``top_k`` (0: every) token."""
        logits = logits.float()
        width = logits.shape[-1]
        k = width if top_k <= 0 else min(top_k, width)
        values, ids = logits.topk(k, dim=-1)  # [R, k], decreasing
        scaled = logits / temperature
        logz = torch.logsumexp(scaled, dim=-1)  # [R]
        log_tail = torch.logsumexp(scaled.scatter(-1, ids, float("-inf")), dim=-1) - logz  # [R]; -inf when k == V
        return TeacherRows(ids, values, logz, log_tail, width)

    @staticmethod
    def cat(parts: Sequence[TeacherRows]) -> TeacherRows:
        fields = [torch.cat([getattr(p, name) for p in parts]) for name in ("ids", "logits", "logz", "log_tail")]
        return TeacherRows(*fields, parts[0].width)


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


def sample_batched(
    model: nn.Module,
    loaded: LoadedModel,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    sampling: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """Up to ``max_new_tokens`` tokens of ``model`` after each prompt (fewer when it emits an
    end-of-sequence token), ``batch_size`` sequences per batched decoding; sequence i draws from a
    generator seeded with ``seeds[i]``, so its tokens do not depend on the batch it ran in.
    ``loaded`` gives the vocabulary width and end tokens (the target's, for a student);
    ``progress`` gets the number of sequences done after each batch."""
    alone = Hierarchy([model], [], logits_width=loaded.logits_width, eos_token_ids=loaded.eos_token_ids)
    out: list[list[int]] = [[] for _ in prompts]
    done = 0
    for batch in by_length([len(p) for p in prompts], batch_size):
        result = alone.generate_batch([list(prompts[i]) for i in batch], max_new_tokens, sampling, seeds=[seeds[i] for i in batch])
        for i, tokens in zip(batch, result.sequences):
            out[i] = tokens
        done += len(batch)
        if progress is not None:
            progress(done)
    return out


def by_length(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices 0..n-1 in batches of ``batch_size``, grouped by length (shortest first): a padded
    batch pays for its longest row, so a short prompt never waits on a 1,500-token one."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def last_tokens(prompt: list[int], n: int) -> list[int]:
    """The last ``n`` tokens of ``prompt`` (all of it when ``n`` is 0): what a drafter reads in training."""
    return prompt[-n:] if n else prompt


def _padded(prompts: Sequence[list[int]], continuations: Sequence[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` ``[B, L]`` of prompt + continuation."""
    rows = [p + c for p, c in zip(prompts, continuations)]
    length = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def continuation_logits(
    model: nn.Module, prompts: Sequence[list[int]], continuations: Sequence[list[int]], width: int, grad: bool = False
) -> torch.Tensor:
    """One batched teacher-forced pass: the logits ``[R, width]`` (fp32) predicting every
    continuation token, sequence after sequence (R = the continuations' total length).

    Right padding with an attention mask: a row's positions see only its own earlier tokens, so
    its logits are those of a pass over it alone. ``grad=True`` keeps the graph (a student in
    training). The decoder runs over every position; only the R positions that predict a
    continuation token are gathered (one index, so the backward pass scatters once) and reach
    the output layer, the largest matrix of a small model.
    """
    with torch.inference_mode(not grad):
        picked = continuation_hidden(model, prompts, continuations, grad)  # [R, d]
        return apply_output_layer(model, picked, width).float()  # soft-capped as the model's own forward does


def continuation_hidden(
    model: nn.Module,
    prompts: Sequence[list[int]],
    continuations: Sequence[list[int]],
    grad: bool = False,
    layers: Sequence[int] = (),
) -> torch.Tensor:
    """The final hidden states ``[R, d]`` (the output layer's inputs) that predict every
    continuation token, sequence after sequence, from one batched teacher-forced pass (right padding,
    as :func:`continuation_logits`); with ``layers``, the inputs of those decoder layers at the
    same positions instead, side by side (``[R, len(layers) d]``: a verifier's steering taps)."""
    device = next(model.parameters()).device
    ids, mask = _padded(prompts, continuations, device)
    length = ids.shape[1]
    rows = torch.cat([i * length + torch.arange(len(p) - 1, len(p) - 1 + len(c)) for i, (p, c) in enumerate(zip(prompts, continuations))])
    with torch.inference_mode(not grad):
        if layers:
            hidden = layer_inputs(model, ids, list(layers), mask)
        else:
            hidden = getattr(model, model.base_model_prefix)(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        return hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows.to(device))  # [R, d]


def corpus_hidden(
    model: nn.Module,
    corpus: Corpus,
    batch_size: int,
    layers: Sequence[int] = (),
    progress: Callable[[int, int], None] | None = None,
) -> torch.Tensor:
    """:func:`continuation_hidden` at every row of ``corpus`` ``[R, d]`` (or ``[R, len(layers) d]``),
    in corpus order, one padded pass per batch of sequences of similar length (a batch pays for its
    longest row); ``progress(done, total)`` after each pass."""
    keep = [i for i, cont in enumerate(corpus.continuations) if cont]
    out: torch.Tensor | None = None
    done = 0
    for batch in by_length([len(corpus.prompts[i]) + len(corpus.continuations[i]) for i in keep], batch_size):
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


def teacher_signal(
    model: nn.Module,
    prompts: Sequence[list[int]],
    continuations: Sequence[list[int]],
    width: int,
    top_k: int,
    temperature: float,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> TeacherRows:
    """The teacher's sparse distribution at every continuation position, ``batch_size``
    sequences per teacher-forced pass; ``progress`` gets the positions done after each pass."""
    keep = [i for i, c in enumerate(continuations) if c]  # a continuation can be empty (EOS at once): no rows
    if not keep:
        raise DistillError("every continuation is empty (the model ended each at once); give other prompts or more --max-new-tokens")
    pieces: dict[int, TeacherRows] = {}  # sequence -> its rows; batches run grouped by length
    for batch in by_length([len(prompts[i]) + len(continuations[i]) for i in keep], batch_size):
        seqs = [keep[j] for j in batch]
        logits = continuation_logits(model, [prompts[i] for i in seqs], [continuations[i] for i in seqs], width)
        rows = TeacherRows.from_logits(logits, top_k, temperature)
        start = 0
        for i in seqs:
            pieces[i] = rows.rows(start, start + len(continuations[i]))
            start += len(continuations[i])
        if progress is not None:
            progress(logits.shape[0])
    return TeacherRows.cat([pieces[i] for i in keep])  # sequence after sequence, as the corpus lays them out


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
    batch_size: int,
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
        target.model, target, seq_prompts, key.max_new_tokens, sampling, seeds, batch_size, lambda done: step("sampling", done, len(rows))
    )
    total = sum(len(c) for c in continuations)
    done = [0]

    def advance(n: int) -> None:
        done[0] += n
        step("teacher signal", done[0], total)

    signal = teacher_signal(target.model, seq_prompts, continuations, target.logits_width, key.top_k, key.temperature, batch_size, advance)
    corpus = Corpus(key, seq_prompts, continuations, signal, _offsets(continuations))
    _save(folder, corpus)
    return corpus, False
