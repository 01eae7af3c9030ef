"""A harness that checks a sampler against the exact law of the target's first tokens.

Speculative decoding is exact when the tokens it emits follow the target's own (warped)
distribution. On a vocabulary of a few tokens that law is computable: the joint probability of
every sequence of the first ``L`` new tokens is a product of the target's warped next-token
distributions, read by enumeration (one batched pass per position). Many seeded runs of a
hierarchy give observed counts over the same ``V ** L`` cells; a G-test (log-likelihood ratio)
with rare cells pooled compares the two. A run of ``L = 4`` tokens with widths 1 to 3 crosses
several verification rounds at every level, so rejections, rollbacks and the rounds after them
are all on the path.

Pooling keeps structure: a cell whose expected count is below ``MIN_EXPECTED`` joins the other
rare cells of its prefix of length ``L - 1``; a prefix group still too small moves on to the prefix
of length ``L - 2``, and so on, so a deviation in the early tokens stays visible when the later
joint is sparse. An outcome the target can never produce (mass 0, e.g. outside top-k) observed
even once gives a p-value of 0.

Any drafter can be checked with :func:`law_pvalue`: build a hierarchy that ends in the target,
and compare. The models are from :func:`law_model`: random tiny Llamas whose output head is
scaled so the warped distributions are neither flat nor one-hot.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import chi2

from hsd_runtime import Hierarchy, SamplingConfig, warp
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.drafters import DraftContext, Proposal, VerifierLevel
from hsd_runtime.decoding.verify import residual as right_residual
from hsd_runtime.decoding.verify import verify_sample
from tests.tiny import tiny_llama

V = 6  # vocabulary of the law models
L = 4  # tokens whose joint law is tested
RUNS = 1000  # seeded runs per check
MIN_EXPECTED = 5.0  # a cell with fewer expected runs is pooled
ALPHA = 1e-3  # the verdict: a correct rule gives p > ALPHA, a wrong one p < ALPHA (seeds fixed)
HEAD_SCALE = 10.0  # the head's scale at temperature 1; scaled with the temperature's square root (below)
# a prompt whose tokens recur, so the n-gram drafter finds matches and proposes at every round
PROMPT = [0, 3, 4, 5, 3, 4]


def law_model(seed: int, layers: int = 1, temperature: float = 1.0, sharpness: float = 1.0, vocab: int = V) -> torch.nn.Module:
    """A random tiny Llama (hidden 16) for law tests.

    Its head is scaled by ``HEAD_SCALE * sqrt(temperature)``: warped at that temperature, its
    logits are those of temperature 1 divided by ``sqrt(temperature)``, so temperature 0.5 is
    sharper and 2 flatter, but by a factor of 1.4, not 2, and neither goes flat or one-hot (a
    scale of exactly ``temperature`` would make every temperature replay the same floats). Attention is made sharp and strong (queries and keys x40, values and
    outputs x3): random initial weights attend almost uniformly and barely read the context, so a
    cache that kept a rejected token, or a wrong position, would hardly move the law; with these,
    a stale token changes the next logits by more than 1. ``sharpness`` > 1 makes a confident
    drafter (one that often draws the same token twice when drawing with replacement).
    """
    model = tiny_llama(seed, layers=layers, vocab=vocab, hidden=16, head_scale=HEAD_SCALE * temperature**0.5 * sharpness)
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            for proj, scale in ((attn.q_proj, 40.0), (attn.k_proj, 40.0), (attn.v_proj, 3.0), (attn.o_proj, 3.0)):
                proj.weight.mul_(scale)
    return model


@torch.inference_mode()
def exact_joint(target: Any, prompt: Sequence[int], sampling: SamplingConfig, length: int = L) -> np.ndarray:
    """P(x_1..x_L | prompt) under ``target`` warped by ``sampling``, ``[V ** L]`` float64.

    Cell ``sum_i x_i * V ** (L - 1 - i)`` (row-major over the L tokens). One batched pass per
    position over all V ** d prefixes of length d, with no cache (the runtime's cached passes must
    agree with these uncached ones).
    """
    vocab = 1  # known after the first pass
    joint = np.ones(1)
    for d in range(length):
        prefixes = list(itertools.product(range(vocab), repeat=d))
        logits = _last_logits(target, [list(prompt) + list(x) for x in prefixes])  # [V ** d, V]
        vocab = logits.shape[-1]
        p = warp(logits, sampling).double().cpu().numpy()  # [V ** d, V]
        joint = (joint[:, None] * p).ravel()  # [V ** (d + 1)], row-major
    return joint


def _last_logits(target: Any, rows: list[list[int]]) -> torch.Tensor:
    """The logits after each row of tokens ``[len(rows), V]``, float32, from uncached passes: one
    batched pass of a torch model, or a fresh cache per row of a model of another engine."""
    if isinstance(target, torch.nn.Module):
        ids = torch.tensor(rows, device=next(target.parameters()).device)  # [rows, len]
        return target(input_ids=ids).logits[:, -1].float()
    out = []
    for row in rows:
        engine = target.open_cache(target.n_vocab)
        out.append(engine.feed(row, 0, 1))
    return torch.cat(out).float()


@torch.inference_mode()
def lenient_joint(
    target: torch.nn.Module, drafter: torch.nn.Module, width: int, prompt: Sequence[int], sampling: SamplingConfig, length: int = L
) -> np.ndarray:
    """P(x_1..x_L | prompt) of the chain ``drafter -> target`` (``width`` drafted tokens per round)
    whose target verifies with lenience e = ``sampling.lenience``, ``[V ** L]`` float64.

    The law of a lenient chain depends on where rounds begin, so it is carried per prefix as a
    distribution over the round's state j (drafted tokens accepted so far this round). At j < T a
    drafted y is accepted with mass min(q(y), p(y)/e) (state j + 1), or rejected and replaced
    with mass (1 - beta) norm(max(0, p - q))(y) (state 0); at j = T the bonus token follows p
    (state 0). At e = 1 every step's law is p and this is :func:`exact_joint`.
    """
    device = next(target.parameters()).device
    e = sampling.lenience
    states = {(): np.eye(width + 1)[0]}  # prefix -> P(prefix, state j), j = 0..T
    for _ in range(length):
        prefixes = list(states)
        ids = torch.tensor([list(prompt) + list(x) for x in prefixes], device=device)
        p = warp(target(input_ids=ids).logits[:, -1].float(), sampling).double().cpu().numpy()  # [n, V]
        q = warp(drafter(input_ids=ids).logits[:, -1].float(), sampling).double().cpu().numpy()
        accepted = np.minimum(q, p / e)  # [n, V]
        rest = np.clip(p - q, 0.0, None)
        rest = np.where(rest.sum(-1, keepdims=True) > 0, rest / np.maximum(rest.sum(-1, keepdims=True), 1e-300), p)
        rejected = (1.0 - accepted.sum(-1, keepdims=True)) * rest
        nxt: dict[tuple[int, ...], np.ndarray] = {}
        for i, x in enumerate(prefixes):
            s = states[x]
            for y in range(p.shape[-1]):
                out = np.zeros(width + 1)
                out[1:] += s[:width] * accepted[i, y]  # accepted: one state on
                out[0] += s[:width].sum() * rejected[i, y] + s[width] * p[i, y]  # replaced, or the bonus
                nxt[(*x, y)] = out
        states = nxt
    vocab = p.shape[-1]
    joint = np.zeros(vocab**length)
    for x, s in states.items():
        joint[cell_of(x, vocab)] = s.sum()
    return joint


@dataclass
class Sampled:
    """Counts over the ``V ** L`` cells, and what the runs exercised, summed over runs.

    ``proposed[k]``/``accepted[k]``: tokens level k handed up and how many the level above
    accepted; ``rounds``: target verification rounds.
    """

    counts: np.ndarray
    proposed: list[int]
    accepted: list[int]
    rounds: int


def sample_counts(
    hierarchy: Hierarchy, prompt: Sequence[int], sampling: SamplingConfig, runs: int = RUNS, length: int = L, first_seed: int = 0
) -> Sampled:
    """Run ``hierarchy`` with seeds ``first_seed``.. (``runs`` of them) and count its first ``length`` tokens by cell."""
    vocab = hierarchy_vocab(hierarchy)
    counts = np.zeros(vocab**length)
    proposed = [0] * len(hierarchy.levels)
    accepted = [0] * len(hierarchy.levels)
    rounds = 0
    with one_thread():
        for seed in range(first_seed, first_seed + runs):
            result = hierarchy.generate(prompt, length, sampling.model_copy(update={"seed": seed}))
            assert len(result.tokens) == length, f"a run stopped after {len(result.tokens)} tokens"
            counts[cell_of(result.tokens, vocab)] += 1
            for k, level in enumerate(result.levels):
                proposed[k] += level.proposed
                accepted[k] += level.accepted
            rounds += result.target_rounds
    return Sampled(counts, proposed, accepted, rounds)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread: passes over a handful of tokens gain nothing from more, and lose a
    lot to contention on a busy machine. The thread count is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cell_of(tokens: Sequence[int], vocab: int) -> int:
    """The cell of a token sequence: its tokens as base-``vocab`` digits, the first most significant."""
    cell = 0
    for t in tokens:
        cell = cell * vocab + t
    return cell


def hierarchy_vocab(hierarchy: Hierarchy) -> int:
    """The number of logits columns the hierarchy samples over."""
    return hierarchy.top.cached.width


@dataclass(frozen=True)
class Verdict:
    """A G-test's outcome.

    ``pvalue`` combines the tests of the first 1, 2, ..., L tokens' laws (Bonferroni: L times the
    smallest, capped at 1): a deviation in the first token is seen on 6 cells rather than spread
    over a hundred. ``g``, ``dof`` and ``cells`` are the full joint's; ``impossible`` counts runs
    that produced an outcome of probability 0 (any gives p = 0).
    """

    pvalue: float
    g: float
    dof: int
    cells: int
    impossible: int
    pvalues: tuple[float, ...] = ()  # per prefix length 1..L

    @property
    def passed(self) -> bool:
        return self.pvalue > ALPHA


def pooled_groups(probs: np.ndarray, runs: int, vocab: int, length: int = L, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """A group id per cell (``[V ** L]``): frequent cells alone, rare ones pooled by their prefix.

    Cells of zero mass get group -1 (checked apart).
    """
    n = len(probs)
    group = np.full(n, -1)
    expected = probs * runs
    frequent = expected >= min_expected
    group[frequent] = np.arange(int(frequent.sum()))
    next_id = int(frequent.sum())
    rare = (~frequent) & (probs > 0)
    cells = np.arange(n)
    for keep in range(length - 1, -1, -1):  # pool by the prefix of `keep` tokens, longest first
        prefix = cells // vocab ** (length - keep)  # the prefix's index among V ** keep
        for pre in np.unique(prefix[rare]):
            members = rare & (prefix == pre)
            if keep == 0 or expected[members].sum() >= min_expected:
                group[members] = next_id
                next_id += 1
                rare &= ~members
    return group


def g_test(counts: np.ndarray, probs: np.ndarray, vocab: int, length: int = L) -> Verdict:
    """G-test observed ``counts`` against the exact ``probs`` (both ``[V ** L]``), prefix by prefix.

    The law of the first l tokens is the joint summed over the rest; each l = 1..L is tested with
    its rare cells pooled, and the p-values are combined by Bonferroni.
    """
    tests = []
    for keep in range(1, length + 1):
        tests.append(_g_test_joint(counts.reshape(vocab**keep, -1).sum(1), probs.reshape(vocab**keep, -1).sum(1), vocab, keep))
    full = tests[-1]
    pvalues = tuple(t.pvalue for t in tests)
    return Verdict(min(1.0, length * min(pvalues)), full.g, full.dof, full.cells, full.impossible, pvalues)


def _g_test_joint(counts: np.ndarray, probs: np.ndarray, vocab: int, length: int) -> Verdict:
    """The G-test of one joint law (``[V ** length]`` cells), rare cells pooled by prefix."""
    runs = int(counts.sum())
    impossible = int(counts[probs <= 0].sum())
    group = pooled_groups(probs, runs, vocab, length)
    k = int(group.max()) + 1
    observed = np.bincount(group[group >= 0], weights=counts[group >= 0], minlength=k)
    expected = np.bincount(group[group >= 0], weights=probs[group >= 0], minlength=k)
    expected = expected / expected.sum() * observed.sum()  # the law sums to 1 only to float32 rounding
    nonzero = observed > 0
    g = 2.0 * float((observed[nonzero] * np.log(observed[nonzero] / expected[nonzero])).sum())
    dof = k - 1
    pvalue = 0.0 if impossible else float(chi2.sf(g, dof))
    return Verdict(pvalue, g, dof, k, impossible)


@dataclass(frozen=True)
class LawCheck:
    """One check of a hierarchy against the target's law: the verdict and what the runs exercised."""

    verdict: Verdict
    sampled: Sampled

    @property
    def pvalue(self) -> float:
        return self.verdict.pvalue

    def describe(self) -> str:
        """One line for a test log: the combined p-value, per prefix length, the joint's G and dof."""
        v = self.verdict
        per = ", ".join(f"{p:.2g}" for p in v.pvalues)
        return f"p = {v.pvalue:.3g} (first 1..{len(v.pvalues)} tokens: {per}; joint G = {v.g:.1f}, {v.dof} dof)"


def law_check(
    hierarchy: Hierarchy,
    target: Any,
    sampling: SamplingConfig,
    prompt: Sequence[int] = PROMPT,
    runs: int = RUNS,
    first_seed: int = 0,
) -> LawCheck:
    """Run ``hierarchy`` ``runs`` times (seeds from ``first_seed``) and G-test its first ``L`` tokens against ``target``'s law."""
    probs = exact_joint(target, prompt, sampling)
    sampled = sample_counts(hierarchy, prompt, sampling, runs, first_seed=first_seed)
    return LawCheck(g_test(sampled.counts, probs, hierarchy_vocab(hierarchy)), sampled)


def law_pvalue(
    hierarchy: Hierarchy,
    target: torch.nn.Module,
    sampling: SamplingConfig,
    prompt: Sequence[int] = PROMPT,
    runs: int = RUNS,
) -> float:
    """The p-value of :func:`law_check`."""
    return law_check(hierarchy, target, sampling, prompt, runs).pvalue


# --- wrong rules: each breaks one rule of the runtime, for the failing controls and the power check ---


def mixed_residual(eps: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A residual perturbed with strength ``eps``: (1 - eps) norm(max(0, p - q)) + eps p.

    ``eps = 1`` is the wrong rule "replace from p"; small ``eps`` measures the harness's power.
    Patch it over ``hsd_runtime.decoding.verify.residual``.
    """

    def wrong(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (1.0 - eps) * right_residual(p, q) + eps * p

    return wrong


class PassesDrafterQ(VerifierLevel):
    """Wrong: the accepted tokens carry the drafter's q upward instead of this level's p."""

    @staticmethod
    def emitted_probs(p: torch.Tensor, draft: Proposal, n: int) -> torch.Tensor:
        assert draft.probs is not None
        return torch.cat([draft.probs[:n], p[n : n + 1]])


class BonusFromDrafter(VerifierLevel):
    """Wrong: when the whole batch is accepted, the next token is the drafter's next draft, not a draw from p.

    (Chains only: asks the level below for one token more than its width.)
    """

    def round(self, ctx: DraftContext) -> list[Proposal | None]:
        assert isinstance(self.width, int) and self.lower is not None
        drafted = self.lower.propose(ctx, self.width + 1)[0]
        assert drafted is not None
        batch = drafted.tokens[: self.width]
        q = drafted.probs[: self.width] if drafted.probs is not None else None
        logits = self.cached.logits(ctx.tokens + batch, len(ctx.tokens) - 1)  # [b + 1, V]
        p = warp(logits, ctx.sampling)
        n, token = verify_sample(batch, q, p, ctx.generator)
        if n == len(batch) and len(drafted.tokens) > n:
            token = drafted.tokens[n]  # the drafter's token where p should have been sampled
        return [Proposal(batch[:n] + [token], p[: n + 1])]


def with_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """Wrong: siblings drawn i.i.d. from q (with replacement), then verified as if without."""
    return torch.multinomial(q, k, replacement=True, generator=generator).tolist()


def unwarped_draw(logits: torch.Tensor, ctx: DraftContext, row: int) -> tuple[int, torch.Tensor | None]:
    """Wrong: the drafter draws from its raw softmax while the verifier divides by its warped q.

    (The warping applied where q is read for verification, not where the drafter samples.)
    """
    if ctx.sampling.greedy:
        return int(logits[0].argmax()), None
    raw = torch.softmax(logits.float(), dim=-1)  # [1, V]
    return int(torch.multinomial(raw[0], 1, generator=ctx.generators[row])), warp(logits, ctx.sampling)


def no_rollback(self: CachedModel, keep: int, row: int = 0) -> None:
    """Wrong: a rejected token's keys and values stay in the cache (``CachedModel._rollback`` that does nothing)."""


def argmax_with_q(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
    """A block-draft drafter that proposes each head's argmax but reports the heads' warped q, as
    if it had drawn from them (BpdDrafter.propose with the draw left out)."""
    logits = self._logits(ctx.tokens)
    if logits is None:
        return [Proposal([])]
    return [Proposal(logits[:n].argmax(-1).tolist(), warp(logits[:n], ctx.sampling))]


def steered_draw_unsteered_q(base: torch.nn.Module) -> Callable:
    """Wrong: a steered drafter that draws its tokens from the steered law but reports ``base``'s
    (its unsteered model's) warped q for them, as if the vector were added after q was read."""
    from hsd_runtime.learned.steering import SteeredDrafter

    steered_propose = SteeredDrafter.propose

    def propose(self: SteeredDrafter, ctx: DraftContext, n: int) -> list[Proposal | None]:
        proposal = steered_propose(self, ctx, n)[0]
        if proposal is None or proposal.probs is None or not proposal.tokens:
            return [proposal]
        seq = torch.tensor([list(ctx.tokens) + proposal.tokens])
        with torch.inference_mode():
            logits = base(input_ids=seq).logits[0, len(ctx.tokens) - 1 : -1]  # [n, V]: the rows that drew each token
        return [Proposal(proposal.tokens, warp(logits, ctx.sampling))]

    return propose


def stops_on_the_drawn_token(propose: Callable) -> Callable:
    """Wrong: a drafter that stops on its confidence after drawing, by the drawn token's own q
    (``ModelDrafter.propose`` with its top-share test moved past the draw): a draft is cut before
    its first token whose q is below ``p_min``, so which tokens stay drafted depends on the draw."""

    def wrong(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        p_min, self.p_min = self.p_min, 0.0  # draw the full draft, then cut it
        try:
            out = propose(self, ctx, n)
        finally:
            self.p_min = p_min
        for p in out:
            if p is None or p.probs is None:
                continue
            keep = next((i for i, x in enumerate(p.tokens) if float(p.probs[i, x]) < p_min), len(p.tokens))
            p.tokens, p.probs = p.tokens[:keep], p.probs[:keep] if keep else None
        return out

    return wrong
