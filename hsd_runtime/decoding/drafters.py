"""The ``Drafter`` protocol and the model-backed levels of a hierarchy.

Every level below the target is a drafter: asked for ``n`` tokens after the context of each row
(each prompt decoded in lockstep), it returns them with its **own** distributions for those tokens.
Rows share the passes and nothing else: each drafts, verifies and draws from its own past only. A model at level 0 drafts autoregressively;
a model above level 0 is a :class:`VerifierLevel` that drafts by verifying the level below,
round after round, until it holds ``n`` tokens. The target is a :class:`VerifierLevel` whose rounds
are committed one at a time. Chains are built by composing these objects, not by flags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeGuard, cast

import torch

from ..terms.errors import ChainError
from ..terms.shape import TreeShape, Width
from ..terms.tree import DraftTree
from .cache import CachedModel
from .confidence import top_share
from .results import LevelStats
from .rrs import draw_without_replacement, verify_tree_greedy, verify_tree_sample
from .sampling import SamplingConfig, draw, warp
from .verify import verify_greedy, verify_sample

__all__ = ["DraftContext", "Drafter", "ModelDrafter", "Proposal", "TreeDrafter", "VerifierLevel"]


@dataclass(frozen=True)
class DraftContext:
    """What each row is asked to continue, and how tokens are chosen.

    Row i continues ``rows[i]`` (its prompt + committed tokens + tokens pending at the levels above)
    where ``active[i]``; the other rows wait this step. Row i draws from ``generators[i]``.
    """

    rows: list[list[int]]
    active: list[bool]
    sampling: SamplingConfig
    generators: list[torch.Generator]
    # the most tokens row i may still have drafted for it: the tokens its generation still needs
    # less the one its round adds (as servers cap a draft near the end); None: no bound
    budget: list[int] | None = None

    @classmethod
    def one(cls, tokens: list[int], sampling: SamplingConfig, generator: torch.Generator) -> DraftContext:
        """The context of a single row."""
        return cls([list(tokens)], [True], sampling, [generator])

    @property
    def tokens(self) -> list[int]:
        """The tokens of the only row (what the levels that decode one row at a time read: trees, heads, steering)."""
        assert len(self.rows) == 1, "a level of one row asked about several"
        return self.rows[0]

    @property
    def generator(self) -> torch.Generator:
        """The generator of the only row."""
        assert len(self.generators) == 1, "a level of one row asked about several"
        return self.generators[0]

    def ahead(self, held: list[list[int]], active: list[bool]) -> DraftContext:
        """The context with ``held[i]`` appended to row i, ``active`` the rows asked now."""
        budget = None if self.budget is None else [max(0, b - len(h)) for b, h in zip(self.budget, held)]
        return replace(self, rows=[t + h for t, h in zip(self.rows, held)], active=active, budget=budget)


@dataclass
class Proposal:
    """Drafted tokens and the proposer's distributions for them.

    ``probs`` is ``[len(tokens), V]``; it is None in greedy mode, and for a deterministic drafter,
    whose distribution is one-hot on each token it proposes.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None


def _limits(ctx: DraftContext, n: int) -> list[int]:
    """Per row, the tokens to draft when asked for ``n``: ``n``, or fewer within ``ctx.budget``."""
    return [n] * len(ctx.rows) if ctx.budget is None else [min(n, b) for b in ctx.budget]


def _capped(proposal: Proposal, most: int) -> Proposal:
    """The first ``most`` tokens of ``proposal``: a prefix of a draft is verified exactly as the
    draft would have been, token by token."""
    if len(proposal.tokens) <= most:
        return proposal
    return Proposal(proposal.tokens[:most], None if proposal.probs is None else proposal.probs[:most])


class TreeDrafter(Protocol):
    """A level 0 that can draft a tree: a model (a :class:`TreeShape`) or block-draft heads (p paths)."""

    stats: LevelStats

    def propose_tree(self, ctx: DraftContext, width: Any) -> DraftTree:
        """Draft a tree after ``ctx.tokens``; ``width`` is the level's width (a shape, or the depth)."""


class Drafter(Protocol):
    """A level below the target."""

    stats: LevelStats

    def prefill(self, prompts: list[list[int]]) -> None:
        """Start a new sequence from each of ``prompts`` (one row each)."""

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """Per row, up to ``n`` tokens after ``ctx.rows[i]`` (model levels give exactly n, or the
        row's ``ctx.budget`` where that is less), None for a row not active."""


class StandaloneDrafter(Drafter, Protocol):
    """A level 0 without a model of its own (the n-gram lookup, block-draft heads): it joins a
    chain as it is. Its messages say where it cannot stand; ``reads_host``: the model directly
    above keeps its hidden rows for it and hands them over with :meth:`attach`."""

    reads_host: bool
    tree_refusal: str  # why its width cannot be a tree shape
    placement: str  # why it can be only the lowest level
    rows_refusal: str | None  # why it decodes one prompt at a time (None: it drafts for any number of rows)

    def attach(self, host: CachedModel) -> None:
        """Read ``host``'s hidden rows (only where ``reads_host``)."""


def standalone(member: object) -> TypeGuard[StandaloneDrafter]:
    """Whether a chain member drafts by itself (a :class:`StandaloneDrafter`), not a model to wrap."""
    return callable(getattr(member, "propose", None))


class Steering(Protocol):
    """What a model steered by the verifier above it carries (``model.steerer``): the verifier
    layers whose inputs it reads, and how its level is wrapped to read them."""

    taps: tuple[int, ...]

    def wrap(self, level: ModelDrafter | VerifierLevel) -> SteeredLevel:
        """``level`` steered: its vectors set before each of its proposals."""


class SteeredLevel(Drafter, Protocol):
    """A steered level: it reads the taps of the verifier above it (:meth:`attach`)."""

    def attach(self, verifier: CachedModel) -> None:
        """Read the steering off ``verifier``'s passes (it keeps the taps)."""


def _choose(logits: torch.Tensor, ctx: DraftContext, row: int) -> tuple[int, torch.Tensor | None]:
    """Pick row ``row``'s token from logits ``[1, V]``; return it and its distribution ``[1, V]`` when sampling."""
    if ctx.sampling.greedy:
        return int(logits[0].argmax()), None
    probs = warp(logits, ctx.sampling)
    return draw(probs[0], ctx.generators[row]), probs


class ModelDrafter:
    """Level 0 backed by a model: drafts ``n`` tokens, one forward pass each, or a tree, one
    batched pass over the frontier per depth.

    ``p_min`` > 0 ends a row's draft before the first token whose probability among the model's
    ten likeliest is below it (:mod:`.confidence`): the row then proposes fewer tokens, or none;
    a draft that ended shorter than ``n_min`` tokens is dropped (the row proposes none).
    """

    def __init__(self, cached: CachedModel, p_min: float = 0.0, n_min: int = 0) -> None:
        self.cached = cached
        self.stats = cached.stats
        self.p_min = p_min
        self.n_min = n_min

    def prefill(self, prompts: list[list[int]]) -> None:
        self.cached.prefill_rows(prompts)

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """``n`` tokens for every active row (fewer where ``ctx.budget`` says the generation keeps
        fewer), one pass over the rows still drafting per token."""
        most = _limits(ctx, n)
        seqs = [list(t) if a else None for t, a in zip(ctx.rows, ctx.active)]
        probs: list[list[torch.Tensor]] = [[] for _ in seqs]
        for step in range(max((k for k, a in zip(most, ctx.active) if a), default=0)):
            going = [None if s is None or step >= k else s for s, k in zip(seqs, most)]
            if not any(s is not None for s in going):
                break  # every row ended its draft on its confidence
            rows = self.cached.logits_rows(going, [len(s) - 1 if s is not None else 0 for s in going])
            t0 = time.perf_counter()
            for i, (seq, logits) in enumerate(zip(seqs, rows)):
                if seq is None or logits is None:
                    continue
                if self.p_min > 0.0 and float(top_share(logits[0])) < self.p_min:
                    most[i] = step  # unsure here: the row's draft ends before this token
                    continue
                token, p = _choose(logits, ctx, i)
                seq.append(token)
                if p is not None:
                    probs[i].append(p)
            self.stats.draft_s += time.perf_counter() - t0
        out = [
            None if seq is None else Proposal(seq[len(ctx.rows[i]) :], torch.cat(probs[i]) if probs[i] else None)
            for i, seq in enumerate(seqs)
        ]
        return [Proposal([]) if p is not None and len(p.tokens) < self.n_min else p for p in out]  # too short: dropped

    def propose_tree(self, ctx: DraftContext, shape: TreeShape) -> DraftTree:
        """Draft a tree of ``shape`` after ``ctx.tokens``: at every node the top-b children (greedy)
        or b children drawn without replacement from q (sampling), in order."""
        tree = DraftTree()
        rows = self.cached.logits(ctx.tokens, len(ctx.tokens) - 1)  # [1, V]: after the context
        for depth, b in enumerate(shape.branching, start=1):
            parents = self._frontier(tree, depth)
            if depth > 1:
                rows = self.cached.tree_logits(ctx.tokens, tree)  # [1 + N, V]; row 1 + i after node i
            t0 = time.perf_counter()
            for parent in parents:
                logits = rows[parent + 1]  # [V]
                if ctx.sampling.greedy:
                    children = torch.topk(logits, b).indices.tolist()
                else:
                    q = warp(logits[None], ctx.sampling)[0]
                    tree.probs[parent] = q
                    children = draw_without_replacement(q, b, ctx.generator)
                for x in children:
                    tree.add(x, parent)
            self.stats.draft_s += time.perf_counter() - t0
        return tree

    @staticmethod
    def _frontier(tree: DraftTree, depth: int) -> list[int]:
        """The nodes whose children are drafted at ``depth`` (the root, -1, at depth 1)."""
        return [-1] if depth == 1 else tree.at_depth(depth - 1)


class VerifierLevel:
    """A model that verifies batches from the level below in one forward pass each (one pass
    verifies the batch of every active row).

    Args:
        cached: this level's model and cache.
        lower: the level below, or None for a target decoding on its own (K = 0).
        width: how many tokens to ask of ``lower`` per round (T of the level below), or the
            shape of the tree a :class:`ModelDrafter` below drafts each round.
        lenient: verify with the sampling config's lenience (the target only: the levels below
            keep the exact rule, so the lossy step happens once, where tokens are committed).

    ``kept``, when a list, collects per row this level's logits rows of the tokens each round
    returns (``[n + 1, V]`` per round, in order): row i predicts the round's i-th token from the text
    before it, as a pass over the whole text would, computed by the passes the rounds ran anyway.
    """

    def __init__(self, cached: CachedModel, lower: Drafter | None, width: Width, lenient: bool = False) -> None:
        self.cached = cached
        self.stats = cached.stats
        self.lower = lower
        self.width = width
        self.lenient = lenient
        self.kept: list[list[torch.Tensor]] | None = None

    def prefill(self, prompts: list[list[int]]) -> None:
        self.cached.prefill_rows(prompts)
        if self.lower is not None:
            self.lower.prefill(prompts)

    def round(self, ctx: DraftContext) -> list[Proposal | None]:
        """One round for every active row: draft a batch below, verify it, return the accepted
        tokens plus one (None for a row not active).

        The returned tokens follow this level's own distribution exactly; ``probs`` holds this
        level's distributions ``p`` for them (sampling mode).
        """
        lenience = ctx.sampling.lenience if self.lenient else 1.0
        drafts: list[Proposal | None]
        if isinstance(self.width, TreeShape) or getattr(self.lower, "drafts_tree", False):
            if lenience != 1.0:
                raise ChainError(f"lenience {lenience} verifies chains only; draft a chain below the target, not a tree ({self.width})")
            tree = cast(TreeDrafter, self.lower).propose_tree(ctx, self.width)
            if len(tree):
                return [self._tree_round(ctx, tree)]
            drafts = [Proposal([])]  # nothing drafted (a block drafter without a hidden row): one plain pass
        elif self.lower is not None:
            drafts = self.lower.propose(ctx, cast(int, self.width))
            if ctx.budget is not None:  # no pass verifies tokens the generation cannot keep
                drafts = [d if d is None else _capped(d, b) for d, b in zip(drafts, ctx.budget)]
        else:
            drafts = [Proposal([]) if a else None for a in ctx.active]
        seqs = [None if d is None else ctx.rows[i] + d.tokens for i, d in enumerate(drafts)]
        rows = self.cached.logits_rows(seqs, [len(t) - 1 for t in ctx.rows])  # row i: [len(draft) + 1, V]
        t0 = time.perf_counter()
        out: list[Proposal | None] = []
        for i, (draft, logits) in enumerate(zip(drafts, rows)):
            if draft is None or logits is None:
                out.append(None)
                continue
            if ctx.sampling.greedy:
                n, token = verify_greedy(draft.tokens, logits.argmax(-1).tolist())
                probs = None
            else:
                p = warp(logits, ctx.sampling)
                n, token = verify_sample(draft.tokens, draft.probs, p, ctx.generators[i], lenience)
                probs = self.emitted_probs(p, draft, n)
            if self.kept is not None:  # a copy: a view would hold the rejected rows of the pass too
                self.kept[i].append(logits[: n + 1].clone())
            if self.lower is not None:
                self.lower.stats.proposed += len(draft.tokens)
                self.lower.stats.accepted += n
            out.append(Proposal(draft.tokens[:n] + [token], probs))
        self.stats.verify_s += time.perf_counter() - t0
        return out

    def _tree_round(self, ctx: DraftContext, tree: DraftTree) -> Proposal:
        """One round over a tree from below: one pass over all its nodes, then RRS (or greedy) from
        the root; the accepted path plus one token, with this level's p for each."""
        assert self.lower is not None
        logits = self.cached.tree_logits(ctx.tokens, tree)  # [1 + N, V]
        t0 = time.perf_counter()
        if ctx.sampling.greedy:
            path, token = verify_tree_greedy(tree, logits.argmax(-1).tolist())
            p = None
        else:
            p = warp(logits, ctx.sampling)
            path, token = verify_tree_sample(tree, p, ctx.generator)
        emitted = [0] + [1 + i for i in path]  # the rows that predict each emitted token
        probs = None if p is None else p[emitted]  # p for each emitted token
        self.stats.verify_s += time.perf_counter() - t0
        if self.kept is not None:
            self.kept[0].append(logits[emitted])
        self.stats.nodes_verified += len(tree)
        self.lower.stats.proposed += len(tree)
        self.lower.stats.accepted += len(path)
        self.lower.stats.trees += 1
        return Proposal([tree.tokens[i] for i in path] + [token], probs)

    @staticmethod
    def emitted_probs(p: torch.Tensor, draft: Proposal, n: int) -> torch.Tensor:
        """The distributions passed upward for the ``n + 1`` emitted tokens: this level's own p.

        Never the drafter's q and never the residual: the tokens a level emits follow p, so p is
        what the level above must divide by.
        """
        return p[: n + 1]

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """Run rounds until every active row holds ``n`` tokens (fewer where ``ctx.budget`` says the
        generation keeps fewer); exactly that many each.

        A row that holds its ``n`` waits (padding) while the others go on: when it stops depends
        on its own past only, so dropping its overshoot keeps it exact.
        """
        most = _limits(ctx, n)
        held: list[list[int]] = [[] for _ in ctx.rows]
        probs: list[list[torch.Tensor]] = [[] for _ in ctx.rows]
        while True:
            need = [a and len(h) < k for a, h, k in zip(ctx.active, held, most)]
            if not any(need):
                break
            for i, got in enumerate(self.round(ctx.ahead(held, need))):
                if got is not None:
                    held[i] += got.tokens
                    if got.probs is not None:
                        probs[i].append(got.probs)
        return [
            Proposal(held[i][: most[i]], torch.cat(probs[i])[: most[i]] if probs[i] else None) if a else None
            for i, a in enumerate(ctx.active)
        ]
