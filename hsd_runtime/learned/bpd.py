"""The block-draft drafter (``bpd:DIR``): a block of tokens from the heads of the level above.

Blockwise parallel decoding (Stern et al. 2018) drafts a whole block from one pass of the model
itself: head i reads the model's final hidden state h_j after position j and predicts the token
i steps on. Here the model is the level directly above (the *host*, which keeps the hidden rows
of its passes, :meth:`~hsd_runtime.decoding.cache.CachedModel.hidden_at`), so drafting costs the heads'
blocks and one output-layer pass over their rows, never a pass of a model of its own. After a
verification that accepted n tokens and added one, the newest row along the context is the one
that predicted the added token, so heads 2..H draft the next H - 1 tokens; right after a prefill
the row after the prompt itself is there, and heads 1..H draft H.

How a block is chosen (Kim et al. 2024): each head's top-k tokens form an H x k lattice; the
argmax of each head is the plain draft (greedy mode), and under sampling each head's token is
drawn from its own warped distribution, which is the q verification divides by. With
``rescore=ngram`` every path is scored by its heads' log-probabilities plus ``alpha`` times an
n-gram model of the context (:mod:`.lattice`; with ``corpus=FILE`` also of that text, tokenized
by the chain's tokenizer), and the best path is the draft; with ``p`` > 1 the
p best paths are verified together as one tree (their common prefixes merged). With
``rescore=MODEL`` a small language model of the same tokenizer rescores the lattice left to right
(Kim et al.'s local neural rescoring): at each head, its top-k scores plus ``alpha`` times the small
model's log-probabilities after the tokens chosen so far, the best taken (one small-model pass per
token, on its own rolling cache). A rescored or
p-best draft is a deterministic function of the past, so its q is one-hot: verification stays
exact (recursive rejection sampling over distinct deterministic siblings, :mod:`hsd_runtime.decoding.rrs`).
``vocab=N`` trims the output layer the heads read to N tokens (:mod:`hsd_runtime.models.trim`): for a large
vocabulary it is most of a draft's cost, and what the heads propose is never the host's output.
Heads trained through a trimmed layer (``hsd-plan heads train --vocab N``, on their card) draft
through the same one unless ``vocab=`` says otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..decoding.cache import CachedModel
from ..decoding.drafters import DraftContext, Proposal
from ..decoding.results import LevelStats
from ..decoding.sampling import SamplingConfig, draw, warp
from ..models.files import read_input
from ..models.loading import LoadedModel, ModelLoader, check_same_tokenizer
from ..models.output import apply_output_layer
from ..models.views import trimmed_by_id
from ..terms.errors import ChainError, ModelSpecError
from ..terms.limits import MAX_CORPUS_BYTES
from ..terms.spec import RESCORERS, ModelSpec, parse_spec, same_model
from ..terms.tree import DraftTree
from .heads import BlockHeads, HeadsCard, load_heads
from .lattice import NgramModel, k_best_paths

__all__ = ["RESCORE_ORDER", "BpdDrafter", "check_host", "load_bpd"]

RESCORE_ORDER = 2  # the n-gram model's order: a bigram lattice search is exact and fast (O(H k^2))


class BpdDrafter:
    """Level 0 drafting blocks from the heads of the level above (its host).

    Args:
        heads: the trained blocks of heads 2..H.
        card: their card (the host they were trained on, H).
        spec: the ``bpd:DIR`` spec (k, p, rescore, alpha).
        device: where the heads run (the host's device).
        rescorer: the small causal LM of ``rescore=MODEL`` (None otherwise).
        corpus: the token ids of ``corpus=FILE``, whose n-grams ``rescore=ngram`` counts beside
            the context's (empty: the context alone).
    """

    reads_host = True  # the host keeps its hidden rows for the heads
    tree_refusal = "a bpd drafter's width is its block length; its tree comes from p= paths"
    placement = "bpd can only be the lowest level of a chain, directly below the model whose heads it holds"
    rows_refusal: str | None = "block-draft heads read their host's hidden rows of one prompt"

    def __init__(
        self,
        heads: BlockHeads,
        card: HeadsCard,
        spec: ModelSpec,
        device: torch.device | str = "cpu",
        rescorer: Any = None,
        corpus: Sequence[int] = (),
    ) -> None:
        self.heads = heads.to(device)
        self.card = card
        self.spec = spec
        self.k = int(spec.bpd_option("k"))
        self.paths = int(spec.bpd_option("p"))
        self.rescore = spec.bpd_option("rescore")
        self.alpha = float(spec.bpd_option("alpha"))
        self.stats = LevelStats(model=str(spec))
        self.host: CachedModel | None = None
        self.model: Any = None  # the host's model and logits width, whose output layer the heads share
        self.width = 0
        self._lm: NgramModel | None = None
        self._rescorer = rescorer
        self._corpus = corpus
        self._neural: CachedModel | None = None  # the rescorer's cache, made when bound

    @classmethod
    def load(cls, spec: ModelSpec, device: torch.device | str = "cpu", rescorer: Any = None, corpus: Sequence[int] = ()) -> BpdDrafter:
        """The drafter of a ``bpd:DIR`` spec (its host is attached by the hierarchy); ``rescorer``
        is the model of ``rescore=MODEL`` and ``corpus`` the tokens of ``corpus=FILE``, both
        read by the caller."""
        heads, card = load_heads(Path(spec.heads_dir).expanduser(), device)
        return cls(heads, card, spec, device, rescorer, corpus)

    @property
    def neural(self) -> str | None:
        """The model spec of ``rescore=MODEL`` (None for none and ngram)."""
        return None if self.rescore in RESCORERS else self.rescore

    def reads(self, host: ModelSpec) -> bool:
        """Whether ``host`` is the model the heads were trained on: the same model and depth (its
        dtype, quantization or head may differ)."""
        return same_model(parse_spec(self.card.host), host)

    @property
    def drafts_tree(self) -> bool:
        """Whether its host verifies a tree (p > 1 paths) rather than one block."""
        return self.paths > 1

    @property
    def block(self) -> int:
        """The most tokens one proposal holds: H (right after a prefill; H - 1 after a verification)."""
        return self.card.heads

    def attach(self, host: CachedModel) -> None:
        """Read the heads off ``host``'s hidden rows (it must keep them)."""
        if not host.keep_hidden or host.layers:
            raise ChainError(f"{self.stats.model}: its host does not keep its hidden states")
        model: Any = host.model
        size = int(model.config.hidden_size)
        if size != self.card.hidden_size:
            raise ChainError(
                f"{self.stats.model}: heads for a hidden size of {self.card.hidden_size} (trained on {self.card.host}) "
                f"cannot read a host of hidden size {size}"
            )
        self.host = host
        self.bind(host.model, host.width)

    def bind(self, model: Any, width: int) -> None:
        """Use ``model``'s output layer (sliced to ``width``) without a cache: for timing and
        profiling, which hand the hidden rows in themselves (:meth:`head_logits`, :meth:`drafts`)."""
        self.model, self.width = model, width
        vocab = int(self.spec.bpd_option("vocab")) or self.card.vocab  # heads trained through a trimmed layer draft through it
        if vocab:  # the heads score N tokens only (end-of-sequence first): proposals, so exactness is untouched
            self.model = trimmed_by_id(model, vocab)
        if self._rescorer is not None:
            self._neural = CachedModel(self._rescorer, width, LevelStats(model=f"{self.stats.model} rescorer"))
        if self.rescore == "ngram":  # the corpus is counted once; each sequence replaces the last one's counts
            self._lm = NgramModel(RESCORE_ORDER, width)
            if self._corpus:
                self._lm.add_corpus([t for t in self._corpus if t < width])

    def prefill(self, prompts: list[list[int]]) -> None:
        """A new sequence (one row): the n-gram model forgets the last sequence's context (not the corpus)."""
        if self._lm is not None:
            self._lm.update([])

    @torch.inference_mode()
    def head_logits(self, hidden: torch.Tensor, first: int) -> torch.Tensor:
        """Logits ``[H - first + 1, V]`` (fp32) of heads first..H at the hidden state ``hidden`` ``[1, d]``."""
        states = self.heads(hidden.float())[0, max(0, first - 2) :]  # [H - max(first, 2) + 1, d]: heads max(first, 2)..H
        if first == 1:
            states = torch.cat([hidden.float(), states])  # head 1 reads h itself
        return apply_output_layer(self.model, states, self.width).float()

    def _logits(self, tokens: list[int]) -> torch.Tensor | None:
        """The heads' logits ``[m, V]`` for the m <= H tokens after ``tokens``, or None when the
        host holds no hidden row along them (or only one too far back to reach)."""
        assert self.host is not None, "a bpd drafter runs under a host"
        found = self.host.hidden_at(tokens)
        if found is None:
            return None
        hidden, j = found  # [1, d] after tokens[: j + 1]
        first = len(tokens) - j  # the head that predicts the token after `tokens` (1: the host's own)
        if first > self.card.heads:
            return None
        self.stats.forward_passes += 1
        return self.head_logits(hidden, first)

    def drafts(self, logits: torch.Tensor, tokens: list[int], sampling: SamplingConfig) -> list[list[int]]:
        """Up to ``self.paths`` drafts from the heads' logits ``[m, V]`` after ``tokens``: each
        head's argmax (no rescoring, one path), else the best paths of the rescored lattice."""
        if self.rescore == "none" and self.paths == 1:
            return [logits.argmax(-1).tolist()]
        if self._neural is not None:
            return [self._left_to_right(logits, tokens, sampling)]
        scores, ids = _log_probs(logits, sampling).topk(min(self.k, logits.shape[-1]), dim=-1)  # [m, k] each
        lm = None
        if self._lm is not None:
            self._lm.update(tokens)
            lm = self._lm
        found = k_best_paths(ids, scores.double(), self.paths, lm=lm, history=tokens, alpha=self.alpha if lm else 0.0)
        return [path.tokens for path in found]

    def _left_to_right(self, logits: torch.Tensor, tokens: list[int], sampling: SamplingConfig) -> list[int]:
        """One path through the top-k lattice of ``logits`` ``[m, V]``, chosen head by head with the
        small model's log-probabilities after the tokens chosen so far."""
        assert self._neural is not None
        seq, out = list(tokens), []
        for logp in _log_probs(logits, sampling):  # [V] per head
            scores, ids = logp.topk(min(self.k, logp.shape[-1]))  # [k] each
            r = torch.log_softmax(self._neural.logits(seq, len(seq) - 1)[0].float(), -1)  # [V]: the small model after seq
            x = int(ids[int((scores + self.alpha * r[ids]).argmax())])
            out.append(x)
            seq.append(x)
        return out

    def _account(self, t0: float) -> None:
        elapsed = time.perf_counter() - t0
        self.stats.time_s += elapsed
        self.stats.forward_s += elapsed  # the heads are this level's pass

    def _sampled(self, sampling: SamplingConfig) -> bool:
        """Whether each head's token is drawn from its own q (sampling, no rescoring, one path)."""
        return not sampling.greedy and self.rescore == "none" and self.paths == 1

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """Up to ``n`` tokens for the one row (none when the host holds no hidden row along the context)."""
        t0 = time.perf_counter()
        logits = self._logits(ctx.tokens)
        if logits is None:
            proposal = Proposal([])
        elif self._sampled(ctx.sampling):
            q = warp(logits[:n], ctx.sampling)  # [m, V]: each head's own distribution, drawn from in turn
            proposal = Proposal([draw(row, ctx.generator) for row in q], q)
        else:  # deterministic: q is one-hot on each token
            proposal = Proposal(self.drafts(logits[:n], ctx.tokens, ctx.sampling)[0])
        self._account(t0)
        return [proposal]

    def propose_tree(self, ctx: DraftContext, n: int) -> DraftTree:
        """The ``p`` best paths of at most ``n`` tokens merged into one tree (deterministic siblings)."""
        t0 = time.perf_counter()
        logits = self._logits(ctx.tokens)
        drafts = [] if logits is None else self.drafts(logits[:n], ctx.tokens, ctx.sampling)
        self._account(t0)
        tree = DraftTree()
        for draft in drafts:
            parent = -1
            for token in draft:
                child = next((c for c in tree.children(parent) if tree.tokens[c] == token), None)
                parent = tree.add(token, parent) if child is None else child
        return _breadth_first(tree)


def _log_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The scores ``[..., V]`` a lattice is searched on: log-probabilities, warped when sampling
    (top-k/p zeros become -1e9: the lattice search takes finite scores only)."""
    return torch.log_softmax(logits, -1) if sampling.greedy else torch.log(warp(logits, sampling)).clamp_min(-1e9)


def _breadth_first(tree: DraftTree) -> DraftTree:
    """``tree`` with its nodes renumbered in breadth-first order (children in insertion order)."""
    out = DraftTree()
    index = {-1: -1}
    frontier = [-1]
    while frontier:
        nxt = []
        for node in frontier:
            for child in tree.children(node):
                index[child] = out.add(tree.tokens[child], index[node])
                nxt.append(child)
        frontier = nxt
    return out


def check_host(drafter: BpdDrafter, spec: ModelSpec, host: ModelSpec | None) -> None:
    """Refuse, with one line, a ``bpd:`` spec whose next member is not the model its heads were
    trained on (the same model and depth; its dtype, quantization and head may differ)."""
    trained = parse_spec(drafter.card.host)
    if host is None or not host.is_model:
        raise ChainError(f"{spec} must be directly below its host {trained} in the chain (a model, not {host or 'nothing'})")
    if not drafter.reads(host):
        raise ChainError(f"{spec} holds heads for {trained}, not for {host}: put it directly below {trained}, or train heads for {host}")


def load_bpd(spec: ModelSpec, loader: ModelLoader, models: list[LoadedModel]) -> BpdDrafter:
    """The drafter of ``spec`` with, for ``rescore=MODEL``, that small model loaded and checked to
    share the tokenizer of ``models`` (the chain's)."""
    rescore = spec.bpd_option("rescore")
    rescorer = None
    if rescore not in RESCORERS:
        small = loader.load(rescore)
        check_same_tokenizer([*models, small])
        rescorer = small.model
    corpus: list[int] = []
    if spec.bpd_option("corpus"):
        text = read_input(Path(spec.bpd_option("corpus")).expanduser(), "bpd n-gram corpus", MAX_CORPUS_BYTES)
        try:
            corpus = list(models[-1].tokenizer.encode(text.decode("utf-8"), add_special_tokens=False))  # type: ignore[attr-defined]
        except UnicodeDecodeError:
            raise ModelSpecError(f"{spec}: the corpus file is not UTF-8 text") from None
    return BpdDrafter.load(spec, loader.device, rescorer, corpus)
