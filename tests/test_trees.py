"""RSD draft trees: shapes, the tree attention mask, cache settling, greedy identity, RRS exactness.

Sampling exactness of whole hierarchies with trees is in test_exactness.py (tiny models); here a
Markov chain over 4 tokens, with the drafter sure of a token the verifier almost never emits,
makes two tempting wrong rules of recursive rejection sampling (Jeon et al. 2024) visibly wrong:
siblings drawn with replacement but verified as if without, and q' not updated after a rejection. The same harness with the right rules passes.
"""

import random

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from hsd_runtime import ChainError, Hierarchy, NgramDrafter, SamplingConfig, TreeShape, parse_width
from hsd_runtime.decoding import rrs
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats
from hsd_runtime.decoding.rrs import draw_without_replacement, rrs_node, verify_tree_greedy, verify_tree_sample
from hsd_runtime.terms.tree import DraftTree
from tests.tiny import tiny_llama

TARGET = tiny_llama(21, layers=2, head_scale=4.0)
PROMPT = [5, 9, 11, 7, 30]


def _noisy_copy(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A drafter that agrees with ``model`` often but not always."""
    copy = tiny_llama(21, layers=2, head_scale=4.0)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(scale * torch.randn_like(p))
    return copy


DRAFTER = _noisy_copy(TARGET, 0.03, 1)
MIDDLE = _noisy_copy(TARGET, 0.01, 2)


# --- shapes -----------------------------------------------------------------------------------


def test_shapes_parse_and_count_their_nodes():
    shape = parse_width("3x2x1")
    assert isinstance(shape, TreeShape) and shape.branching == (3, 2, 1)
    assert shape.frontiers == [1, 3, 6, 6] and shape.nodes == 15 and shape.depth == 3 and str(shape) == "3x2x1"
    assert parse_width("6") == 6 and parse_width("1x1") == TreeShape((1, 1))  # one child everywhere: still a tree
    one_level = parse_width("4x")  # a tree one level deep: never the chain width 4
    assert one_level == TreeShape((4,)) and str(one_level) == "4x" and parse_width(str(one_level)) == one_level


@pytest.mark.parametrize("text", ["3xx", "x2", "3x0", "a", "3x2x-1", "", "8x8x8", "2x2x", "x"])
def test_bad_shapes_are_refused(text):
    with pytest.raises(ChainError):
        parse_width(text)


def test_trees_only_at_level_zero_and_not_for_ngram():
    with pytest.raises(ChainError, match="only level 0"):
        Hierarchy([DRAFTER, MIDDLE, TARGET], [2, TreeShape((2, 2))])
    with pytest.raises(ChainError, match="ngram drafts chains only"):
        Hierarchy([NgramDrafter(), TARGET], [TreeShape((2, 2))])


# --- the mask and the cache -------------------------------------------------------------------


def _random_tree(rng: random.Random, shape: tuple[int, ...], vocab: int = 64) -> DraftTree:
    tree = DraftTree()
    parents = [-1]
    for b in shape:
        nxt = []
        for parent in parents:
            for x in rng.sample(range(3, vocab), b):  # distinct siblings
                nxt.append(tree.add(x, parent))
        parents = nxt
    return tree


@torch.inference_mode()
def _alone(seq: list[int]) -> torch.Tensor:
    """The logits after the last token of ``seq`` from a fresh pass without a cache ``[V]``."""
    return TARGET(input_ids=torch.tensor([seq])).logits[0, -1]


@pytest.mark.parametrize("shape", [(3,), (2, 2), (3, 2, 1), (1, 1, 1), (2, 1, 2)])
def test_one_tree_pass_matches_separate_branch_passes(shape):
    tree = _random_tree(random.Random(len(shape)), shape)
    cached = CachedModel(TARGET, 64, LevelStats(model="t"))
    cached.prefill(PROMPT[:3])
    rows = cached.tree_logits(PROMPT, tree)  # also feeds the two prompt tokens not cached yet
    assert rows.shape == (1 + len(tree), 64)
    torch.testing.assert_close(rows[0], _alone(PROMPT), atol=1e-4, rtol=1e-4)
    for i in range(len(tree)):
        branch = [tree.tokens[j] for j in tree.path(i)]
        torch.testing.assert_close(rows[1 + i], _alone(PROMPT + branch), atol=1e-4, rtol=1e-4)
    assert cached.stats.forward_passes == 1 and cached.stats.tokens_fed == 2 + len(tree)


def test_a_tree_grown_depth_by_depth_feeds_only_new_nodes_and_settles_along_the_path():
    tree = _random_tree(random.Random(5), (2, 2, 2))
    cached = CachedModel(TARGET, 64, LevelStats(model="t"))
    cached.prefill(PROMPT)
    grown = DraftTree()
    for depth in (1, 2, 3):  # feed the tree one depth at a time, as a drafter does
        for i in tree.at_depth(depth):
            grown.add(tree.tokens[i], tree.parents[i])
        rows = cached.tree_logits(PROMPT, grown)
    assert cached.stats.tokens_fed == len(tree) and cached.stats.forward_passes == 3
    leaf = tree.at_depth(3)[-1]
    branch = [tree.tokens[j] for j in tree.path(leaf)]
    torch.testing.assert_close(rows[1 + leaf], _alone(PROMPT + branch), atol=1e-4, rtol=1e-4)
    # the next sequence follows a path through the tree and adds a token: the cache keeps that path
    seq = PROMPT + branch[:2] + [40]
    fed = cached.stats.tokens_fed
    torch.testing.assert_close(cached.logits(seq, len(seq) - 1)[0], _alone(seq), atol=1e-4, rtol=1e-4)
    assert cached.stats.tokens_fed - fed == 1  # only the new token: the path's keys were kept


# --- greedy identity ----------------------------------------------------------------------------


def _greedy(members, widths, n=24):
    return Hierarchy(members, widths).generate(PROMPT, n).tokens


REFERENCE = _greedy([TARGET], [], 24)


@pytest.mark.parametrize("seed", range(6))
def test_random_tree_shapes_give_the_targets_greedy_tokens(seed):
    rng = random.Random(seed)
    shape = TreeShape(tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 4))))
    if shape.nodes > 40:
        shape = TreeShape(shape.branching[:2])
    assert _greedy([DRAFTER, TARGET], [shape]) == REFERENCE
    assert _greedy([DRAFTER, MIDDLE, TARGET], [shape, rng.randint(1, 4)]) == REFERENCE


def test_tree_stats_count_nodes_and_accepted_depth():
    h = Hierarchy([DRAFTER, TARGET], [TreeShape((3, 2))])
    result = h.generate(PROMPT, 24)
    drafter, target = result.levels
    assert drafter.trees == result.target_rounds and drafter.proposed == 9 * drafter.trees
    assert target.nodes_verified == drafter.proposed
    committed = sum(x - 1 for x in result.committed_per_round)  # the last round may be cut short
    assert committed <= drafter.accepted <= committed + 2
    assert 0 < drafter.accepted_depth <= 2
    # a tree beats its own first branch: the 3x2 tree accepts at least what a chain of 2 does here
    chain = Hierarchy([DRAFTER, TARGET], [2]).generate(PROMPT, 24)
    assert result.mean_accepted_length >= chain.mean_accepted_length


def test_the_target_drafting_for_itself_accepts_every_depth():
    result = Hierarchy([TARGET, TARGET], [TreeShape((2, 2, 1))]).generate(PROMPT, 20)
    assert result.tokens == REFERENCE[:20] and result.levels[0].accepted_depth == 3


# --- RRS at one node ----------------------------------------------------------------------------


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_rrs_accepts_the_first_child_when_p_equals_q():
    q = torch.tensor([0.1, 0.6, 0.3])
    for seed in range(20):
        children = draw_without_replacement(q, 2, _gen(seed))
        assert rrs_node(children, q, q.clone(), _gen(seed + 100)) == (0, children[0])


def test_rrs_with_a_deterministic_drafter_finds_the_only_token_p_allows():
    p = torch.tensor([0.0, 0.0, 1.0, 0.0])
    assert rrs_node([0, 2], None, p, _gen()) == (1, 2)
    assert rrs_node([0, 1], None, p, _gen()) == (-1, 2)  # both rejected; the residual is p


def test_draws_without_replacement_are_distinct_and_stop_at_the_support():
    q = torch.tensor([0.5, 0.0, 0.25, 0.25])
    for seed in range(20):
        x = draw_without_replacement(q, 4, _gen(seed))
        assert len(x) == 3 and len(set(x)) == 3 and 1 not in x


def _accept_rate(p, q, k, draw, runs=20000):
    gen = _gen(7)
    hits = sum(rrs_node(draw(q, k, gen), q, p, gen)[0] >= 0 for _ in range(runs))
    return hits / runs


def test_without_replacement_accepts_more_siblings_than_with_replacement():
    """At TV 0.60, A(1) = 0.40, and drawing without replacement gains much more per sibling than with it."""
    p = torch.tensor([0.35, 0.25, 0.15, 0.10, 0.10, 0.05])
    q = torch.tensor([0.10, 0.10, 0.05, 0.05, 0.05, 0.65])  # sure of a token p rarely emits
    tv = 0.5 * float((p - q).abs().sum())
    a1 = _accept_rate(p, q, 1, draw_without_replacement)
    assert abs(a1 - (1 - tv)) < 0.015
    without = [_accept_rate(p, q, k, draw_without_replacement) for k in (2, 3, 4)]
    iid = [_accept_rate(p, q, k, lambda q, k, g: torch.multinomial(q, k, replacement=True, generator=g).tolist()) for k in (2, 3, 4)]
    # exact values (enumerating the orders): 0.907 / 0.954 / 0.976 against 0.577 / 0.641 / 0.679
    assert without[0] < without[1] < without[2] and all(w > i + 0.2 for w, i in zip(without, iid))


# --- sampling exactness on a Markov chain, with the two wrong rules ----------------------------

V = 4
P0 = torch.tensor([0.567, 0.007, 0.423, 0.003])  # the verifier
Q0 = torch.tensor([0.001, 0.004, 0.005, 0.990])  # the drafter: sure of what the verifier avoids
P = torch.stack([P0.roll(s) for s in range(V)])  # [prev, next]
Q = torch.stack([Q0.roll(s) for s in range(V)])
RUNS = 4000


def _tree_round(last: int, shape: tuple[int, ...], gen: torch.Generator) -> list[int]:
    """Draft a tree from Q after token ``last`` through the runtime's sampler, verify it with RRS."""
    tree = DraftTree()
    frontier = [-1]
    for b in shape:
        nxt = []
        for parent in frontier:
            prev = last if parent < 0 else tree.tokens[parent]
            tree.probs[parent] = Q[prev]
            nxt += [tree.add(x, parent) for x in rrs.draw_without_replacement(Q[prev], b, gen)]
        frontier = nxt
    p = torch.stack([P[last]] + [P[x] for x in tree.tokens])  # [1 + N, V]
    path, token = verify_tree_sample(tree, p, gen)
    return [tree.tokens[i] for i in path] + [token]


def _markov_pvalue(shape: tuple[int, ...]) -> float:
    counts = np.zeros(V * V)
    for seed in range(RUNS):
        gen, out = _gen(seed), []
        while len(out) < 2:
            out += _tree_round(out[-1] if out else 0, shape, gen)
        counts[out[0] * V + out[1]] += 1
    exact = (P[0][:, None] * P).double().numpy().ravel()  # P(x1, x2) = p(x1 | 0) p(x2 | x1)
    keep = exact * RUNS >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(exact[keep], exact[~keep].sum()) * RUNS
    return chisquare(observed, expected * observed.sum() / expected.sum()).pvalue  # P rows sum to 1 in fp32 only


@pytest.mark.parametrize("shape", [(3,), (2, 2)], ids=["depth1", "depth2"])
def test_rrs_trees_follow_the_verifier_exactly(shape):
    assert _markov_pvalue(shape) > 1e-3


@pytest.mark.parametrize("shape", [(3,), (2, 2)], ids=["depth1", "depth2"])
def test_siblings_drawn_with_replacement_are_caught(monkeypatch, shape):
    monkeypatch.setattr(rrs, "draw_without_replacement", lambda q, k, g: torch.multinomial(q, k, replacement=True, generator=g).tolist())
    assert _markov_pvalue(shape) < 1e-3


@pytest.mark.parametrize("shape", [(3,), (2, 2)], ids=["depth1", "depth2"])
def test_draft_distribution_not_updated_after_a_rejection_is_caught(monkeypatch, shape):
    monkeypatch.setattr(rrs, "_remove", lambda q, x: q)  # q' keeps the rejected token
    assert _markov_pvalue(shape) < 1e-3


def test_greedy_tree_verification_walks_the_argmax():
    tree = DraftTree()
    a, b = tree.add(4, -1), tree.add(5, -1)
    c = tree.add(6, b)
    assert verify_tree_greedy(tree, [5, 9, 6, 8]) == ([b, c], 8)
    assert verify_tree_greedy(tree, [7, 0, 0, 0]) == ([], 7)
    assert a == 0 and SamplingConfig().greedy


def test_a_one_level_tree_is_stored_and_read_back_as_a_tree():
    from hsd_planner.plan import widths_from_json, widths_to_json

    widths = [TreeShape((2,)), 3]
    assert widths_to_json(widths) == ["2x", 3] and widths_from_json(widths_to_json(widths)) == widths
