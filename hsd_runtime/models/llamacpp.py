"""The llama.cpp engine: a GGUF file run by llama.cpp through its Python binding (``llama_cpp``).

:class:`GgufModel` is one loaded GGUF (weights shared by every level that names it); each level
opens its own context on it (:meth:`GgufModel.open_cache`), a KV cache of ``n_ctx`` cells.

The seam's requests map onto llama.cpp's batch and memory API:

- a pass feeds a ``llama_batch`` with an explicit position per token and asks for the logits of
  the rows it returns (``logits[i] = 1``; a verifier needs every row, which is what profiling times
  too), read back with ``llama_get_logits_ith``;
- a rollback is ``llama_memory_seq_rm`` on sequence 0 (the linear text);
- a draft tree gives node i its own sequence id 1 + i in one unified KV cache: a node's cell
  carries its own id and the ids of its descendants, and the linear text is shared into a new
  node's id with ``llama_memory_seq_cp`` (in a unified cache a copy adds an id to the cells, no
  keys or values move). Keeping a path copies each path node's cell into sequence 0, then every
  node id is removed: the cells of the other branches are freed.

Passes run on ``threads`` threads for one token and for many alike (``llama_set_n_threads``).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np
import torch

from ..terms.choices import GGUF_QUANTS
from ..terms.errors import ChainError, ModelNotFoundError, PackageMissingError
from .engine import LLAMA_CPP_PYTHON, TreeFeed, hidden_refusal, rows_refusal
from .gguf_file import check_gguf

__all__ = [
    "LLAMACPP_QUANTS",
    "LLAMA_CPP_PYTHON",
    "GgufModel",
    "LlamaCppCache",
    "binding",
    "pruned_gguf",
    "quantize_gguf",
    "quantized_gguf",
]

# quant= values a llama.cpp level may ask for -> the binding's name of that file type
LLAMACPP_QUANTS = {q: f"LLAMA_FTYPE_MOSTLY_{q.upper()}" for q in GGUF_QUANTS}
DEFAULT_CTX = 4096  # KV cells per level: a long prompt plus hundreds of new tokens and the drafts
DECODE_CHUNK = 512  # tokens per llama_decode call (a chunk size, not a bound): a longer pass is fed in pieces
TREE_SEQS = 64  # sequence ids per context: the linear text and up to 63 tree nodes

_INSTALL = "bash scripts/install.sh (or: pip install llama-cpp-python==" + LLAMA_CPP_PYTHON + ")"
_lock = threading.Lock()
_state: dict[str, Any] = {}


def binding() -> Any:
    """The ``llama_cpp`` module, its backend initialized and its log routed to :func:`last_log`
    (once per process); :class:`PackageMissingError` naming the install step where it is missing."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        try:
            import llama_cpp
        except ImportError as exc:
            raise PackageMissingError(f"the llama.cpp engine needs llama-cpp-python ({exc}); install it with {_INSTALL}") from None
        lines: list[str] = []

        @llama_cpp.llama_log_callback
        def _log(level: int, text: bytes, user: Any) -> None:
            if level >= 4 or level == 0:  # ERROR (4) and the untagged continuation lines; kept short
                lines.append(text.decode(errors="replace").strip())
                del lines[:-8]

        llama_cpp.llama_backend_init()
        llama_cpp.llama_log_set(_log, ctypes.c_void_p())
        _state.update(module=llama_cpp, log=_log, lines=lines)
        return llama_cpp


def last_log() -> str:
    """The last error line llama.cpp logged (empty when none)."""
    lines = [x for x in _state.get("lines", []) if x]
    return lines[-1] if lines else ""


def _clear_log() -> None:
    """Forget the lines logged so far: :func:`_reason` then reads only those of the next call."""
    _state.get("lines", []).clear()


def _reason() -> str:
    """Why the last call failed, as llama.cpp logged it since :func:`_clear_log`: the first line
    naming an error (the cause; the lines after it name the functions it passed through), else
    the last line."""
    lines = [" ".join(x.split()) for x in _state.get("lines", []) if x.strip()]  # one line, its padding squeezed
    errors = [x for x in lines if "error" in x.lower()]
    return (errors or lines or ["no reason given"])[0 if errors else -1]


class GgufModel:
    """A GGUF file loaded by llama.cpp: the weights every level that names it shares.

    Args:
        path: the GGUF file.
        name: how errors and stats name it (the spec).
        threads: threads for every pass.
        n_ctx: KV cells of each context opened on it.

    It is an :class:`~hsd_runtime.models.engine.EngineModel`.
    """

    engine: Literal["llamacpp"] = "llamacpp"
    allocates_cells = True  # a context holds its cells from the start
    device = torch.device("cpu")  # where its logits come back

    def __init__(self, path: Path, name: str, threads: int, n_ctx: int = DEFAULT_CTX) -> None:
        check_gguf(path)  # what llama.cpp would abort on (not return an error for) is refused before it sees the file
        lib = binding()
        self.path = path
        self.name = name
        self.threads = threads
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        # read into memory, not mapped: llama.cpp repacks most weights into its own buffers for the
        # CPU's kernels, and a mapped file stays resident beside that copy (the 1.5B's Q4_K_M: 1,704
        # MiB resident mapped, 1,114 MiB read; its passes as fast either way)
        params.load_mode = lib.LLAMA_LOAD_MODE_NONE
        _clear_log()
        handle = lib.llama_model_load_from_file(str(path).encode(), params)
        if not handle:
            raise ModelNotFoundError(f"llama.cpp cannot load {path} ({_reason()}); is it a complete GGUF file?")
        self._handle = handle
        weakref.finalize(self, lib.llama_model_free, handle)
        self._vocab = lib.llama_model_get_vocab(handle)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self.num_layers = int(lib.llama_model_n_layer(handle))
        self.n_params = int(lib.llama_model_n_params(handle))
        self.n_ctx = min(n_ctx, int(lib.llama_model_n_ctx_train(handle)) or n_ctx)

    @property
    def context_limit(self) -> int:
        """The cells of a context opened without ``cells``: ``n_ctx``."""
        return self.n_ctx

    def open_rows(self, width: int, rows: int) -> NoReturn:
        """Refused: this engine decodes one sequence at a time."""
        raise ChainError(rows_refusal(self.name))

    def open_cache(self, width: int, cells: int | None = None, keep_hidden: bool = False, layers: tuple[int, ...] = ()) -> LlamaCppCache:
        """A new context (its own KV cache) on these weights, returning ``width`` logits columns.

        ``cells``: the positions it holds, where the caller knows it needs fewer than the model's
        ``n_ctx`` (a pass over one known text; at least :data:`TREE_SEQS`): the keys and values are
        allocated, and written once, for every cell (the 1.5B: 117 MB at 4096 cells). It keeps no
        hidden rows (``keep_hidden`` is refused)."""
        if keep_hidden:
            raise ChainError(hidden_refusal(self.name))
        return LlamaCppCache(self, width, cells)

    def __repr__(self) -> str:
        return self.name


class LlamaCppCache:
    """One llama.cpp context over a :class:`GgufModel` (:class:`~hsd_runtime.models.engine.EngineCache`)."""

    device = torch.device("cpu")

    def __init__(self, model: GgufModel, width: int, cells: int | None = None) -> None:
        if width > model.n_vocab:
            raise ChainError(f"{model.name} scores {model.n_vocab} tokens; the chain asks for {width}")
        lib = binding()
        self.model = model
        self.width = width
        # llama.cpp sizes its output rows by the context and needs one per sequence id: at least TREE_SEQS cells
        self.n_ctx = max(TREE_SEQS, min(cells, model.n_ctx)) if cells else model.n_ctx
        params = lib.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = DECODE_CHUNK
        params.n_seq_max = TREE_SEQS
        params.kv_unified = True  # one cache for every sequence id: a tree node's cell is shared, not copied
        params.n_threads = params.n_threads_batch = model.threads
        params.no_perf = True
        ctx = lib.llama_init_from_model(model._handle, params)
        if not ctx:
            raise ModelNotFoundError(
                f"llama.cpp cannot open a context of {self.n_ctx} tokens on {model.name} ({last_log() or 'no reason'})"
            )
        self._ctx = ctx
        self._mem = lib.llama_get_memory(ctx)
        self._batch = lib.llama_batch_init(DECODE_CHUNK, 0, TREE_SEQS)
        weakref.finalize(self, _free_context, lib, ctx, self._batch, model)  # the model outlives its contexts
        self._positions: list[int] = []  # the positions of the tree nodes fed, by node index
        self._lib = lib

    def clear(self) -> None:
        self._lib.llama_memory_clear(self._mem, True)
        self._positions = []

    def crop(self, keep: int, held: int) -> None:
        self._lib.llama_memory_seq_rm(self._mem, 0, keep, -1)

    def drop_tree(self, fed: int) -> None:
        for i in range(fed):
            self._lib.llama_memory_seq_rm(self._mem, 1 + i, -1, -1)
        self._positions = []

    def prepare(self, widest: int) -> None:
        pass  # llama.cpp sizes its compute graph per batch itself

    def keep_path(self, held: int, path: list[int], fed: int) -> bool:
        for i in path:  # node i's cell is the only one of sequence 1 + i at its position
            pos = self._positions[i]
            self._lib.llama_memory_seq_cp(self._mem, 1 + i, 0, pos, pos + 1)
        self.drop_tree(fed)
        return True

    def feed(self, tokens: list[int], start: int, keep: int, tree: TreeFeed | None = None) -> torch.Tensor:
        """One pass (several ``llama_decode`` calls when longer than the batch, e.g. a long prompt)."""
        n = len(tokens)
        positions = list(range(start, start + n))
        seqs: list[Sequence[int]] = [(0,)] * n
        if tree is not None:
            positions, seqs = self._tree_layout(tokens, start, tree)
        if positions[-1] >= self.n_ctx:
            raise ChainError(f"{self.model.name}: position {positions[-1]} is past its context of {self.n_ctx} tokens")
        rows: list[np.ndarray] = []
        for lo in range(0, n, DECODE_CHUNK):
            hi = min(n, lo + DECODE_CHUNK)
            # the rows kept are the last `keep` of the pass: those of them that fall in [lo, hi)
            rows.append(self._decode(tokens[lo:hi], positions[lo:hi], seqs[lo:hi], min(hi - lo, max(0, keep - (n - hi)))))
        out = np.concatenate(rows) if len(rows) > 1 else rows[0]  # [keep, n_vocab]
        return torch.from_numpy(out[:, : self.width])

    def _tree_layout(self, tokens: list[int], start: int, feed: TreeFeed) -> tuple[list[int], list[Sequence[int]]]:
        """Positions and sequence ids of a pass that ends with tree nodes ``feed.first..``; shares the
        cached text and the cached ancestors of every new node into that node's sequence."""
        tree, first = feed.tree, feed.first
        if len(tree) >= TREE_SEQS:
            raise ChainError(f"the llama.cpp engine verifies trees of at most {TREE_SEQS - 1} nodes; this one has {len(tree)}")
        tail = len(tokens) - (len(tree) - first)
        new = range(first, len(tree))
        owners: dict[int, list[int]] = {i: [1 + i] for i in new}  # a new node's cell: its id and its new descendants'
        for c in new:
            node = tree.parents[c]
            while node >= 0:
                if node >= first:
                    owners[node].append(1 + c)
                else:  # an ancestor already cached: its cell takes the new node's id
                    pos = self._positions[node]
                    self._lib.llama_memory_seq_cp(self._mem, 1 + node, 1 + c, pos, pos + 1)
                node = tree.parents[node]
            if start:  # the cached linear text, shared into the node's sequence
                self._lib.llama_memory_seq_cp(self._mem, 0, 1 + c, 0, start)
        self._positions = self._positions[:first] + [feed.linear + tree.depths[i] - 1 for i in new]
        text_ids = (0, *(1 + i for i in new))  # the tail of the text is seen by the text and every new node
        positions = list(range(start, start + tail)) + self._positions[first:]
        seqs: list[Sequence[int]] = [text_ids] * tail + [owners[i] for i in new]
        return positions, seqs

    def _decode(self, tokens: list[int], positions: list[int], seqs: list[Sequence[int]], keep: int) -> np.ndarray:
        """One ``llama_decode`` call; the logits ``[keep, n_vocab]`` of its last ``keep`` tokens."""
        batch, n = self._batch, len(tokens)
        batch.n_tokens = n
        for i, (token, pos, ids) in enumerate(zip(tokens, positions, seqs)):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = len(ids)
            for j, s in enumerate(ids):
                batch.seq_id[i][j] = s
            batch.logits[i] = 1 if i >= n - keep else 0
        code = self._lib.llama_decode(self._ctx, batch)
        if code != 0:
            raise ChainError(
                f"llama.cpp could not run a pass of {n} tokens on {self.model.name} (code {code}: {last_log() or 'no reason'})"
            )
        width = self.model.n_vocab
        out = np.empty((keep, width), dtype=np.float32)
        for r in range(keep):
            row = self._lib.llama_get_logits_ith(self._ctx, n - keep + r)
            out[r] = np.ctypeslib.as_array(row, shape=(width,))
        return out


def _free_context(lib: Any, ctx: Any, batch: Any, model: GgufModel) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)


def quantize_gguf(source: Path, out: Path, quant: str, threads: int) -> None:
    """Write ``source`` re-quantized to ``quant`` (a key of :data:`LLAMACPP_QUANTS`) as ``out``,
    with llama.cpp's quantizer; ``ModelNotFoundError`` with its reason where it fails (a source it
    cannot read, a folder it cannot write or that fills up). ``out`` may be left partial then."""
    check_gguf(source)  # the quantizer loads its hyperparameters: what llama.cpp asserts on would abort it
    lib = binding()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, LLAMACPP_QUANTS[quant])
    params.nthread = threads
    params.allow_requantize = True  # the packaged GGUFs are quantized already
    _clear_log()
    code = lib.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params))
    if code != 0:
        raise ModelNotFoundError(
            f"llama.cpp could not quantize {source} to {quant} (code {code}: {_reason()}); "
            f"is the source a whole GGUF, and has the cache folder {out.parent} room for the copy?"
        )


def _check_made(source: Path, made: Path, what: str, maker: str) -> None:
    """Refuse ``made``, a copy of ``source`` (``what``: how ``maker`` made it), unless it is a whole GGUF
    that llama.cpp loads (the quantizer writes what it reads without building the model: a source
    llama.cpp cannot run gives an output it cannot run either); the error names ``source``, the
    file the user gave."""
    try:
        check_gguf(made)
    except ModelNotFoundError:
        raise ModelNotFoundError(f"{maker} wrote an incomplete copy of {source} ({what}); nothing was cached") from None
    lib = binding()
    params = lib.llama_model_default_params()
    params.n_gpu_layers = 0
    _clear_log()
    handle = lib.llama_model_load_from_file(str(made).encode(), params)
    if not handle:
        raise ModelNotFoundError(f"llama.cpp cannot load {source} {what} ({_reason()}); is {source.name} a model llama.cpp runs?")
    lib.llama_model_free(handle)


def _cached_copy(source: Path, out: Path, what: str, maker: str, make: Callable[[Path], None]) -> Path:
    """``out``, a copy of ``source`` that ``make(path)`` writes (``maker`` and ``what`` name it in
    errors), made once into the cache and found there afterwards.

    A copy found there is only read (no lock, no write: a team may share a read-only cache).
    Otherwise it is made under the entry's lock by :func:`~.cache.write_entry`, at a fresh private
    name, checked (a whole GGUF that llama.cpp loads) and renamed into place, so the cache never
    holds a partial or unloadable file and two processes that need it at once make it once. Where
    making it fails, or the cache cannot hold the copy, the error is one line and nothing of the
    copy is left.
    """
    from .cache import cache_lock, write_entry

    if out.is_file():
        return out

    def write(path: Path) -> None:
        make(path)
        _check_made(source, path, what, maker)

    with cache_lock(out):
        if not out.is_file():
            write_entry(out, write)
    return out


def quantized_gguf(source: Path, quant: str, threads: int) -> Path:
    """``source`` re-quantized to ``quant`` by llama.cpp's quantizer, made once into the cache (see :func:`_cached_copy`)."""
    from .packaged import quantized_path

    if quant not in LLAMACPP_QUANTS:
        raise ChainError(f"quant={quant} on the llama.cpp engine; use one of {', '.join(LLAMACPP_QUANTS)}")
    out = quantized_path(source, quant)
    return _cached_copy(
        source, out, f"quantized to {quant}", "llama.cpp's quantizer", lambda tmp: quantize_gguf(source, tmp, quant, threads)
    )


def pruned_gguf(source: Path, layers: int) -> Path:
    """``source``'s first ``layers`` decoder layers under its own head (:mod:`.gguf_prune`), made
    once into the cache (see :func:`_cached_copy`); ``source`` itself where it has no more layers."""
    from .gguf_prune import checked_layers, prune_gguf
    from .packaged import pruned_path

    if layers == checked_layers(source, layers):
        return source
    out = pruned_path(source, layers)
    return _cached_copy(source, out, f"cut to its first {layers} layers", "pruning", lambda tmp: prune_gguf(source, tmp, layers))
