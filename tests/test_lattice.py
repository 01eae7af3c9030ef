"""The lattice rescoring of blockwise drafts: exact k-best paths and a proper n-gram model."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from hsd_runtime.learned.lattice import NgramModel, Path, k_best_paths

VOCAB = 12


def _brute_force(tokens, scores, p, lm, history, alpha) -> list[Path]:
    """All k**h paths scored one by one with NgramModel.log_prob, sorted by (-score, choice)."""
    h, k = tokens.shape
    memo: dict[tuple[tuple[int, ...], int], float] = {}

    def lm_term(ctx: list[int], token: int) -> float:
        key = (tuple(ctx[-3:]), token)  # order <= 4 reads at most 3 tokens
        if key not in memo:
            memo[key] = lm.log_prob(ctx, token)
        return memo[key]

    paths = []
    for choice in itertools.product(range(k), repeat=h):
        total, ctx, toks = 0.0, list(history), []
        for j, c in enumerate(choice):
            t, s = int(tokens[j, c]), float(scores[j, c])
            if lm is None or alpha == 0:
                total += s
            else:
                total += s + alpha * lm_term(ctx, t)
            ctx.append(t)
            toks.append(t)
        paths.append(Path(toks, list(choice), total))
    paths.sort(key=lambda path: (-path.score, path.choice))
    return paths[:p]


def _model(order: int, rng: random.Random, length: int = 80) -> NgramModel:
    """A model counted from a random walk that favours a few successors, so the LM has opinions."""
    lm = NgramModel(order, VOCAB)
    seq = [rng.randrange(VOCAB)]
    for _ in range(length - 1):
        seq.append((seq[-1] * 5 + rng.choice([1, 1, 1, 2, 7])) % VOCAB if rng.random() < 0.7 else rng.randrange(VOCAB))
    lm.update(seq)
    return lm


def _lattice(h: int, k: int, rng: random.Random, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.tensor([rng.sample(range(VOCAB), k) for _ in range(h)], dtype=torch.int64)
    if kind == "integer":  # many exact ties: the tie-break decides
        scores = torch.tensor([[float(rng.randint(-2, 0)) for _ in range(k)] for _ in range(h)])
    elif kind == "near":  # differences below the rounding of the totals: ties appear only when summed
        values = [0.0, 2.0**-60, 2.0**-59, 3 * 2.0**-60, -1.0, -2.0]
        scores = torch.tensor([[rng.choice(values) for _ in range(k)] for _ in range(h)], dtype=torch.float64)
    else:
        scores = torch.log_softmax(torch.randn(h, k, generator=torch.Generator().manual_seed(rng.randrange(10**6))), dim=1)
    return tokens, scores


def argmax_path(tokens: torch.Tensor, scores: torch.Tensor) -> Path:
    """The heads' own draft: each head's highest-scoring candidate (the first one on ties), its
    score the sum of the chosen head scores in float64, as k_best_paths computes it without a
    language model."""
    values = scores.to(torch.float64)
    choice = [int(c) for c in values.argmax(dim=1)]  # argmax takes the first maximum
    total = 0.0
    for j, c in enumerate(choice):
        total += float(values[j, c])
    return Path([int(tokens[j, c]) for j, c in enumerate(choice)], choice, total)


@pytest.mark.parametrize("seed", range(6))
def test_k_best_paths_equal_brute_force(seed):
    rng = random.Random(seed)
    models = {order: _model(order, rng) for order in range(1, 5)}
    for _ in range(80):
        h, k = rng.randint(1, 4), rng.randint(1, 4)
        p = rng.randint(1, k**h + 2)
        order = rng.randint(1, 4)
        lm = None if rng.random() < 0.15 else models[order]
        alpha = rng.choice([0.0, 0.5, 1.0, 2.0])
        history = [rng.randrange(VOCAB) for _ in range(rng.choice([0, 0, 1, 2, 5]))]
        tokens, scores = _lattice(h, k, rng, rng.choice(["float", "float", "integer", "near"]))
        got = k_best_paths(tokens, scores, p, lm, history, alpha)
        want = _brute_force(tokens, scores, p, lm, history, alpha)
        assert got == want, (h, k, p, order, alpha, history)
        assert len(got) == min(p, k**h)
        assert all(a.score >= b.score for a, b in itertools.pairwise(got))
        assert len({tuple(path.choice) for path in got}) == len(got)
        assert all(path.tokens == [int(tokens[j, c]) for j, c in enumerate(path.choice)] for path in got)


def test_ties_made_by_rounding_match_brute_force():
    """Prefixes 2**-60 apart whose totals round together: the tie-break may then reverse their order."""
    rng = random.Random(7)
    unigram = _model(1, rng)
    for _ in range(300):
        h, k = rng.randint(2, 3), rng.randint(2, 4)
        p = rng.randint(1, k + 1)
        lm, alpha = rng.choice([(None, 1.0), (unigram, 1.0), (unigram, 0.5)])
        tokens, scores = _lattice(h, k, rng, "near")
        assert k_best_paths(tokens, scores, p, lm, alpha=alpha) == _brute_force(tokens, scores, p, lm, (), alpha)


def test_all_ties_keep_the_lexicographic_order():
    tokens = torch.arange(15).reshape(5, 3)
    paths = k_best_paths(tokens, torch.zeros(5, 3), p=4)
    assert [path.choice for path in paths] == [[0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [0, 0, 0, 1, 0]]
    assert all(path.score == 0.0 for path in paths)


def test_a_tie_made_by_rounding_goes_to_the_smaller_choice():
    # prefix [1] beats prefix [0] by 2**-60, but both totals round to -1.0: the tie-break picks [0, 0]
    tokens = torch.tensor([[1, 2], [3, 4]])
    scores = torch.tensor([[-(2.0**-60), 0.0], [-1.0, -5.0]], dtype=torch.float64)
    assert k_best_paths(tokens, scores, 1)[0].choice == [0, 0]
    paths = k_best_paths(tokens, scores, 3)
    assert [path.choice for path in paths] == [[0, 0], [1, 0], [0, 1]]
    assert [path.score for path in paths] == [-1.0, -1.0, -5.0]


def test_bigram_rescoring_moves_the_best_path_off_the_argmax():
    lm = NgramModel(2, VOCAB)
    lm.update([5, 4, 8] * 20)  # 5 -> 4 -> 8, always
    tokens = torch.tensor([[3, 4], [7, 8]])
    scores = torch.log(torch.tensor([[0.6, 0.4], [0.55, 0.45]]))
    heads = argmax_path(tokens, scores)
    assert heads.tokens == [3, 7] and heads.choice == [0, 0]
    assert k_best_paths(tokens, scores, 1) == [heads]  # no LM: the heads' own draft
    best = k_best_paths(tokens, scores, 1, lm, history=[5], alpha=1.0)[0]
    assert best.tokens == [4, 8] and best.choice == [1, 1]
    expected = float(scores[0, 1]) + lm.log_prob([5], 4) + (float(scores[1, 1]) + lm.log_prob([5, 4], 8))
    assert best.score == pytest.approx(expected, abs=1e-12)
    assert k_best_paths(tokens, scores, 1, lm, history=[5], alpha=0.0)[0].choice == [0, 0]


def test_argmax_path_does_not_assume_sorted_rows():
    path = argmax_path(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[-2.0, -0.5, -1.0], [-0.1, -3.0, -0.1]]))
    assert path.choice == [1, 0] and path.tokens == [2, 4] and path.score == pytest.approx(-0.6)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_sum_to_one(order):
    rng = random.Random(order)
    lm = _model(order, rng, length=50)
    lm.add_corpus([rng.randrange(VOCAB) for _ in range(20)])
    every = torch.arange(VOCAB)
    for history in ([], [3], [11, 11, 11, 11], [0, 1, 2, 3, 4], [rng.randrange(VOCAB) for _ in range(6)]):
        total = lm.log_probs(history, every).exp().sum().item()
        assert total == pytest.approx(1.0, abs=1e-12), history
    empty = NgramModel(order, VOCAB)
    assert empty.log_probs([1, 2], every).exp().sum().item() == pytest.approx(1.0, abs=1e-12)
    assert empty.log_prob([1, 2], 3) == pytest.approx(-math.log(VOCAB))


def _same_model(a: NgramModel, b: NgramModel, rng: random.Random) -> None:
    for _ in range(200):
        history = [rng.randrange(VOCAB) for _ in range(rng.randint(0, 4))]
        token = rng.randrange(VOCAB)
        assert a.log_prob(history, token) == b.log_prob(history, token), (history, token)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_update_is_incremental_resets_and_keeps_corpora(order):
    rng = random.Random(10 + order)
    seq = [rng.randrange(4) for _ in range(60)]  # a small alphabet, so contexts repeat
    corpus = [rng.randrange(VOCAB) for _ in range(30)]

    grown = NgramModel(order, VOCAB)
    for end in (0, 1, 7, 20, 20, 45, 60):
        grown.update(seq[:end])
    scratch = NgramModel(order, VOCAB)
    scratch.update(seq)
    _same_model(grown, scratch, rng)

    rolled = [*seq[:40], 9, 10, 11]  # a rollback: shares only a prefix
    grown.update(rolled)
    fresh = NgramModel(order, VOCAB)
    fresh.update(rolled)
    _same_model(grown, fresh, rng)

    other = [rng.randrange(VOCAB) for _ in range(25)]  # unrelated: everything before is dropped
    with_corpus = NgramModel(order, VOCAB)
    with_corpus.add_corpus(corpus)
    with_corpus.update(seq)
    with_corpus.update(other)
    expected = NgramModel(order, VOCAB)
    expected.add_corpus(corpus)
    expected.update(other)
    _same_model(with_corpus, expected, rng)
    with_corpus.update([])
    only_corpus = NgramModel(order, VOCAB)
    only_corpus.add_corpus(corpus)
    _same_model(with_corpus, only_corpus, rng)


def test_bad_inputs_raise_value_errors():
    tokens, scores = torch.tensor([[1, 2], [3, 4]]), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="same shape"):
        k_best_paths(tokens, torch.zeros(2, 3), 1)
    with pytest.raises(ValueError, match="2-D"):
        k_best_paths(torch.tensor([1, 2]), torch.zeros(2), 1)
    with pytest.raises(ValueError, match="p must be >= 1"):
        k_best_paths(tokens, scores, 0)
    with pytest.raises(ValueError, match="alpha"):
        k_best_paths(tokens, scores, 1, alpha=-1.0)
    with pytest.raises(ValueError, match="alpha"):
        k_best_paths(tokens, scores, 1, alpha=math.nan)
    with pytest.raises(ValueError, match="h >= 1"):
        k_best_paths(torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0, 2), 1)
    with pytest.raises(ValueError, match="k >= 1"):
        k_best_paths(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(2, 0), 1)
    with pytest.raises(ValueError, match="finite"):
        k_best_paths(tokens, torch.tensor([[0.0, -math.inf], [0.0, 0.0]]), 1)
    with pytest.raises(ValueError, match="token ids"):
        k_best_paths(torch.tensor([[1, VOCAB]]), torch.zeros(1, 2), 1, NgramModel(2, VOCAB))
    with pytest.raises(ValueError, match="order"):
        NgramModel(5, VOCAB)
