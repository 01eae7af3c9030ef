"""The verification rule (Leviathan et al., 2023) as pure functions, in the paper's letters.

``p`` is the verifier's distribution, ``q`` the drafter's. A drafted token x is accepted when
U < min(1, p(x) / q(x)); at the first rejection a replacement is drawn from
norm(max(0, p - q)) and verification stops; if every token is accepted a bonus token is drawn
from p at the next position. Greedy decoding accepts while the drafted token equals the
verifier's argmax, whose argmax is also the replacement or bonus.

Lenience (Leviathan et al., 2023, appendix; DistillSpec's lossy variant), opt-in and lossy:
with e in (0, 1] a drafted x is accepted when U < min(1, p(x) / (e q(x))); the replacement is
still drawn from norm(max(0, p - q)). One verified position then emits y with probability

    P_e(y) = min(q(y), p(y) / e) + (1 - beta) * norm(max(0, p - q))(y),   beta = sum_x min(q(x), p(x) / e)

which is p exactly at e = 1 and leans toward the drafter's q as e falls (a bonus token is
still drawn from p). Sampling only: greedy verification has no probabilities to relax.
"""

from __future__ import annotations

import torch

from .sampling import draw

__all__ = ["residual", "verify_greedy", "verify_sample"]


def verify_greedy(draft: list[int], argmax: list[int]) -> tuple[int, int]:
    """Return ``(accepted, next_token)`` for greedy verification.

    ``argmax[i]`` is the verifier's choice at the position of ``draft[i]``; ``argmax`` has
    ``len(draft) + 1`` entries, the last one for the position after the whole draft.

    >>> verify_greedy([5, 7, 9], [5, 7, 8, 1])
    (2, 8)
    >>> verify_greedy([5, 7], [5, 7, 3])
    (2, 3)
    """
    n = 0
    while n < len(draft) and draft[n] == argmax[n]:
        n += 1
    return n, argmax[n]


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The law of the replacement after a rejection: norm(max(0, p - q)), ``[V]``.

    ``p`` where p == q up to rounding (the rejection then had probability ~0). The one place the
    rule is written for a chain; recursive rejection sampling applies it once per rejected sibling.

    >>> residual(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([1.0, 0.0, 0.0])).tolist()
    [0.0, 1.0, 0.0]
    """
    r = (p - q).clamp_min(0.0)
    total = float(r.sum())
    return r / total if total > 0.0 else p


def verify_sample(
    draft: list[int],
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator,
    lenience: float = 1.0,
) -> tuple[int, int]:
    """Return ``(accepted, next_token)`` for speculative sampling.

    Args:
        draft: the ``b`` drafted token ids.
        q: ``[b, V]`` drafter distributions at those positions, or None for a deterministic
            drafter (q is then one-hot on each drafted token).
        p: ``[b + 1, V]`` verifier distributions; row ``b`` is for the bonus position.
        generator: the source of randomness (on ``p``'s device).
        lenience: e in (0, 1]; below 1 the lossy rule of the module's docstring (1: exact).
    """
    b = len(draft)
    n = b
    if b:
        idx = torch.arange(b, device=p.device)
        tok = torch.tensor(draft, device=p.device)
        px = p[idx, tok]
        qx = q[idx, tok] if q is not None else torch.ones_like(px)
        u = torch.rand(b, generator=generator, device=p.device)
        if lenience != 1.0:  # the exact rule's comparison stays bit for bit what it was
            qx = qx * lenience
        rejected = (u * qx >= px).nonzero()  # U >= p/(e q), written without dividing by q
        if len(rejected):
            n = int(rejected[0, 0])
    if n == b:
        dist = p[b]
    else:
        q_row = q[n] if q is not None else torch.nn.functional.one_hot(torch.tensor(draft[n], device=p.device), p.shape[-1]).to(p.dtype)
        dist = residual(p[n], q_row)
    token = draw(dist, generator)
    return n, token
