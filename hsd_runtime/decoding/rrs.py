"""Recursive rejection sampling (RRS, Jeon et al. 2024): verifying a draft tree exactly.

At one node the drafter's children ``x_1..x_m`` were drawn in order without replacement from its
distribution ``q`` (the Gumbel-top-m of ``log q``). With ``r = p`` (the verifier's distribution)
and ``q' = q``, for i = 1..m: accept ``x_i`` when U < r(x_i) / q'(x_i) and descend into it;
otherwise ``r <- norm(max(r - q', 0))`` and ``q' <- norm(q' without x_i)``. When every child is
rejected, emit y ~ r and stop. A rejection happens only where r(x_i) < q'(x_i), so the new residual
gives x_i no mass and removing it from q' loses nothing; each step emits exactly r, so the node
emits exactly p. A deterministic drafter (one-hot q) proposes distinct tokens: q' is one-hot on
``x_i`` at step i, and the residual is r without x_i.

Greedy decoding accepts the child equal to the verifier's argmax, if any, and emits the argmax
otherwise, so the output is the verifier's greedy output token for token.
"""

from __future__ import annotations

import torch

from ..terms.tree import DraftTree
from .sampling import draw
from .verify import residual

__all__ = ["draw_without_replacement", "rrs_node", "verify_tree_greedy", "verify_tree_sample"]


def draw_without_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """An ordered sample of up to ``k`` distinct tokens from ``q`` ``[V]`` (Gumbel-top-k of log q).

    Fewer than ``k`` when q has fewer tokens of nonzero mass.
    """
    u = torch.rand(q.shape, generator=generator, device=q.device).clamp_min(1e-20)
    scores = torch.log(q) - torch.log(-torch.log(u))  # log q + Gumbel(0, 1); -inf where q = 0
    k = min(k, int((q > 0).sum()))
    return torch.topk(scores, k).indices.tolist() if k else []


def _remove(q: torch.Tensor, x: int) -> torch.Tensor:
    """``q`` without token ``x``, renormalized: the law of the next draw without replacement."""
    q = q.clone()
    q[x] = 0.0
    total = q.sum()
    return q / total if float(total) > 0 else q


def rrs_node(children: list[int], q: torch.Tensor | None, p: torch.Tensor, generator: torch.Generator) -> tuple[int, int]:
    """RRS at one node; return ``(i, token)`` with i the accepted child's index, or -1 and a residual sample.

    Args:
        children: the drafted tokens in the order they were drawn without replacement from ``q``.
        q: the drafter's distribution ``[V]``, or None for a deterministic drafter (distinct tokens,
            each one-hot in turn).
        p: the verifier's distribution ``[V]``.
        generator: the source of randomness.
    """
    r = p
    for i, x in enumerate(children):
        qx = 1.0 if q is None else float(q[x])
        u = float(torch.rand((), generator=generator, device=p.device))
        if u * qx < float(r[x]):  # U < r(x) / q'(x), written without dividing by q'
            return i, x
        if q is None:
            r = residual(r, torch.nn.functional.one_hot(torch.tensor(x, device=r.device), r.shape[-1]).to(r.dtype))  # r without x
        else:
            r = residual(r, q)  # r itself when r == q' up to rounding: the rejection had probability ~0
            q = _remove(q, x)
    return -1, draw(r, generator)


def verify_tree_greedy(tree: DraftTree, argmax: list[int]) -> tuple[list[int], int]:
    """Greedy verification: ``(accepted path, next token)``.

    ``argmax[0]`` is the verifier's choice after the root, ``argmax[1 + i]`` after node i.
    """
    path: list[int] = []
    node = -1
    while True:
        want = argmax[node + 1]
        nxt = next((c for c in tree.children(node) if tree.tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        node = nxt


def verify_tree_sample(tree: DraftTree, p: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
    """RRS from the root down: ``(accepted path, next token)``; the tokens follow p exactly.

    ``p`` is ``[1 + N, V]``: the verifier's distribution after the root (row 0) and after every
    node (row 1 + i). ``tree.probs[node]`` is the drafter's q there (absent: deterministic drafter).
    """
    path: list[int] = []
    node = -1
    while True:
        kids = tree.children(node)
        if not kids:  # a leaf was accepted: the bonus token comes from p after it
            return path, draw(p[node + 1], generator)
        i, token = rrs_node([tree.tokens[c] for c in kids], tree.probs.get(node), p[node + 1], generator)
        if i < 0:
            return path, token
        node = kids[i]
        path.append(node)
