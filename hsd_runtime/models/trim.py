"""Trimmed output layers: a drafter that scores only N tokens of its vocabulary.

The output layer of a small model with a large vocabulary is most of its per-token work (Qwen2.5's
151,936 x 896 head is 28 % of the 0.5B's pass and most of a shallow slice of it). A trimmed head
(FR-Spec, Zhao et al. 2025) keeps the rows of N tokens only; the logits of every other token are
``-inf``, so the drafter's q is zero there and it never proposes them. Verification is untouched,
so a chain with a trimmed drafter is exactly as exact as one without: only acceptance can drop, by
the verifier's mass on the tokens left out.

Which N: the first N of a ranking, most frequent first. ``vocab=N`` ranks by token id: the
byte-level BPE tokenizers of the packaged families number their tokens in merge order, and
earlier merges joined more frequent pairs of their training text, so low ids are frequent ones.
A ranking counted on the workload's own text keeps fewer rare tokens for the same N:
``vocab=FILE`` reads one (a JSON list of token ids, most frequent first, as ``hsd-plan vocab``
writes). The end-of-sequence tokens are always kept, so a trimmed drafter can still propose the
end of an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from ..terms.errors import ModelSpecError
from ..terms.json_text import JSONTextError, parse_json
from ..terms.limits import MAX_RANKING_BYTES
from .files import read_input

__all__ = ["TrimmedHead", "column_of", "kept_tokens", "read_ranking"]


class TrimmedHead(nn.Module):
    """An output layer that scores ``keep`` only: ``[..., d]`` -> ``[..., width]``, ``-inf`` elsewhere.

    Args:
        head: the full output layer (``nn.Linear``, a packed or an int8 one); its rows for ``keep``
            are copied out, dense, in its own dtype (fp32 for an int8 head).
        keep: ``[N]`` token ids to score, distinct, each below ``width``.
        width: columns of the logits returned (the full head's rows, so every caller keeps its
            vocabulary and the chain's shared width is unchanged).
    """

    def __init__(self, head: nn.Module, keep: torch.Tensor, width: int) -> None:
        super().__init__()
        weight = head.weight
        assert isinstance(weight, torch.Tensor)  # a property on packed and int8 heads, a Parameter on nn.Linear
        weight = weight.dequantize() if weight.is_quantized else weight.detach()  # [V, d]
        bias = getattr(head, "bias", None)
        keep = keep.to(weight.device)
        self.in_features = weight.shape[1]
        self.out_features = width  # what head_rows reads: the logits keep their full width
        rows = nn.Linear(self.in_features, len(keep), bias=bias is not None, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            rows.weight.copy_(weight[keep])  # [N, d]
            if bias is not None:
                rows.bias.copy_(bias.detach()[keep])
        rows.requires_grad_(False)  # a copy of a head: nothing trains it (a trainer reads through it, frozen)
        self.rows: nn.Module = rows  # the kept rows; packed or int8 where the full head was (loading.trimmed_model)
        self.keep: torch.Tensor
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., d]`` -> logits ``[..., width]``: N scored columns, ``-inf`` in the others."""
        scored = self.rows(x)  # [..., N]
        out = scored.new_full((*scored.shape[:-1], self.out_features), float("-inf"))
        return out.index_copy_(-1, self.keep, scored)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, kept={len(self.keep)}, out_features={self.out_features}"


def column_of(keep: torch.Tensor, width: int, missing: int) -> torch.Tensor:
    """``[width]`` (int64, on ``keep``'s device): each token id's column among the kept ``keep``
    ``[N]``, ``missing`` for a token left out; maps token ids into a trimmed head's N logits."""
    out = torch.full((width,), missing, dtype=torch.long, device=keep.device)
    out[keep] = torch.arange(len(keep), device=keep.device)
    return out


def read_ranking(path: Path) -> tuple[list[int], str | None]:
    """The token ids of a ranking file (a JSON list of ints, most frequent first), checked, and
    the tokenizer fingerprint it was counted with (None for a bare list)."""
    text = read_input(path, "vocab ranking", MAX_RANKING_BYTES)
    try:
        data = parse_json(text)
    except JSONTextError as exc:
        raise ModelSpecError(f"vocab ranking {path} {exc}; write a list of token ids, most frequent first") from None
    fingerprint = None
    if isinstance(data, dict):  # the file hsd-plan vocab writes: {"tokens": [...], "fingerprint": ..., ...}
        fingerprint = data.get("fingerprint") if isinstance(data.get("fingerprint"), str) else None
        data = data.get("tokens")
    if not isinstance(data, list) or not data or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in data):
        raise ModelSpecError(f"vocab ranking {path} must hold a non-empty list of token ids (integers >= 0)")
    if len(set(data)) != len(data):
        raise ModelSpecError(f"vocab ranking {path} names a token twice")
    return data, fingerprint


def kept_tokens(ranking: Sequence[int], n: int, eos_token_ids: Sequence[int], width: int) -> torch.Tensor:
    """``[n]`` token ids: the end-of-sequence ids, then the ranking's first ids not among them.

    Raises ModelSpecError when ``n`` is not below ``width`` (that keeps everything: not a trim)
    or the ranking names a token the head does not have or holds fewer than ``n`` tokens.
    """
    if not 1 <= n < width:
        raise ModelSpecError(
            f"vocab={n} keeps {'every' if n >= width else 'no'} token of a {width:,}-token output layer; use 1..{width - 1:,}"
        )
    if max(ranking) >= width:
        raise ModelSpecError(f"the vocab ranking names token {max(ranking):,}; the model's output layer has {width:,} rows")
    keep = list(dict.fromkeys([t for t in eos_token_ids if t < width] + list(ranking)))[:n]
    if len(keep) < n:
        raise ModelSpecError(f"vocab={n}: the ranking holds only {len(keep):,} tokens")
    return torch.tensor(keep, dtype=torch.long)
