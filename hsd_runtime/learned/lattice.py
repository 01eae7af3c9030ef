"""Rescoring the drafts of blockwise parallel decoding with an n-gram language model.

In blockwise parallel decoding h prediction heads look ahead from the same context: head j guesses
the token j + 1 positions on. Each head offers its top-k tokens with their log-probabilities, and
the h rows of k candidates form a "sausage" lattice: a draft is one path through it, one choice per
head, and there are k**h of them. The heads are blind to one another, so the path of the heads'
own argmaxes is often incoherent (a word repeated, a phrase broken). Kim et al. 2024, "Exploring
and Improving Drafts in Blockwise Parallel Decoding" (arXiv 2404.09221), rescore the lattice with a
small n-gram model and verify the best few paths instead.

Scoring. A path with choices c_0 .. c_{h-1} scores

    sum_j  head_j(c_j) + alpha * log P_lm(token_j | history, token_0 .. token_{j-1}),

accumulated position by position in float64: ``score = 0.0; score += head + alpha * lm`` for
j = 0, 1, ...; without a model (or with alpha = 0) the LM term is left out. An order-n model sees
only the last n - 1 tokens, so the LM term of position j depends on the choices of the positions
j - n + 1 .. j - 1 alone (the positions before the block are the fixed ``history``).

The dynamic program. That makes the lattice a trellis whose state after position j is the tuple
of the last n - 1 choices (fewer at the first positions, where the rest of the context is history),
k**(n-1) states at most. The transition weights of a position are one [states, k] table, computed
once per call (the LM is queried once per distinct context). For the 1-best this is Viterbi, for
the p best a k-best Viterbi: every state keeps the p best prefixes that reach it, since two
prefixes in the same state gain the same from every continuation, so a prefix beaten by p others
in its state cannot be among the p best paths. The prefixes are kept in flat numpy arrays and each
step extends them all, sorts the candidates by (state, -score, choice) and keeps the first p of
each state: O(h * p * k**n * log(p * k**n)) work.

Exactness. The result equals sorting all k**h paths by (-score, choices): ties go to the
lexicographically smaller list of choices, which the program tracks as each prefix's rank among
the prefixes of its step. Floating-point addition is monotone but may round two different prefix
scores to the same total later on, which can turn a tie-break around; so a prefix beaten by less
than a rounding margin (a few ulps of the largest possible total) by one of its state's first p
that has a greater choice list is kept too (rare, and cheap when it happens).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["NgramModel", "Path", "k_best_paths"]


def _as_ints(tokens: Sequence[int] | torch.Tensor | np.ndarray) -> list[int]:
    """A list of Python ints from a sequence, tensor or array of token ids."""
    if isinstance(tokens, (torch.Tensor, np.ndarray)):
        return [int(t) for t in tokens.reshape(-1).tolist()]
    return [int(t) for t in tokens]


class _Followers:
    """Counts of the tokens that followed one context, with their total."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0


class NgramModel:
    """Interpolated absolute-discounting n-gram LM over the token ids 0 .. vocab - 1.

    P_m(w | c) = (max(count(c, w) - D, 0) + D * N1+(c) * P_{m-1}(w | c[1:])) / count(c) for a
    context c of m - 1 tokens seen before, P_{m-1}(w | c[1:]) for an unseen one, and P_0 = 1/vocab;
    N1+(c) is the number of distinct tokens that followed c and D = 0.75. So for every history the
    probabilities of all vocab tokens sum to one, and none is zero. A history shorter than n - 1
    tokens uses the orders it can fill.

    The counts are those of the sequence last given to update() plus every add_corpus() sequence;
    n-grams never span two sequences.
    """

    discount = 0.75

    def __init__(self, order: int, vocab: int) -> None:
        """An empty model of ``order`` n (1 = unigram .. 4) over ``vocab`` token ids."""
        if not 1 <= order <= 4:
            raise ValueError(f"order must be in 1..4, got {order}")
        if vocab < 1:
            raise ValueError(f"vocab must be >= 1, got {vocab}")
        self.order = order
        self.vocab = vocab
        # _tables[m - 1]: context of m - 1 tokens -> the tokens that followed it, for m = 1 .. order
        self._tables: list[dict[tuple[int, ...], _Followers]] = [{} for _ in range(order)]
        self._seq: list[int] = []  # the sequence last given to update()

    def update(self, tokens: Sequence[int]) -> None:
        """Make ``tokens`` the counted sequence, in place of the previous update()'s.

        Only the n-grams ending after the prefix the two sequences share are removed and added,
        so a context that grows by a few tokens per call costs a few tokens' work (plus comparing
        the prefix); the counts are then exactly those of counting ``tokens`` from scratch.
        """
        new = _as_ints(tokens)
        old = self._seq
        if len(new) >= len(old) and new[: len(old)] == old:
            start = len(old)
        else:
            start = 0
            while start < min(len(old), len(new)) and old[start] == new[start]:
                start += 1
        self._check(new[start:])
        self._count(old, start, -1)
        self._count(new, start, +1)
        self._seq = new

    def add_corpus(self, tokens: Sequence[int]) -> None:
        """Count a further sequence; its counts stay through every later update()."""
        seq = _as_ints(tokens)
        self._check(seq)
        self._count(seq, 0, +1)

    def log_prob(self, history: Sequence[int], token: int) -> float:
        """log P(token | the last order - 1 tokens of history), natural log."""
        self._check([int(token)])
        return math.log(self._probs(self._context(history), [int(token)], {})[0])

    def log_probs(self, history: Sequence[int], tokens: torch.Tensor) -> torch.Tensor:
        """log P(t | history) for each candidate t: [m] token ids -> [m] float64."""
        toks = _as_ints(tokens)
        self._check(toks)
        probs = self._probs(self._context(history), toks, {})
        return torch.tensor([math.log(q) for q in probs], dtype=torch.float64)

    def _context(self, history: Sequence[int]) -> tuple[int, ...]:
        """The last order - 1 tokens of history (all of it when shorter)."""
        if self.order == 1:
            return ()
        return tuple(_as_ints(history)[-(self.order - 1) :])

    def _check(self, tokens: list[int]) -> None:
        bad = [t for t in tokens if not 0 <= t < self.vocab]
        if bad:
            raise ValueError(f"token ids must lie in [0, {self.vocab}), got {bad[0]}")

    def _count(self, seq: list[int], start: int, sign: int) -> None:
        """Add ``sign`` (+1 or -1) to the counts of the n-grams of seq that end at start or later."""
        for i in range(start, len(seq)):
            word = seq[i]
            for m in range(1, min(self.order, i + 1) + 1):
                ctx = tuple(seq[i - m + 1 : i])
                table = self._tables[m - 1]
                followers = table.get(ctx)
                if followers is None:
                    followers = table[ctx] = _Followers()
                count = followers.counts.get(word, 0) + sign
                if count:
                    followers.counts[word] = count
                else:
                    del followers.counts[word]
                followers.total += sign
                if not followers.total:
                    del table[ctx]

    def _probs(self, ctx: tuple[int, ...], tokens: list[int], cache: dict[tuple[int, ...], list[float]]) -> list[float]:
        """P(t | ctx) for each t in tokens (len(ctx) < order); ``cache`` holds the rows for the
        same ``tokens`` by context, and fills with ctx and its suffixes."""
        row = cache.get(ctx)
        if row is not None:
            return row
        lower = self._probs(ctx[1:], tokens, cache) if ctx else [1.0 / self.vocab] * len(tokens)
        followers = self._tables[len(ctx)].get(ctx)
        if followers is None:
            row = lower
        else:
            d, counts, total = self.discount, followers.counts, followers.total
            back = d * len(counts)
            row = []
            for t, low in zip(tokens, lower):
                c = counts.get(t, 0)
                row.append(((c - d if c else 0.0) + back * low) / total)
        cache[ctx] = row
        return row

    def _log_prob_table(self, contexts: list[tuple[int, ...]], tokens: list[int]) -> np.ndarray:
        """log P(t | ctx) for every context and token: [len(contexts), len(tokens)] float64."""
        cache: dict[tuple[int, ...], list[float]] = {}
        return np.array([[math.log(q) for q in self._probs(ctx, tokens, cache)] for ctx in contexts], dtype=np.float64)


@dataclass(frozen=True)
class Path:
    """One draft through the lattice."""

    tokens: list[int]  # [h] the token chosen at each head
    choice: list[int]  # [h] its index in that head's top-k row
    score: float  # sum of head log-probs + alpha * sum of LM log-probs (float64, position by position)


def _lattice(tokens: torch.Tensor, scores: torch.Tensor) -> tuple[list[list[int]], np.ndarray]:
    """Validated lattice: token ids as lists [h][k] and scores as float64 [h, k]."""
    tokens, scores = torch.as_tensor(tokens), torch.as_tensor(scores)
    if tokens.dim() != 2 or scores.dim() != 2:
        raise ValueError(f"tokens and scores must be 2-D [h, k], got shapes {tuple(tokens.shape)} and {tuple(scores.shape)}")
    if tokens.shape != scores.shape:
        raise ValueError(f"tokens and scores must have the same shape, got {tuple(tokens.shape)} and {tuple(scores.shape)}")
    h, k = tokens.shape
    if h < 1:
        raise ValueError("the lattice needs at least one head (h >= 1), got h = 0")
    if k < 1:
        raise ValueError("the lattice needs at least one candidate per head (k >= 1), got k = 0")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    values = scores.detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(values).all():
        raise ValueError("scores must be finite log-probabilities (no nan or inf)")
    return tokens.detach().cpu().tolist(), values


def _weights(
    toks: list[list[int]], values: np.ndarray, lm: NgramModel | None, history: list[int], alpha: float, width: int
) -> list[np.ndarray]:
    """Per position j the transition weights [k**min(j, width), k]: row s is the state (the
    choices of the previous min(j, width) positions, base k, oldest digit first), column c the
    choice at j; weight = head score + alpha * LM log-prob."""
    h, k = values.shape
    if lm is None:
        return [values[j][None, :] for j in range(h)]  # [1, k] each
    out = []
    for j in range(h):
        lat = min(j, width)  # context tokens from the lattice; the rest come from history
        need = width - lat
        head = tuple(history[-need:]) if need else ()
        rows = toks[j - lat : j]
        contexts = [head + tuple(row[c] for row, c in zip(rows, digits)) for digits in itertools.product(range(k), repeat=lat)]
        lp = lm._log_prob_table(contexts, toks[j])  # [k**lat, k]
        out.append(values[j][None, :] + alpha * lp)
    return out


def _prune(state: np.ndarray, score: np.ndarray, code: np.ndarray, p: int, tol: float) -> np.ndarray:
    """Indices of the candidates to keep: in each state the first p by (-score, code), plus any
    later one that a rounding tie could still lift above one of those (see the module docstring)."""
    # state, score, code: [m]
    order = np.lexsort((code, -score, state))
    st, sc, cd = state[order], score[order], code[order]
    idx = np.arange(len(order))
    first = np.ones(len(order), dtype=bool)
    first[1:] = st[1:] != st[:-1]
    start = np.maximum.accumulate(np.where(first, idx, 0))  # [m] where each sorted row's state begins
    keep = idx - start < p
    rest = np.flatnonzero(~keep)
    if rest.size:
        near = rest[sc[rest] + tol >= sc[start[rest] + p - 1]]  # within the margin of the p-th
        if near.size:
            top = start[near][:, None] + np.arange(p)  # [r, p] the state's first p
            lim = (sc[near] + tol)[:, None]
            risky = (sc[top] > sc[near][:, None]) & (sc[top] <= lim) & (cd[top] > cd[near][:, None])
            keep[near[risky.any(axis=1)]] = True
    return order[keep]


def k_best_paths(
    tokens: torch.Tensor,
    scores: torch.Tensor,
    p: int,
    lm: NgramModel | None = None,
    history: Sequence[int] = (),
    alpha: float = 1.0,
) -> list[Path]:
    """The p highest-scoring paths of the lattice, best first, exactly (fewer when k**h < p).

    tokens [h, k] int64: head j's top-k token ids; scores [h, k] float: their log-probs (finite).
    A path scores sum_j scores[j, c_j] + alpha * lm.log_prob(history + path[:j], path[j]),
    accumulated in float64 one position at a time; lm=None or alpha=0: head scores only. Ties are
    broken by the lexicographically smaller ``choice`` list, so the result is deterministic and
    equals sorting all k**h paths by (-score, choice).
    """
    toks, values = _lattice(tokens, scores)
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
    h, k = values.shape
    model = lm if alpha != 0.0 else None
    width = model.order - 1 if model is not None else 0  # choices a state remembers
    if model is not None:
        model._check([t for row in toks for t in row])
    weights = _weights(toks, values, model, _as_ints(history), float(alpha), width)

    # a margin beyond any rounding error of the totals (each step moves a difference by < 1 ulp)
    bound = 2.0 * sum(float(np.abs(w).max()) for w in weights) + 1.0
    tol = 4.0 * (h + 1) * math.ulp(bound)

    ks = np.arange(k)
    states = k**width
    # the live prefixes, [n] each: state id, score, rank of the choice list among this step's prefixes
    state = np.zeros(1, dtype=np.int64)
    score = np.zeros(1, dtype=np.float64)
    code = np.zeros(1, dtype=np.int64)
    parents: list[np.ndarray] = []  # per step [n]: index of the prefix extended
    choices: list[np.ndarray] = []  # per step [n]: the choice appended
    for w in weights:
        cand_score = (score[:, None] + w[state]).ravel()  # [n * k] for the n live prefixes
        cand_state = ((state[:, None] * k + ks) % states).ravel()
        cand_code = (code[:, None] * k + ks).ravel()  # lexicographic order of the extended choice lists
        kept = _prune(cand_state, cand_score, cand_code, p, tol)
        state, score = cand_state[kept], cand_score[kept]
        code = np.empty(len(kept), dtype=np.int64)
        code[np.argsort(cand_code[kept])] = np.arange(len(kept))  # re-rank so codes stay small
        parents.append(kept // k)
        choices.append(kept % k)

    out = []
    for i in np.lexsort((code, -score))[:p]:
        total = float(score[i])
        choice = []
        for j in range(h - 1, -1, -1):
            choice.append(int(choices[j][i]))
            i = parents[j][i]
        choice.reverse()
        out.append(Path([toks[j][c] for j, c in enumerate(choice)], choice, total))
    return out
