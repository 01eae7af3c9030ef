"""Divergences between a target's and a student's next-token distributions (DistillSpec).

Every function takes the target's logits ``p_logits`` and the student's ``q_logits``, both
``[N, V]`` (one row per position), and a temperature T; the distributions are
p = softmax(p_logits / T) and q = softmax(q_logits / T). Each returns the mean over the N
positions as a 0-d tensor, differentiable in both arguments (the trainer passes the target's
logits without gradient). Letters follow the verification rule: p is the verifier (target), q the
drafter (student).

DistillSpec (Zhou et al. 2023) found the best divergence to depend on the task and the decoding
mode; forward KL and total variation do well for greedy decoding. Total variation is the one the
acceptance of speculative sampling depends on directly: alpha = 1 - TV(p, q).

Logits must be finite (as a model's are): a probability of exactly 0 would make 0 * log 0 undefined.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..choices import Divergence

__all__ = ["DIVERGENCES", "divergence", "forward_kl", "jensen_shannon", "reverse_kl", "total_variation"]


def _log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.log_softmax(logits.float() / temperature, dim=-1)  # [N, V]


def _kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) per row ``[N]`` from log-probabilities ``[N, V]``."""
    return (log_a.exp() * (log_a - log_b)).sum(-1)


def forward_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p || q) = sum_x p(x) log(p(x) / q(x)), mean over positions.

    Mass-covering: the student is pushed to put probability wherever the target does.

    >>> round(float(forward_kl(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3)]]))), 4)
    0.1438
    """
    return _kl(_log_probs(p_logits, temperature), _log_probs(q_logits, temperature)).mean()


def reverse_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(q || p) = sum_x q(x) log(q(x) / p(x)), mean over positions.

    Mode-seeking: the student is pushed to put probability only where the target does.
    """
    return _kl(_log_probs(q_logits, temperature), _log_probs(p_logits, temperature)).mean()


def jensen_shannon(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """JSD(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2, mean over positions.

    The mix uses beta = 0.5 (DistillSpec's generalized JSD with equal weights); symmetric and
    bounded by log 2.
    """
    log_p, log_q = _log_probs(p_logits, temperature), _log_probs(q_logits, temperature)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)  # log((p + q) / 2), [N, V]
    return (0.5 * _kl(log_p, log_m) + 0.5 * _kl(log_q, log_m)).mean()


def total_variation(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """TV(p, q) = sum_x |p(x) - q(x)| / 2, mean over positions; 1 - TV is the sampling acceptance.

    >>> round(float(total_variation(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3)]]))), 4)
    0.25
    """
    p, q = _log_probs(p_logits, temperature).exp(), _log_probs(q_logits, temperature).exp()
    return 0.5 * (p - q).abs().sum(-1).mean()


DIVERGENCES: dict[Divergence, Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = {
    "fkl": forward_kl,
    "rkl": reverse_kl,
    "jsd": jensen_shannon,
    "tvd": total_variation,
}


def divergence(name: Divergence, p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The divergence ``name`` (``fkl``, ``rkl``, ``jsd`` or ``tvd``) of target p and student q."""
    return DIVERGENCES[name](p_logits, q_logits, temperature)
