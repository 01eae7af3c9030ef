"""A level-0 drafter that ends its draft where it is unsure: llama-server's ``draft-simple`` rule.

llama-server drafts with a sampler that keeps the drafter's ten likeliest tokens (top-k 10, no
temperature) and stops before the first token whose probability among those ten is below
``--spec-draft-p-min``, and drops a draft shorter than ``--spec-draft-n-min`` (the round then
verifies none). A spec's ``pmin=P`` (and ``nmin=N``) asks for the same rule on any engine:
:func:`top_share` is that probability, and a :class:`Confident` member carries P and N to the
hierarchy, whose level-0 :class:`~hsd_runtime.decoding.drafters.ModelDrafter` applies them.

The rule reads the drafter's own logits only, before the token is verified, so the verification
that follows is the same as for a draft cut at the width: the output keeps the target's
distribution (greedy: its own tokens). A draft ended at position L costs min(L + 1, width) passes
of the drafter: the pass that found the unsure token was run, whether the draft is kept or dropped.
A dropped draft's tokens stay in the drafter's cache: where its first token is the one its round
commits, the next round's first step is served from there (one pass fewer, which the latency
model does not count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["TOP_K", "Confident", "top_share"]

TOP_K = 10  # llama-server's draft sampler keeps this many tokens


@dataclass(frozen=True)
class Confident:
    """A model at level 0 that ends each draft before a token whose :func:`top_share` is below
    ``p_min``, and drops a draft that ended shorter than ``n_min`` tokens."""

    model: Any
    p_min: float
    n_min: int = 0


def top_share(logits: torch.Tensor) -> torch.Tensor:
    """The likeliest token's probability among the ``TOP_K`` likeliest: ``[..., V]`` -> ``[...]``
    (fp32), softmax at temperature 1 over the top ``TOP_K`` logits, as llama-server's draft sampler
    computes it.

    >>> round(float(top_share(torch.tensor([2.0, 0.0, 0.0]))), 4)  # e^2 / (e^2 + 2)
    0.787
    """
    top = torch.topk(logits.float(), min(TOP_K, logits.shape[-1]), dim=-1).values  # [..., 10], descending
    return torch.softmax(top, dim=-1)[..., 0]
