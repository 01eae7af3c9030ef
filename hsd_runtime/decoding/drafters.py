"""The ``Drafter`` protocol and the model-backed levels of a hierarchy.

Every level below the target is a drafter: asked for ``n`` tokens after a context, it returns
them with its **own** distributions for those tokens. A model at level 0 drafts autoregressively;
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
from .results import LevelStats
from .rrs import draw_without_replacement, verify_tree_greedy, verify_tree_sample
from .sampling import SamplingConfig, draw, warp
from .verify import verify_greedy, verify_sample

__all__ = ["DraftContext", "Drafter", "ModelDrafter", "Proposal", "TreeDrafter", "VerifierLevel"]


@dataclass(frozen=True)
class DraftContext:
    """What a drafter is asked to continue, and how it must choose tokens."""

    tokens: list[int]  # prompt + committed tokens + tokens pending at the levels above
    sampling: SamplingConfig
    generator: torch.Generator


@dataclass
class Proposal:
    """Drafted tokens and the proposer's distributions for them.

    ``probs`` is ``[len(tokens), V]``; it is None in greedy mode, and for a deterministic drafter,
    whose distribution is one-hot on each token it proposes.
    """

    tokens: list[int]
    probs: torch.Tensor | None = None


class TreeDrafter(Protocol):
    """A level 0 that can draft a tree: a model (a :class:`TreeShape`) or block-draft heads (p paths)."""

    stats: LevelStats

    def propose_tree(self, ctx: DraftContext, width: Any) -> DraftTree:
        """Draft a tree after ``ctx.tokens``; ``width`` is the level's width (a shape, or the depth)."""


class Drafter(Protocol):
    """A level below the target."""

    stats: LevelStats

    def prefill(self, prompt: list[int]) -> None:
        """Start a new sequence from ``prompt``."""

    def propose(self, ctx: DraftContext, n: int) -> Proposal:
        """Propose up to ``n`` tokens after ``ctx.tokens`` (model levels always give exactly n)."""


class StandaloneDrafter(Drafter, Protocol):
    """A level 0 without a model of its own (the n-gram lookup, block-draft heads): it joins a
    chain as it is. Its messages say where it cannot stand; ``reads_host``: the model directly
    above keeps its hidden rows for it and hands them over with :meth:`attach`."""

    reads_host: bool
    tree_refusal: str  # why its width cannot be a tree shape
    placement: str  # why it can be only the lowest level

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


def _choose(logits: torch.Tensor, ctx: DraftContext) -> tuple[int, torch.Tensor | None]:
    """Pick one token from logits ``[1, V]``; return it and its distribution ``[1, V]`` when sampling."""
    if ctx.sampling.greedy:
        return int(logits[0].argmax()), None
    probs = warp(logits, ctx.sampling)
    return draw(probs[0], ctx.generator), probs


class ModelDrafter:
    """Level 0 backed by a model: drafts ``n`` tokens, one forward pass each, or a tree, one
    batched pass over the frontier per depth."""

    def __init__(self, cached: CachedModel) -> None:
        self.cached = cached
        self.stats = cached.stats

    def prefill(self, prompt: list[int]) -> None:
        self.cached.prefill(prompt)

    def propose(self, ctx: DraftContext, n: int) -> Proposal:
        seq = list(ctx.tokens)
        probs: list[torch.Tensor] = []
        for _ in range(n):
            logits = self.cached.logits(seq, len(seq) - 1)
            t0 = time.perf_counter()
            token, p = _choose(logits, ctx)
            self.stats.draft_s += time.perf_counter() - t0
            seq.append(token)
            if p is not None:
                probs.append(p)
        return Proposal(seq[len(ctx.tokens) :], torch.cat(probs) if probs else None)

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
    """A model that verifies batches from the level below in one forward pass each.

    Args:
        cached: this level's model and cache.
        lower: the level below, or None for a target decoding on its own (K = 0).
        width: how many tokens to ask of ``lower`` per round (T of the level below), or the
            shape of the tree a :class:`ModelDrafter` below drafts each round.
        lenient: verify with the sampling config's lenience (the target only: the levels below
            keep the exact rule, so the lossy step happens once, where tokens are committed).

    ``kept``, when a list, collects this level's logits rows of the tokens each round returns
    (``[n + 1, V]`` per round, in order): row i predicts the round's i-th token from the text
    before it, as a pass over the whole text would, computed by the passes the rounds ran anyway.
    """

    def __init__(self, cached: CachedModel, lower: Drafter | None, width: Width, lenient: bool = False) -> None:
        self.cached = cached
        self.stats = cached.stats
        self.lower = lower
        self.width = width
        self.lenient = lenient
        self.kept: list[torch.Tensor] | None = None

    def prefill(self, prompt: list[int]) -> None:
        self.cached.prefill(prompt)
        if self.lower is not None:
            self.lower.prefill(prompt)

    def round(self, ctx: DraftContext) -> Proposal:
        """One round: draft a batch below, verify it, return the accepted tokens plus one.

        The returned tokens follow this level's own distribution exactly; ``probs`` holds this
        level's distributions ``p`` for them (sampling mode).
        """
        lenience = ctx.sampling.lenience if self.lenient else 1.0
        if isinstance(self.width, TreeShape) or getattr(self.lower, "drafts_tree", False):
            if lenience != 1.0:
                raise ChainError(f"lenience {lenience} verifies chains only; draft a chain below the target, not a tree ({self.width})")
            tree = cast(TreeDrafter, self.lower).propose_tree(ctx, self.width)
            if len(tree):
                return self._tree_round(ctx, tree)
            draft = Proposal([])  # nothing drafted (a block drafter without a hidden row): one plain pass
        else:
            draft = self.lower.propose(ctx, self.width) if self.lower is not None else Proposal([])
        logits = self.cached.logits(ctx.tokens + draft.tokens, len(ctx.tokens) - 1)  # [b + 1, V]
        t0 = time.perf_counter()
        if ctx.sampling.greedy:
            n, token = verify_greedy(draft.tokens, logits.argmax(-1).tolist())
            probs = None
        else:
            p = warp(logits, ctx.sampling)
            n, token = verify_sample(draft.tokens, draft.probs, p, ctx.generator, lenience)
            probs = self.emitted_probs(p, draft, n)
        self.stats.verify_s += time.perf_counter() - t0
        if self.kept is not None:  # a copy: a view would hold the rejected rows of the pass too
            self.kept.append(logits[: n + 1].clone())
        if self.lower is not None:
            self.lower.stats.proposed += len(draft.tokens)
            self.lower.stats.accepted += n
        return Proposal(draft.tokens[:n] + [token], probs)

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
            self.kept.append(logits[emitted])
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

    def propose(self, ctx: DraftContext, n: int) -> Proposal:
        """Run rounds until ``n`` tokens are held and return exactly ``n``.

        Dropping the overshoot keeps the output exact: when to stop depends only on the past.
        """
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        while len(tokens) < n:
            got = self.round(replace(ctx, tokens=ctx.tokens + tokens))
            tokens += got.tokens
            if got.probs is not None:
                probs.append(got.probs)
        return Proposal(tokens[:n], torch.cat(probs)[:n] if probs else None)
