"""Speculative sampling follows the target's distribution exactly.

On a 5-token vocabulary the exact joint distribution of the first two target tokens is
computable; many seeded runs of a hierarchy must match it (chi-square), while a deliberately
wrong rule - an intermediate level passing the drafter's q upward instead of its own p - must
fail the same test.
"""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from hsd_runtime import Hierarchy, SamplingConfig, TreeShape, VerifierLevel, warp
from tests.tiny import tiny_llama

V = 5
PROMPT = [0, 3, 4]
RUNS = 2000
CFG = dict(mode="sample", temperature=1.0)
TARGET = tiny_llama(10, layers=2, vocab=V, hidden=16, head_scale=10.0)
MIDDLE = tiny_llama(11, layers=1, vocab=V, hidden=16, head_scale=10.0)
BOTTOM = tiny_llama(12, layers=1, vocab=V, hidden=16, head_scale=10.0)


@torch.inference_mode()
def _exact_joint(target: torch.nn.Module = TARGET) -> np.ndarray:
    """P(x1, x2 | prompt) under ``target`` (on whatever device it is), ``[V * V]``."""
    cfg = SamplingConfig(**CFG)
    device = next(target.parameters()).device
    p1 = warp(target(torch.tensor([PROMPT], device=device)).logits[0, -1:].float(), cfg)[0]
    joint = np.zeros((V, V))
    for x1 in range(V):
        p2 = warp(target(torch.tensor([PROMPT + [x1]], device=device)).logits[0, -1:].float(), cfg)[0]
        joint[x1] = (p1[x1] * p2).cpu().numpy()
    return joint.ravel()


def _empirical(hierarchy: Hierarchy) -> np.ndarray:
    counts = np.zeros(V * V)
    for seed in range(RUNS):
        x1, x2 = hierarchy.generate(PROMPT, 2, SamplingConfig(**CFG, seed=seed)).tokens
        counts[x1 * V + x2] += 1
    return counts


def _pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    keep = probs * RUNS >= 5  # pool the rare cells so the chi-square approximation holds
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(probs[keep], probs[~keep].sum()) * RUNS
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return chisquare(observed, expected * observed.sum() / expected.sum()).pvalue  # float32 sums


class PassesDrafterQ(VerifierLevel):
    """The wrong rule: accepted tokens carry the drafter's q upward instead of this level's p."""

    @staticmethod
    def emitted_probs(p, draft, n):
        return torch.cat([draft.probs[:n], p[n : n + 1]])


@pytest.fixture(scope="module")
def joint():
    probs = _exact_joint()
    assert probs.max() < 0.5 and (probs > 0.02).sum() >= 6  # not degenerate: room to be wrong
    return probs


@pytest.mark.parametrize(
    "members, widths",
    [([BOTTOM, TARGET], [3]), ([BOTTOM, MIDDLE, TARGET], [2, 3])],
    ids=["depth1", "depth2"],
)
def test_sampled_joint_matches_target(joint, members, widths):
    assert _pvalue(_empirical(Hierarchy(members, widths)), joint) > 1e-3


def test_wrong_rule_is_caught(joint):
    wrong = Hierarchy([BOTTOM, MIDDLE, TARGET], [2, 3])
    wrong.levels[1].__class__ = PassesDrafterQ  # the middle level only
    assert _pvalue(_empirical(wrong), joint) < 1e-3


# RSD trees: level 0 drafts a tree (siblings without replacement), level 1 verifies it by RRS
TREES = [
    ([BOTTOM, TARGET], [TreeShape((3,))]),
    ([BOTTOM, TARGET], [TreeShape((3, 2))]),
    ([BOTTOM, MIDDLE, TARGET], [TreeShape((2, 2)), 2]),
]


@pytest.mark.parametrize("members, widths", TREES, ids=["tree-depth1", "tree-depth2", "tree-under-middle"])
def test_sampled_trees_match_target(joint, members, widths):
    assert _pvalue(_empirical(Hierarchy(members, widths)), joint) > 1e-3
