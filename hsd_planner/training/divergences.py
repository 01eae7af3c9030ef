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

from hsd_runtime.models.trim import column_of

from ..choices import Divergence
from .teacher import TeacherRows

__all__ = [
    "DIVERGENCES",
    "bucket_log_probs",
    "divergence",
    "forward_kl",
    "jensen_shannon",
    "reverse_kl",
    "sparse_divergence",
    "total_variation",
]


_LOG_ZERO = -1e4  # a log-probability whose exp is exactly 0 in fp32; finite, so 0 * (a - b) stays 0


def _log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.log_softmax(logits.float() / temperature, dim=-1)  # [N, V]


def _kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) per row ``[N]`` from log-probabilities ``[N, V]``."""
    return (log_a.exp() * (log_a - log_b)).sum(-1)


def _fkl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return _kl(log_p, log_q).mean()


def _rkl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return _kl(log_q, log_p).mean()


def _jsd(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)  # log((p + q) / 2), [N, V]
    return (0.5 * _kl(log_p, log_m) + 0.5 * _kl(log_q, log_m)).mean()


def _tvd(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1).mean()


_FROM_LOGS: dict[Divergence, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"fkl": _fkl, "rkl": _rkl, "jsd": _jsd, "tvd": _tvd}


def forward_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p || q) = sum_x p(x) log(p(x) / q(x)), mean over positions.

    Mass-covering: the student is pushed to put probability wherever the target does.

    >>> round(float(forward_kl(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3)]]))), 4)
    0.1438
    """
    return _fkl(_log_probs(p_logits, temperature), _log_probs(q_logits, temperature))


def reverse_kl(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(q || p) = sum_x q(x) log(q(x) / p(x)), mean over positions.

    Mode-seeking: the student is pushed to put probability only where the target does.
    """
    return _rkl(_log_probs(p_logits, temperature), _log_probs(q_logits, temperature))


def jensen_shannon(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """JSD(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2, mean over positions.

    The mix uses beta = 0.5 (DistillSpec's generalized JSD with equal weights); symmetric and
    bounded by log 2.
    """
    return _jsd(_log_probs(p_logits, temperature), _log_probs(q_logits, temperature))


def total_variation(p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """TV(p, q) = sum_x |p(x) - q(x)| / 2, mean over positions; 1 - TV is the sampling acceptance.

    >>> round(float(total_variation(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, math.log(3)]]))), 4)
    0.25
    """
    return _tvd(_log_probs(p_logits, temperature), _log_probs(q_logits, temperature))


DIVERGENCES: dict[Divergence, Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = {
    "fkl": forward_kl,
    "rkl": reverse_kl,
    "jsd": jensen_shannon,
    "tvd": total_variation,
}


def divergence(name: Divergence, p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The divergence ``name`` (``fkl``, ``rkl``, ``jsd`` or ``tvd``) of target p and student q."""
    return DIVERGENCES[name](p_logits, q_logits, temperature)


def bucket_log_probs(
    teacher: TeacherRows, q_logits: torch.Tensor, temperature: float, columns: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's and the student's log-probabilities over the teacher's top-k tokens and one
    bucket for the rest of the vocabulary, ``[N, k + 1]`` each (``[N, V]`` when the rows are
    complete). The student's ``q_logits`` are ``[N, V]``, or ``[N, C]`` over the token ids
    ``columns`` ``[C]`` alone (a trimmed head, q = 0 elsewhere: its logits need not be spread
    over the whole vocabulary). Each tail is summed over the tokens outside the top k, never
    taken as 1 minus the top k (rounding would swallow a small tail). Where the student cannot
    propose a token (a trimmed head), p is taken on its support (:func:`_on_support`)."""
    log_q_all = _log_probs(q_logits, temperature)  # [N, V] or [N, C]
    at = teacher.ids  # [N, k]: where each top-k token sits in log_q_all
    if columns is not None:  # a column of -inf stands for every token the head cannot propose
        log_q_all = torch.cat([log_q_all, log_q_all.new_full((log_q_all.shape[0], 1), float("-inf"))], -1)
        at = column_of(columns.to(at.device), teacher.width, len(columns))[at]
    log_p, log_q = teacher.log_probs(temperature), log_q_all.gather(-1, at)
    if not teacher.complete:
        log_q_tail = torch.logsumexp(log_q_all.scatter(-1, at, float("-inf")), dim=-1, keepdim=True)  # [N, 1]
        log_p, log_q = torch.cat([log_p, teacher.log_tail[:, None]], -1), torch.cat([log_q, log_q_tail], -1)
    return _on_support(log_p, log_q)


def _on_support(log_p: torch.Tensor, log_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p conditioned on the student's support, where the student cannot propose some tokens.

    A trimmed head (``vocab=N``) gives q = 0 (log q = -inf) outside its N tokens: any divergence
    that charges p's mass there would be infinite, and no student of that head can reach it.
    The best such student, for acceptance sum_x min(p(x), q(x)) as for every divergence here, is
    p restricted to its N tokens and renormalized, so that is what it is compared with. Columns
    outside the support become ``_LOG_ZERO`` in both (exp underflows to exactly 0, and the two
    are equal), so they add nothing and carry no gradient. Unchanged where q is positive everywhere.
    """
    outside = torch.isneginf(log_q)  # [N, C]
    if not bool(outside.any()):
        return log_p, log_q
    log_p = log_p.masked_fill(outside, float("-inf"))
    log_p = log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)
    return log_p.masked_fill(outside, _LOG_ZERO), log_q.masked_fill(outside, _LOG_ZERO)


def sparse_divergence(
    name: Divergence, teacher: TeacherRows, q_logits: torch.Tensor, temperature: float = 1.0, columns: torch.Tensor | None = None
) -> torch.Tensor:
    """The divergence ``name`` between the teacher's top-k rows and the student's logits ``[N, V]``
    (or ``[N, C]`` over the token ids ``columns``: :func:`bucket_log_probs`), computed over the
    top-k tokens and the tail bucket.

    Merging the tail into one bucket can only lower a divergence (data processing), by at most
    what the tail carries: for KL the tail mass times the KL within the tail. With complete rows
    (k = V) it equals :func:`divergence` on the full logits.
    """
    return _FROM_LOGS[name](*bucket_log_probs(teacher, q_logits, temperature, columns))
