"""The sibling-acceptance curve A(k): what a draft tree's branching is worth, from the same logits.

A(k) is the probability that one of k siblings drafted at a node is accepted by the verifier,
k = 1..SIBLINGS_K, measured like ``alpha`` at every continuation position t from the
teacher-forced logits the acceptance profile already computes (no extra model pass):

- greedy: a_t(k) = 1 when the verifier's argmax is among the drafter's k most likely tokens
  (ties in index order, as ``argmax`` breaks them, so a_t(1) is exactly greedy ``alpha``);
- sampling: the siblings x_1..x_k are a sample without replacement from the drafter's warped q
  (the Gumbel-top-k of log q), verified by recursive rejection sampling (RRS; Jeon et al. 2024, "Recursive Speculative Decoding"):
  r <- p, q' <- q; x_i is accepted with min(1, r(x_i)/q'(x_i)), and on rejection
  r <- norm(max(r - q', 0)), q' <- norm(q' without x_i). Given the order, P(some sibling
  accepted) = 1 - prod_i (1 - min(1, r_i(x_i)/q'_i(x_i))); Monte Carlo runs over the orders only.

Why the recursion is cheap: by induction every residual has the form
r_i(x) = (p(x) - lambda_i q(x))^+ / M_i with M_i = F(lambda_i), F(l) = sum_x (p(x) - l q(x))^+,
and lambda_{i+1} = lambda_i + M_i / c_i where c_i is the drafter's mass not yet drawn. So the
[V]-sized state of each order reduces to three scalars, F is evaluated from one sort of p/q per
position, and the orders are drawn by inverse CDF in O(k log V): nothing of size samples x V.
A(1) = sum_x min(p, q) = 1 - TV = ``alpha`` has no order randomness: it is computed exactly, and
A(k) = A(1) + TV * E[P(one of x_2..x_k accepted | x_1 rejected)], where the rejected first
sibling has the law (q - p)^+ / TV (q(x) times its rejection probability): every Monte Carlo
order is spent on the rejections that matter, and the estimate stays non-decreasing in k, in
[A(1), 1], and 1 where k covers the drafter's support.

The n-gram drafter drafts chains, not siblings: it has no curve. Per prompt the profile stores
``siblings_sum[k - 1] = sum_t a_t(k)`` and the count of positions, which pool exactly over prompts.
"""

from __future__ import annotations

import numpy as np
import torch

from hsd_runtime import SamplingConfig, warp

__all__ = ["SIBLINGS_K", "SIBLING_SAMPLES", "greedy_siblings", "sampled_siblings", "sibling_acceptance", "sibling_sums"]

SIBLINGS_K = 8  # A(1..8): the branchings a draft tree uses
SIBLING_SAMPLES = 64  # Monte Carlo orders per position (cheap: no [samples, V] tensor exists)
_CHUNK_ELEMENTS = 1 << 18  # positions x V per chunk on CPU: [chunk, V] float64 buffers of 2 MB stay in cache
_CHUNK_ELEMENTS_GPU = 1 << 24  # on an accelerator: fewer, larger launches (about 1 GB of buffers)


def greedy_siblings(q_logits: torch.Tensor, p_logits: torch.Tensor, k_max: int = SIBLINGS_K) -> torch.Tensor:
    """a_t(k) ``[m, k_max]``: 1 when the verifier's argmax is among the drafter's top k.

    The rank of the verifier's argmax y in q counts the tokens scored above it plus the ties
    before it in index order, so rank 0 is exactly ``q_logits.argmax() == y``.

    >>> greedy_siblings(torch.tensor([[0.0, 2.0, 1.0, 1.0]]), torch.tensor([[0.0, 0.0, 5.0, 0.0]]), 3).tolist()
    [[0.0, 1.0, 1.0]]
    """
    y = p_logits.argmax(-1, keepdim=True)  # [m, 1] the verifier's token
    ly = q_logits.gather(-1, y)  # [m, 1] the drafter's score of it
    index = torch.arange(q_logits.shape[-1], device=q_logits.device)
    rank = (q_logits > ly).sum(-1) + ((q_logits == ly) & (index < y)).sum(-1)  # [m]
    k = torch.arange(1, k_max + 1, device=q_logits.device)
    return (rank[:, None] < k).double().cpu()


class _Residual:
    """F(l) = sum_x (p(x) - l q(x))^+ for l >= 1, per position, from one sort of p/q.

    Only tokens with p > q (ratio > 1) ever count for l >= 1; the others get ratio 0.
    """

    def __init__(self, p: torch.Tensor, q: torch.Tensor) -> None:
        rho = (p / q).masked_fill_(p <= q, 0.0)  # [C, V]; q = 0 < p gives inf (always counts)
        if rho.shape[0] == 1:  # one position of a large vocabulary: sort only the tokens with p > q
            keep = rho[0].nonzero().squeeze(-1)
            keep = keep if keep.numel() else keep.new_zeros(1)  # p = q: one token of ratio 0, F = 0
            rho, p, q = rho[:, keep], p[:, keep], q[:, keep]
        if rho.device.type == "cpu":  # numpy's vectorized sort is several times faster on CPU
            order = torch.from_numpy(np.argsort(rho.numpy(), axis=-1))
        else:
            order = torch.argsort(rho, dim=-1)
        self.rho = rho.gather(-1, order)  # [C, V] ascending, for searchsorted
        down = order.flip(-1)
        # prefix sums from the largest ratio down, so the small residuals of large l keep their precision
        self.p = p.gather(-1, down).cumsum_(-1)  # [C, V]
        self.q = q.gather(-1, down).cumsum_(-1)

    def __call__(self, lam: torch.Tensor) -> torch.Tensor:
        """F at ``lam`` ``[C, S]`` (each row its position's values) -> ``[C, S]``."""
        above = self.rho.shape[-1] - torch.searchsorted(self.rho, lam.contiguous(), right=True)  # tokens with ratio > lam
        last = (above - 1).clamp_min(0)
        f = self.p.gather(-1, last) - lam * self.q.gather(-1, last)
        return torch.where(above > 0, f, torch.zeros_like(f)).clamp_min(0.0)


def _chain(
    p_x: torch.Tensor, q_x: torch.Tensor, left: torch.Tensor, residual: _Residual, lam: torch.Tensor, mass: torch.Tensor
) -> torch.Tensor:
    """P(one of the first k siblings accepted) ``[C, S, K]`` for orders whose i-th sibling has
    verifier and drafter probability ``p_x``, ``q_x`` and was drawn from ``left`` (the drafter
    mass not drawn before it), all ``[C, S, K]``, starting from the residual (p - lam q)^+ / mass
    (``lam``, ``mass`` ``[C, S]``; 0 and 1 at a fresh node). A sibling with q = 0 does not exist
    (fewer tokens than k have mass): it and those after it change nothing."""
    rejected = torch.ones_like(lam)  # P(every sibling so far rejected)
    out = torch.empty_like(p_x)
    for i in range(p_x.shape[-1]):
        px, qx, c = p_x[..., i], q_x[..., i], left[..., i]
        exists = qx > 0
        excess = (px - lam * qx).clamp_min(0.0)
        ratio = torch.where(excess > 0, excess * c / (mass.clamp_min(1e-300) * qx), torch.zeros_like(excess))  # r(x_i) / q'(x_i)
        rejected = rejected * (1.0 - torch.where(exists, ratio.clamp(max=1.0), torch.zeros_like(ratio)))
        out[..., i] = 1.0 - rejected
        if i + 1 < p_x.shape[-1]:
            lam_next = lam + mass / c.clamp_min(1e-300)
            mass_next = residual(lam_next)
            # r - q' <= 0 everywhere: that rejection had probability 0; keep r
            keep = ~exists | (mass_next <= 0)
            lam, mass = torch.where(keep, lam, lam_next), torch.where(keep, mass, mass_next)
    return out


class _Sampler:
    """Ordered draws without replacement from each row of ``q`` ``[C, V]``, ``samples`` orders a row.

    Inverse CDF: the ``head`` most likely tokens are kept apart and the rest (the tail) gets its
    own cumulative sum, so a draw deep in the tail stays precise when the head holds 1 - 1e-12;
    drawn tail tokens are skipped by shifting the uniform past their intervals. O(k log V) per
    order: no [samples, V] tensor.
    """

    def __init__(self, q: torch.Tensor, head: int, samples: int, generator: torch.Generator) -> None:
        n, v = q.shape
        self.v, self.generator = v, generator
        self.head_q, self.head_id = q.topk(min(head, v), dim=-1)  # [C, h]
        self.tail = q.scatter(-1, self.head_id, 0.0)  # [C, V]
        self.cum = self.tail.cumsum(-1)  # [C, V]: a drawn tail token d covers [cum[d] - tail[d], cum[d])
        self.tail_left = (self.tail > 0).sum(-1, keepdim=True).expand(n, samples).clone()  # [C, S] tail tokens not drawn
        self.drawn_head = torch.zeros(n, samples, self.head_id.shape[-1], dtype=torch.bool, device=q.device)
        self.drawn_tail = torch.full((n, samples, 0), v, dtype=torch.long, device=q.device)  # [C, S, i]; v: none
        self.tail_drawn = torch.zeros(n, samples, dtype=q.dtype, device=q.device)  # tail mass drawn

    def remove(self, x: torch.Tensor, ok: torch.Tensor) -> None:
        """Mark token ``x`` ``[C, S]`` drawn where ``ok``."""
        slot = self.head_id[:, None, :] == x[..., None]  # [C, S, h]
        in_head = slot.any(-1)
        self.drawn_head |= slot & ok[..., None]
        from_tail = ~in_head & ok
        self.drawn_tail = torch.cat([self.drawn_tail, torch.where(from_tail, x, self.v)[..., None]], -1)
        width = self.tail.gather(-1, x)
        self.tail_drawn = self.tail_drawn + torch.where(from_tail, width, torch.zeros_like(width))
        self.tail_left = self.tail_left - (from_tail & (width > 0)).long()

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next sibling of every order ``[C, S]`` and the drafter mass left before it (0: none)."""
        head_cum = (self.head_q[:, None, :] * ~self.drawn_head).cumsum(-1)  # [C, S, h]
        h = head_cum[..., -1]
        t = torch.where(self.tail_left > 0, (self.cum[:, -1:] - self.tail_drawn).clamp_min(0.0), torch.zeros_like(h))
        c = h + t
        u = torch.rand(h.shape, dtype=h.dtype, device=h.device, generator=self.generator) * c
        in_head = u < h
        j = (head_cum <= u[..., None]).sum(-1).clamp_max(head_cum.shape[-1] - 1)  # first slot whose cumulative mass passes u
        w = (u - h).clamp_min(0.0)
        for d in self.drawn_tail.sort(-1).values.unbind(-1):  # in index order: shift past each drawn interval
            real = d < self.v
            d = d.clamp_max(self.v - 1)
            end, width = self.cum.gather(-1, d), self.tail.gather(-1, d)
            w = torch.where(real & (w >= end - width), w + width, w)
        x_tail = torch.searchsorted(self.cum, w.contiguous(), right=True).clamp_max(self.v - 1)
        x = torch.where(in_head, self.head_id.gather(-1, j), x_tail)
        ok = c > 0
        if not in_head.all():  # rounding may land on a drawn or massless token (p ~ 1e-16): no sibling then
            bad = (self.tail.gather(-1, x_tail) <= 0) | (self.drawn_tail == x_tail[..., None]).any(-1)
            ok &= in_head | ~bad
        self.remove(x, ok)
        return x, torch.where(ok, c, torch.zeros_like(c))


def _rejected_first(over: torch.Tensor, samples: int, generator: torch.Generator) -> torch.Tensor:
    """A first sibling that the verifier rejects: ``[C, S]`` draws from ``over`` = (q - p)^+ ``[C, V]``
    normalized (its law is q times the rejection probability 1 - min(1, p/q))."""
    cum = over.cumsum(-1)  # [C, V]
    u = torch.rand(over.shape[0], samples, dtype=over.dtype, device=over.device, generator=generator) * cum[:, -1:]
    return torch.searchsorted(cum, u, right=True).clamp_max(over.shape[-1] - 1)


def sampled_siblings(
    q_logits: torch.Tensor,
    p_logits: torch.Tensor,
    sampling: SamplingConfig,
    k_max: int = SIBLINGS_K,
    samples: int = SIBLING_SAMPLES,
    seed: int = 0,
) -> torch.Tensor:
    """a_t(k) ``[m, k_max]`` under sampling: A(1) exact, A(k) = A(1) + TV * E[accepted after a rejection]."""
    m, v = p_logits.shape
    generator = torch.Generator(device=p_logits.device).manual_seed(seed)
    out = []
    chunk = max(1, (_CHUNK_ELEMENTS if p_logits.device.type == "cpu" else _CHUNK_ELEMENTS_GPU) // max(v, 1))
    for lo in range(0, m, chunk):
        # float64 and renormalized: the residuals after a rejection can be tiny differences
        p = warp(p_logits[lo : lo + chunk], sampling).double()
        q = warp(q_logits[lo : lo + chunk], sampling).double()
        p, q = p.div_(p.sum(-1, keepdim=True)), q.div_(q.sum(-1, keepdim=True))
        over = (q - p).clamp_min_(0.0)  # [C, V] (q - p)^+: where the first sibling is rejected
        a1 = (1.0 - over.sum(-1)).clamp(0.0, 1.0)  # [C] A(1) = sum min(p, q) = 1 - TV, as alpha
        first = _rejected_first(over, samples, generator)  # [C, S]
        sampler = _Sampler(q, k_max, samples, generator)
        sampler.remove(first, torch.ones_like(first, dtype=torch.bool))
        drawn = [sampler.draw() for _ in range(k_max - 1)]  # siblings 2..k_max
        residual = _Residual(p, q)
        lam = torch.ones(first.shape, dtype=p.dtype, device=p.device)  # after rejecting x_1: (p - q)^+ / TV
        if drawn:
            ids = torch.stack([x for x, _ in drawn], -1)  # [C, S, k_max - 1]
            left = torch.stack([c for _, c in drawn], -1)
            flat = ids.flatten(1)
            p_x, q_x = p.gather(-1, flat).view(ids.shape), q.gather(-1, flat).view(ids.shape)
            later = _chain(p_x, q_x, left, residual, lam, residual(lam)).mean(1)  # [C, k_max - 1]
        else:
            later = torch.zeros(p.shape[0], 0, dtype=p.dtype, device=p.device)
        out.append(torch.cat([a1[:, None], a1[:, None] + (1.0 - a1[:, None]) * later], -1).clamp(max=1.0))
    return torch.cat(out).cpu() if out else torch.zeros(0, k_max, dtype=torch.float64)


def sibling_acceptance(
    q_logits: torch.Tensor, p_logits: torch.Tensor, sampling: SamplingConfig, k_max: int = SIBLINGS_K, seed: int = 0
) -> torch.Tensor:
    """a_t(k) ``[m, k_max]`` of a drafter (q) by a verifier (p), both ``[m, V]`` logits."""
    if sampling.greedy:
        return greedy_siblings(q_logits, p_logits, k_max)
    return sampled_siblings(q_logits, p_logits, sampling, k_max, seed=seed)


def sibling_sums(a: torch.Tensor) -> tuple[list[float], int]:
    """``(siblings_sum, count)`` from a_t(k) ``[m, K]``: sum over positions of a_t(k), and m.

    >>> sibling_sums(torch.tensor([[0.0, 1.0], [1.0, 1.0]]))
    ([1.0, 2.0], 2)
    """
    return [float(x) for x in a.double().sum(0)], int(a.shape[0])
