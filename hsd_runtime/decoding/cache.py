"""One model's KV cache over one or more token sequences (rows): the only place a level rolls back.

Callers never crop caches themselves. They ask for logits over whole sequences, one per row; each
row keeps the longest prefix it already holds, drops the rest (a rejection below, or a commit above
that replaced a token) and feeds only its new tokens, all rows in one forward pass.

A draft tree can hang after the sequence of a single row (:meth:`CachedModel.tree_logits`: nodes
fed with a tree attention mask). The next call over a sequence settles it: the nodes along the path
that sequence took through the tree are kept (their keys and values gathered into sequence order),
the other branches dropped.

This bookkeeping is the same on every engine; the engine (:mod:`hsd_runtime.models.engine`) only
feeds tokens, crops and keeps a tree's path (one row), or feeds rows at given positions (more).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..models.engine import EngineCache, EngineRows, TreeFeed
from ..models.torch_engine import engine_model
from ..terms.errors import ChainError
from ..terms.tree import DraftTree
from .results import LevelStats

__all__ = ["CachePool", "CachedModel", "common_prefix", "engine_cache"]


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def engine_cache(
    model: Any, width: int, keep_hidden: bool = False, layers: tuple[int, ...] = (), cells: int | None = None, rows: int = 1
) -> EngineCache | EngineRows:
    """A fresh KV cache for ``model`` on its engine (:func:`~hsd_runtime.models.torch_engine.engine_model`;
    ``cells``: the positions a cache that allocates them up front holds, None for the model's whole
    context) over ``rows`` sequences (more than one: decoded in lockstep, without hidden rows)."""
    if rows == 1:
        return engine_model(model).open_cache(width, cells, keep_hidden, layers)
    if keep_hidden:
        raise ChainError(f"{model}: block-draft heads and steering read the hidden rows of one prompt at a time")
    return engine_model(model).open_rows(width, rows)


class CachedModel:
    """A causal LM with a rolling KV cache over one or more rows, and its counters.

    Args:
        model: a transformers causal LM (or a truncated view of one), or a model of another
            engine (see :func:`engine_cache`).
        logits_width: logits are sliced to this many columns (the chain's shared vocabulary).
        stats: counters to update with each forward pass (one pass over every row counts once).
        keep_hidden: also keep the final hidden state (the output layer's input) of every row it
            computes logits for, so that block-draft heads can read them (:meth:`hidden_at`).
            Torch engine, one row only.
        layers: with ``keep_hidden``, keep instead the inputs of these decoder layers at every such
            row, side by side (``[len(layers) d]`` per row): what steers the drafter below.
        cells: the positions an engine that allocates its cache up front (llama.cpp) allocates;
            None: the model's whole context.

    The number of rows is set by each prefill (:meth:`prefill_rows`); one row until the first.
    ``keep_prompt``: a prefill of the prompts the cache still holds from the previous prefill (a
    repeat of them) keeps their keys and values and the rows that prefill gave, and feeds nothing.
    """

    def __init__(
        self,
        model: Any,
        logits_width: int,
        stats: LevelStats,
        keep_hidden: bool = False,
        layers: tuple[int, ...] = (),
        cells: int | None = None,
    ) -> None:
        if layers and not keep_hidden:
            raise ValueError("layers are kept only with keep_hidden")
        self.model = model
        self.width = logits_width
        self.stats = stats
        self.keep_hidden = keep_hidden
        self.layers = tuple(layers)
        self.cells = cells
        self.kv: Any = engine_cache(model, logits_width, keep_hidden, self.layers, cells)  # its KV cache on the model's engine
        self.rows = 1
        self.device = self.kv.device
        self.keep_prompt = False
        self.reset()

    def reset(self, rows: int | None = None) -> None:
        """Forget every cached sequence (new prompts); hold ``rows`` rows from now on (default: as many as now)."""
        if rows is not None and rows != self.rows:
            self.kv = engine_cache(self.model, self.width, self.keep_hidden, self.layers, self.cells, rows)
            self.rows = rows
        else:
            self.kv.clear()
        self._held: list[list[int]] = [[] for _ in range(self.rows)]  # row i's cached tokens
        self._last: list[torch.Tensor | None] = [None] * self.rows  # [1, V] logits after row i's last cached token
        # keep_hidden (one row): the hidden rows [R, d] of the last linear pass, at positions _hid_first..,
        # and the row after the last cached token (kept beside _last)
        self._hid: torch.Tensor | None = None
        self._hid_first = 0
        self._last_hid: torch.Tensor | None = None
        self._tree_hid: torch.Tensor | None = None  # [_tree_fed, d], beside _tree_rows
        self._forward_s = 0.0  # time inside the model since the last logits()/prefill() call
        # (one row) a draft tree whose first `_tree_fed` nodes follow `_cached` in the cache, in order,
        # and the logits after each of them ([_tree_fed, V]); `_last` stays the row after `_cached`
        self._tree: DraftTree | None = None
        self._tree_fed = 0
        self._tree_rows: torch.Tensor | None = None
        # the last prefill's prompts and the rows it left (_last, _last_hid per row), for keep_prompt
        self._prompts: list[list[int]] | None = None
        self._prompt_rows: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []

    @property
    def _cached(self) -> list[int]:
        """The one row's cached tokens."""
        return self._held[0]

    @_cached.setter
    def _cached(self, tokens: list[int]) -> None:
        self._held[0] = tokens

    def _settle(self, seq: list[int]) -> None:
        """Make the cache linear again: keep the hanging tree's nodes along ``seq``, drop the rest."""
        tree = self._tree
        if tree is None:
            return
        held = len(self._cached)
        path = []
        if seq[:held] == self._cached:
            # nodes are breadth-first, so the fed ones (a prefix) along a path form a prefix of it
            path = [i for i in tree.follow(seq[held:]) if i < self._tree_fed]
        if path and self.kv.keep_path(held, path, self._tree_fed):
            assert self._tree_rows is not None
            self._cached = self._cached + [tree.tokens[i] for i in path]
            self._last[0] = self._tree_rows[path[-1] : path[-1] + 1]
            self._last_hid = None if self._tree_hid is None else self._tree_hid[path[-1] : path[-1] + 1]
        elif self._tree_fed:  # no path kept (or an engine that cannot keep one): drop the nodes
            self.kv.drop_tree(self._tree_fed)
        self._tree, self._tree_fed, self._tree_rows, self._tree_hid = None, 0, None, None
        self._hid = None

    def _rollback(self, keep: int, row: int = 0) -> None:
        """Drop row ``row``'s cached positions from ``keep`` on (more than one row: its length is
        all there is to change, the next pass writes over the rest)."""
        held = self._held[row]
        if keep >= len(held):
            return
        if self.rows == 1:
            if keep == 0:
                self.kv.clear()
            else:
                self.kv.crop(keep, len(held))
            self._last_hid = None
        self._held[row] = held[:keep]
        self._last[row] = None

    def _forward(self, seqs: Sequence[list[int] | None], first: Sequence[int]) -> tuple[list[torch.Tensor | None], int]:
        """Per row, logits rows ``first[i]..len(seqs[i]) - 1`` (None for a row not asked), and the
        tokens fed, in one pass over every row (rows with nothing new are padding)."""
        if self._tree is not None:
            seq = seqs[0]
            assert seq is not None
            self._settle(seq)
        new: list[list[int]] = []
        starts: list[int] = []
        keep: list[int] = []  # rows of this pass's logits each row needs
        kept: list[bool] = []  # the first row wanted is the one kept from the previous pass
        for i, seq in enumerate(seqs):
            held = self._held[i]
            if seq is None:
                new.append([])
                starts.append(len(held))
                keep.append(0)
                kept.append(False)
                continue
            common = common_prefix(held, seq)
            if self._last[i] is not None and common == len(held) and first[i] == len(held) - 1:
                start = len(held)  # feed only what is new
                kept.append(True)
            else:
                start = min(common, first[i])
                kept.append(False)
                self._rollback(start, i)
            new.append(seq[start:])
            starts.append(start)
            keep.append(len(seq) - first[i] - kept[-1])
        fed = sum(len(x) for x in new)
        passed: torch.Tensor | None = None  # [rows, max(keep), V]
        if fed:
            passed = self._run(new, starts, max(keep))
        captured = self._captured() if fed else None
        out: list[torch.Tensor | None] = []
        for i, seq in enumerate(seqs):
            if seq is None:
                out.append(None)
                continue
            parts: list[torch.Tensor] = []
            hid: list[torch.Tensor | None] = []
            if kept[i]:
                kept_row = self._last[i]
                assert kept_row is not None
                parts.append(kept_row)
                hid.append(self._last_hid)
            if keep[i]:
                assert passed is not None
                parts.append(passed[i, passed.shape[1] - keep[i] :])
                hid.append(captured)
            logits = torch.cat(parts) if len(parts) > 1 else parts[0]  # [len(seq) - first, V]
            self._held[i] = list(seq)
            self._last[i] = logits[-1:]
            if self.keep_hidden:  # one row
                self._hid = torch.cat(hid) if all(h is not None for h in hid) else None  # type: ignore[arg-type]
                self._hid_first = first[i]
                self._last_hid = None if self._hid is None else self._hid[-1:]
            out.append(logits)
        return out, fed

    def prepare(self, widest: int) -> None:
        """Make every pass of up to ``widest`` tokens of one row ready now (see
        :meth:`~hsd_runtime.models.engine.EngineCache.prepare`); lockstep rows need none."""
        if self.rows == 1:
            self.kv.prepare(widest)

    def _captured(self) -> torch.Tensor | None:
        """The hidden rows the engine kept in its latest pass (``keep_hidden``), else None."""
        return getattr(self.kv, "captured", None) if self.keep_hidden else None

    def _run(self, new: list[list[int]], starts: list[int], keep: int) -> torch.Tensor:
        """One pass: row i feeds ``new[i]`` at ``starts[i]..``; logits ``[rows, keep, V]``."""
        t0 = time.perf_counter()
        if self.rows == 1:
            logits = self.kv.feed(new[0], starts[0], keep)[None]  # a CUDA device is synchronized
        else:
            logits = self.kv.feed_rows(new, starts, keep)
        self._forward_s += time.perf_counter() - t0
        return logits

    def _run_tree(self, new: list[int], start: int, tree: TreeFeed) -> torch.Tensor:
        t0 = time.perf_counter()
        logits = self.kv.feed(new, start, len(new), tree)  # [len(new), V]
        self._forward_s += time.perf_counter() - t0
        return logits

    def hidden_at(self, seq: list[int]) -> tuple[torch.Tensor, int] | None:
        """The final hidden state ``[1, d]`` (or the kept layers' inputs, ``[1, len(layers) d]``)
        after ``seq[: j + 1]`` for the largest j whose row the last pass kept (``keep_hidden``),
        and j; None when no kept row lies along ``seq``.

        A row is valid for ``seq`` only where ``seq`` agrees with the tokens it was computed over:
        the cached text up to that position, and down a hanging tree, the path to a fed node.
        """
        if self._tree is not None:
            held = len(self._cached)
            if seq[:held] != self._cached:
                return None
            nodes = [i for i in self._tree.follow(seq[held:]) if i < self._tree_fed]
            if nodes and self._tree_hid is not None:
                return self._tree_hid[nodes[-1] : nodes[-1] + 1], held + len(nodes) - 1
            return None if self._last_hid is None else (self._last_hid, held - 1)
        if self._hid is None:
            return None
        j = common_prefix(self._cached, seq) - 1  # rows up to j were computed over seq's own tokens
        if j < self._hid_first:
            return None
        return self._hid[j - self._hid_first : j - self._hid_first + 1], j

    def logits(self, seq: list[int], first: int) -> torch.Tensor:
        """Logits ``[len(seq) - first, V]`` of the one row; row i predicts the token after ``seq[first + i]``.

        Counted as one decode forward pass of the tokens not yet cached (none when the rows
        wanted were all kept from the previous pass, e.g. the prompt's last position).
        """
        out = self.logits_rows([seq], [first])[0]
        assert out is not None
        return out

    def logits_rows(self, seqs: Sequence[list[int] | None], first: Sequence[int]) -> list[torch.Tensor | None]:
        """Per row i, logits ``[len(seqs[i]) - first[i], V]``; row r predicts the token after
        ``seqs[i][first[i] + r]``. A row given None is not asked (padding in the pass).

        Counted as one forward pass of the tokens not yet cached (none when every row wanted was
        kept from the previous pass).
        """
        return self._counted(lambda: self._forward(seqs, first))

    def _counted(self, call: Callable[[], tuple[Any, int]]) -> Any:
        """Run one (possibly empty) pass and add it to the stats: a pass, its tokens, its time."""
        t0 = time.perf_counter()
        self._forward_s = 0.0
        logits, fed = call()  # each model pass synchronizes a CUDA device itself
        self.stats.add_pass(fed, time.perf_counter() - t0, self._forward_s)
        return logits

    def _tree_forward(self, seq: list[int], tree: DraftTree) -> tuple[torch.Tensor, int]:
        """Feed what is missing of ``seq`` and ``tree``; return rows ``[1 + N, V]`` and tokens fed."""
        if self._tree is not tree or self._cached != seq:
            self._settle(seq)
            common = common_prefix(self._cached, seq)
            if not (self._last[0] is not None and common == len(self._cached) == len(seq)):
                start = min(common, len(seq) - 1)
                self._rollback(start)
                self._cached = self._cached[:start]  # the tail below is fed again
        tail = seq[len(self._cached) :]
        first = self._tree_fed
        new = tail + tree.tokens[first:]  # [tail + M]: the rest of the text, then the new nodes
        if new:
            linear = len(seq)
            rows = self._run_tree(new, linear - len(tail), TreeFeed(tree, first, linear))
            if tail:
                self._last[0] = rows[len(tail) - 1 : len(tail)]
            fresh = rows[len(tail) :]
            self._tree_rows = fresh if self._tree_rows is None or not first else torch.cat([self._tree_rows, fresh])
            if self.keep_hidden:
                captured = self._captured()
                assert captured is not None
                if tail:
                    self._last_hid = captured[len(tail) - 1 : len(tail)]
                nodes = captured[len(tail) :]
                self._tree_hid = nodes if self._tree_hid is None or not first else torch.cat([self._tree_hid, nodes])
        self._cached, self._tree, self._tree_fed = list(seq), tree, len(tree)
        last = self._last[0]
        assert last is not None and self._tree_rows is not None
        return torch.cat([last, self._tree_rows]), len(new)

    def tree_logits(self, seq: list[int], tree: DraftTree) -> torch.Tensor:
        """Logits ``[1 + N, V]`` after ``seq`` (row 0) and after every node of ``tree`` (row 1 + i).

        One forward pass with a tree attention mask feeds whatever is not cached yet: the end of
        ``seq`` and the tree's nodes (a tree grown depth by depth feeds only its new nodes). The
        tree then hangs in the cache until the next call settles it. One row only.
        """
        if self.rows != 1:
            raise ChainError("a draft tree is verified for one prompt at a time")
        return self._counted(lambda: self._tree_forward(seq, tree))

    def prefill(self, prompt: list[int]) -> None:
        """Cache one prompt (one row): :meth:`prefill_rows` of ``[prompt]``."""
        self.prefill_rows([prompt])

    def prefill_rows(self, prompts: Sequence[list[int]]) -> None:
        """Cache every prompt, one row each, in one pass, and keep the logits that predict each
        first new token (with ``keep_prompt``, from the previous prefill of the same prompts where
        the cache still holds them)."""
        t0 = time.perf_counter()
        prompts = [list(p) for p in prompts]
        again = self.keep_prompt and self._prompts == prompts and all(h[: len(p)] == p for h, p in zip(self._held, prompts))
        if again:
            if self._tree is not None:
                self._settle(prompts[0])  # a tree hanging after the last generation: dropped
            for i, p in enumerate(prompts):
                self._rollback(len(p), i)  # the last generation's tokens: dropped
                self._last[i] = self._prompt_rows[i][0]
            self._last_hid = self._prompt_rows[0][1]
            self._hid, self._hid_first = self._last_hid, len(prompts[0]) - 1
        else:
            self.reset(len(prompts))
            self._forward(prompts, [len(p) - 1 for p in prompts])
            self.stats.prefill_tokens += sum(len(p) for p in prompts)
            self._prompts = prompts
            self._prompt_rows = [(self._last[i], self._last_hid if i == 0 else None) for i in range(len(prompts))]
        self.stats.prefill_s += time.perf_counter() - t0


class CachePool:
    """Caches shared by hierarchies that run one at a time (the plans of one validation).

    A model that several hierarchies hold gets one cache here, so a hierarchy that decodes the
    prompt another one prefilled last keeps that prefill (``reuse_prompt``) instead of feeding
    it again, and the model's keys and values are held once. One cache per model object, label,
    logits width and what it keeps of its hidden rows; a model listed twice in one chain gets a
    cache of its own for its second level (see :class:`~hsd_runtime.decoding.hierarchy.Hierarchy`).

    ``cells``: where the caller knows the longest text its hierarchies run (prompt, new tokens and
    drafts), the positions each cache of an engine that allocates them up front (llama.cpp) holds,
    instead of the model's whole context: a 1.5B's context of 4096 cells takes about 150 MB, one
    of 512 about 40 MB. A hierarchy on the pool refuses a generation that needs more cells (a
    tree's every node holds one) before it starts.
    """

    def __init__(self, cells: int | None = None) -> None:
        self.cells = cells
        # key -> (the model, kept alive so that its id is not reused; its cache)
        self._caches: dict[tuple[int, str, int, bool, tuple[int, ...]], tuple[Any, CachedModel]] = {}

    def get(self, model: Any, name: str, logits_width: int, keep_hidden: bool = False, layers: tuple[int, ...] = ()) -> CachedModel:
        """The pooled cache of ``model`` (made on first use, its counters labelled ``name``)."""
        key = (id(model), name, logits_width, keep_hidden, tuple(layers))
        if key not in self._caches:
            self._caches[key] = (model, CachedModel(model, logits_width, LevelStats(model=name), keep_hidden, layers, self.cells))
        return self._caches[key][1]

    def release(self, model: Any) -> None:
        """Drop the pool's caches of ``model`` (their memory goes with the last hierarchy holding them)."""
        self._caches = {key: held for key, held in self._caches.items() if held[0] is not model}
