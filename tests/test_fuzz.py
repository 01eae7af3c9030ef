"""A seeded, bounded fuzz of the runtime: random hierarchies must decode exactly the target's greedy tokens.

Each case draws a chain (depth 0 to 3, the n-gram drafter at the bottom or not, models that agree
with the target often, rarely, always, or an int8 copy of it), widths 1 to 4 or a tree shape at
level 0, a prompt (repetitive or not), end-of-sequence ids (one the target emits mid-run, so an
EOS falls inside a round, or one it never emits) and a length (which cuts the last round). The
greedy output must equal the target's own, every time, on two prompts in a row (the caches reset
between them), and the stats must add up.
"""

from __future__ import annotations

import random

import pytest
import torch

from hsd_runtime import GenerationResult, Hierarchy, NgramDrafter, TreeShape, quantized_copy
from tests.law import one_thread
from tests.tiny import tiny_llama

CASES = 48
VOCAB = 64


def _noisy(seed: int, scale: float) -> torch.nn.Module:
    """A copy of the target with Gaussian noise of ``scale`` on every weight."""
    model = tiny_llama(0, layers=3, vocab=VOCAB, head_scale=4.0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return model


TARGET = tiny_llama(0, layers=3, vocab=VOCAB, head_scale=4.0)
POOL = {
    "close": _noisy(1, 0.01),  # agrees with the target at most positions
    "far": _noisy(2, 0.05),  # agrees sometimes
    "random": tiny_llama(3, layers=1, vocab=VOCAB, head_scale=4.0),  # almost never
    "itself": TARGET,  # always: every draft accepted, every bonus token used
    "int8": quantized_copy(TARGET),
}


def _case(seed: int) -> dict:
    rng = random.Random(seed)
    depth = rng.randint(0, 3)
    ngram = depth > 0 and rng.random() < 0.4
    names = [rng.choice(sorted(POOL)) for _ in range(depth - ngram)]
    widths: list[int | TreeShape] = [rng.randint(1, 4) for _ in range(depth)]
    if depth and not ngram and rng.random() < 0.4:  # level 0 drafts a tree
        widths[0] = TreeShape(tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 3))))
    prompts = []
    for _ in range(2):
        motif = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 4))]
        prompt = motif * rng.randint(1, 4) if rng.random() < 0.5 else [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 12))]
        prompts.append(prompt)
    return {
        "names": names,
        "ngram": rng.randint(1, 4) if ngram else None,
        "widths": widths,
        "prompts": prompts,
        "max_new_tokens": rng.randint(1, 28),
        "eos": rng.choice(["emitted", "never", "none"]),
        "rng": rng,
    }


def _check_stats(result: GenerationResult, widths: list, max_new_tokens: int, eos: frozenset[int], ngram_below: bool = False) -> None:
    """``ngram_below``: the level under the target is the n-gram drafter, which may propose fewer than its width."""
    tokens = result.tokens
    assert 1 <= len(tokens) <= max_new_tokens
    stop = [i for i, t in enumerate(tokens) if t in eos]
    assert stop in ([], [len(tokens) - 1]), "generation must stop at the first EOS"
    if not stop:
        assert len(tokens) == max_new_tokens
    # tokens committed = the sum over rounds; each round commits at least one token
    assert sum(result.committed_per_round) == len(tokens) and result.target_rounds == len(result.committed_per_round)
    assert all(c >= 1 for c in result.committed_per_round)
    for level in result.levels:
        assert 0 <= level.accepted <= level.proposed
    top = result.levels[-1]
    assert top.proposed == top.accepted == 0
    if not widths:
        assert result.committed_per_round == [1] * len(tokens)
        return
    below = result.levels[-2]
    w = widths[-1]
    most = (w.depth if isinstance(w, TreeShape) else w) + 1  # accepted tokens plus one of the target's
    assert all(c <= most for c in result.committed_per_round)
    # every round but the last commits exactly what the target accepted plus one; the last may be cut
    uncut = below.accepted + result.target_rounds - len(tokens)
    assert 0 <= uncut <= most - 1
    if isinstance(w, TreeShape):
        assert below.trees == result.target_rounds and below.proposed == w.nodes * below.trees
        return
    # a chain's draft holds at most the tokens still to make less one: no round runs past the limit
    budgets, made = [], 0
    for c in result.committed_per_round:
        budgets.append(min(w, max_new_tokens - made - 1))
        made += c
    assert stop or uncut == 0
    if ngram_below:
        assert below.proposed <= sum(budgets)
    else:
        assert below.proposed == sum(budgets)  # a model level hands up its width, or the budget where that is less


@pytest.mark.parametrize("seed", range(CASES))
def test_random_hierarchy_is_the_targets_greedy(seed):
    with one_thread():
        _run_case(seed)


def _run_case(seed: int) -> None:
    case = _case(seed)
    members: list = ([NgramDrafter(n=case["ngram"])] if case["ngram"] else []) + [POOL[n] for n in case["names"]] + [TARGET]
    n = case["max_new_tokens"]
    first = Hierarchy([TARGET], []).generate(case["prompts"][0], n).tokens
    if case["eos"] == "emitted":  # a token the target emits mid-run: an EOS inside a round
        eos = frozenset({case["rng"].choice(first)})
    elif case["eos"] == "never":
        eos = frozenset({next(t for t in range(VOCAB) if t not in first)})
    else:
        eos = frozenset()
    hierarchy = Hierarchy(members, case["widths"], eos_token_ids=eos)  # one object for both prompts
    for prompt in case["prompts"]:
        alone = Hierarchy([TARGET], [], eos_token_ids=eos).generate(prompt, n)
        got = hierarchy.generate(prompt, n)
        assert got.tokens == alone.tokens, case
        _check_stats(got, case["widths"], n, eos, ngram_below=len(members) == 2 and case["ngram"] is not None)
        _check_stats(alone, [], n, eos)


def test_the_cases_cover_every_kind():
    """Depth 0 to 3, with and without the n-gram drafter, trees, every pool member and EOS mode."""
    cases = [_case(seed) for seed in range(CASES)]
    assert {len(c["widths"]) for c in cases} == {0, 1, 2, 3}
    assert any(c["ngram"] for c in cases) and any(isinstance(c["widths"][0], TreeShape) for c in cases if c["widths"])
    assert any(c["ngram"] and len(c["widths"]) == 3 for c in cases)
    assert {n for c in cases for n in c["names"]} == set(POOL)
    assert {c["eos"] for c in cases} == {"emitted", "never", "none"}
