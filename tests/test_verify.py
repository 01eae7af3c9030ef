"""The verification rule on toy distributions."""

import pytest
import torch
from scipy.stats import chisquare

from hsd_runtime import SamplingConfig, verify_greedy, verify_sample, warp


def test_greedy_accepts_matching_prefix_then_replaces():
    assert verify_greedy([3, 4, 5], [3, 4, 6, 0]) == (2, 6)
    assert verify_greedy([3, 4], [3, 4, 9]) == (2, 9)  # all accepted: bonus
    assert verify_greedy([], [7]) == (0, 7)
    assert verify_greedy([1], [2, 0]) == (0, 2)


def test_sample_accepts_everything_when_q_equals_p():
    p = torch.softmax(torch.randn(4, 10), -1)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        draft = [int(torch.multinomial(p[i], 1, generator=g)) for i in range(3)]
        n, _ = verify_sample(draft, p[:3], p, g)
        assert n == 3


def test_sample_rejects_tokens_the_verifier_never_emits():
    p = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        n, token = verify_sample([0], q, p, g)
        assert n == 0 and token in (1, 2)  # the residual max(0, p - q) excludes token 0


def _first_token_distribution(q, p, runs, deterministic=None):
    """Empirical distribution of the first emitted token with a one-token draft from q."""
    g = torch.Generator().manual_seed(1)
    counts = torch.zeros(p.shape[-1])
    for _ in range(runs):
        x = deterministic if deterministic is not None else int(torch.multinomial(q[0], 1, generator=g))
        n, token = verify_sample([x], None if deterministic is not None else q, p, g)
        counts[x if n == 1 else token] += 1
    return counts


@pytest.mark.parametrize("deterministic", [None, 2])
def test_sample_output_follows_p(deterministic):
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    runs = 4000
    counts = _first_token_distribution(q, p, runs, deterministic)
    assert chisquare(counts.numpy(), (p[0] * runs).numpy()).pvalue > 1e-3
    # the negative control: q's own distribution is rejected
    assert chisquare(counts.numpy(), (torch.tensor([0.4, 0.3, 0.2, 0.1]) * runs).numpy()).pvalue < 1e-6


def test_warp_applies_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_k = warp(logits, SamplingConfig(mode="sample", top_k=2))
    assert torch.allclose(top_k, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    top_p = warp(logits, SamplingConfig(mode="sample", top_p=0.8))
    assert torch.allclose(top_p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    top_p = warp(logits, SamplingConfig(mode="sample", top_p=0.81))
    assert torch.allclose(top_p, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    hot = warp(logits, SamplingConfig(mode="sample", temperature=0.5))
    assert torch.allclose(hot, torch.softmax(2 * logits, -1))
