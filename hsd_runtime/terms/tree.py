"""A drafted tree: tokens and parents in breadth-first order (torch-free; the torch engine builds
the attention mask that verifies it in one pass).

Nodes are kept in breadth-first order: every parent comes before its children, and the children
of one node are contiguous, in the order they were drawn (the order RRS visits them). The root is
the last token of the context; it is not a node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # drafted distributions are tensors; the record itself needs no torch
    import torch

__all__ = ["DraftTree"]


@dataclass
class DraftTree:
    """A drafted tree in breadth-first order.

    ``tokens[i]`` is node i's token, ``parents[i]`` its parent's index (-1: a child of the root),
    ``depths[i]`` its depth (1 for the root's children). ``probs`` (sampling only) maps a parent
    (-1 for the root) to the drafter's distribution ``[V]`` its children were drawn from; leaves
    have none.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    probs: dict[int, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int) -> int:
        """Append a child of ``parent`` (-1: the root); return its index."""
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        """Indices of ``node``'s children (-1: the root's), in the order they were drawn."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def at_depth(self, depth: int) -> list[int]:
        """Indices of the nodes at ``depth`` (contiguous in breadth-first order)."""
        return [i for i, d in enumerate(self.depths) if d == depth]

    def path(self, node: int) -> list[int]:
        """Indices from the root's child down to ``node`` (empty for the root, -1)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def follow(self, tokens: list[int]) -> list[int]:
        """The longest chain of nodes from the root spelling a prefix of ``tokens``.

        >>> t = DraftTree(); a = t.add(5, -1); b = t.add(6, -1); c = t.add(7, b)
        >>> t.follow([6, 7, 9]), t.follow([8])
        ([1, 2], [])
        """
        out: list[int] = []
        parent = -1
        for token in tokens:
            nxt = next((i for i in self.children(parent) if self.tokens[i] == token), None)
            if nxt is None:
                break
            out.append(nxt)
            parent = nxt
        return out

    @property
    def depth(self) -> int:
        """The deepest node's depth (0 for an empty tree)."""
        return max(self.depths, default=0)
