"""Block-draft heads: extra output heads on a model's own last hidden state (blockwise parallel
decoding, Stern et al. 2018; Kim et al. 2024).

Head 1 is the model itself: its output layer on the final (normalized) hidden state ``h_t``
predicts token t + 1. Head i >= 2 predicts token t + i from the same ``h_t``: a residual
feed-forward block ``h + W2 silu(W1 h)`` followed by the model's own, frozen output layer (and
soft-capping, where the model has one). ``W2`` starts at zero, so an untrained head i repeats
head 1's prediction. A heads directory holds the blocks (``heads.safetensors``) and a card
(``heads.json``) naming the host they were trained on; it is loaded only under that host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from ..terms.errors import ModelSpecError
from ..terms.limits import MAX_HEADS
from .trained import load_weights, read_card_file, save_trained

__all__ = ["HEADS_CARD", "HEADS_FILE", "BlockHeads", "HeadsCard", "load_heads", "read_card", "save_heads"]

HEADS_CARD = "heads.json"
HEADS_FILE = "heads.safetensors"
FORMAT = 1  # of a heads directory; another format is refused
_REMEDY = "hsd-plan heads train"


class HeadsCard(BaseModel):
    """What a heads directory was trained for, and how well it did (``training`` and
    ``acceptance`` are for people and the planner; the runtime reads the others)."""

    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    host: str  # the spec of the model the heads read the hidden state of
    hidden_size: int
    heads: int  # H: head 1 (the host's own) and H - 1 trained blocks
    inner: int  # width of each block's hidden layer
    logits_width: int
    vocab: int = 0  # N when the heads were trained through the host's output layer trimmed to N tokens (0: the full layer)
    training: dict[str, Any] = {}
    acceptance: dict[str, Any] = {}


class _Block(nn.Module):
    """``h + W2 silu(W1 h)``: ``[..., d]`` -> ``[..., d]``; W2 zero at init (the block is the identity)."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(nn.functional.silu(self.up(h)))


class BlockHeads(nn.Module):
    """Heads 2..H of one host: ``[N, d]`` hidden states -> ``[N, H - 1, d]`` inputs of its output layer.

    Args:
        hidden_size: d, the host's hidden size.
        heads: H, counting head 1 (the host's own next-token head), 2..MAX_HEADS.
        inner: the width of each block's hidden layer (default d).
    """

    def __init__(self, hidden_size: int, heads: int, inner: int | None = None) -> None:
        super().__init__()
        if not 2 <= heads <= MAX_HEADS:
            raise ModelSpecError(f"heads must be 2..{MAX_HEADS} (head 1 is the model's own), got {heads}")
        self.hidden_size, self.heads, self.inner = hidden_size, heads, inner or hidden_size
        self.blocks = nn.ModuleList([_Block(hidden_size, self.inner) for _ in range(heads - 1)])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.stack([block(hidden) for block in self.blocks], dim=-2)  # [N, H - 1, d]


def save_heads(folder: Path, heads: BlockHeads, card: HeadsCard) -> None:
    """Write ``heads`` and ``card`` into ``folder`` (created), each file replaced atomically."""
    save_trained(folder, HEADS_FILE, heads, HEADS_CARD, card)


def read_card(folder: Path) -> HeadsCard:
    """The card of a heads directory; a missing, unreadable or foreign one is one line."""
    return read_card_file(folder, HEADS_CARD, HeadsCard, FORMAT, "a heads directory", _REMEDY)


def load_heads(folder: Path, device: torch.device | str = "cpu") -> tuple[BlockHeads, HeadsCard]:
    """The heads of ``folder`` (fp32, eval mode, on ``device``) and their card; one line when damaged."""
    card = read_card(folder)
    heads = BlockHeads(card.hidden_size, card.heads, card.inner)
    load_weights(folder / HEADS_FILE, heads, _REMEDY)
    return heads.to(device).eval().requires_grad_(False), card
