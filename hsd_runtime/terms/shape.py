"""Tree shapes (``3x2x1``) and widths: torch-free, so the planner can read and rank them.

A tree shape with constant branching ``b = (b_1, ..., b_L)`` (RSD-C, Jeon et al. 2024) drafts
``b_1`` children under the root, ``b_2`` under each of those, and so on:
``N = sum_l prod_{j<=l} b_j`` nodes. The root is the last committed token; depth 1 holds the
candidates for the next position. A chain of width T is the shape ``1x1x...x1`` (T ones). A tree
one level deep is written with a trailing ``x``: ``4x`` is 4 candidates for the next token (``4``
alone is a chain of 4 tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ChainError
from .limits import MAX_TREE_NODES, MAX_WIDTH

__all__ = ["TreeShape", "Width", "format_width", "parse_width", "positions_needed"]


@dataclass(frozen=True)
class TreeShape:
    """Constant branching per depth: ``branching[l]`` children under every node at depth ``l``."""

    branching: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.branching or any(b < 1 for b in self.branching):
            raise ChainError(f"a tree shape needs branching factors >= 1, got {self}")
        if self.depth > MAX_WIDTH:
            raise ChainError(f"a tree deeper than {MAX_WIDTH} levels is not supported, got {self.depth}")
        if self.nodes > MAX_TREE_NODES:
            raise ChainError(f"tree {self} has {self.nodes} nodes; at most {MAX_TREE_NODES} are verified in one pass")

    @property
    def depth(self) -> int:
        """L: tokens on every root-to-leaf path."""
        return len(self.branching)

    @property
    def frontiers(self) -> list[int]:
        """Nodes at each depth 0..L (depth 0 is the root alone): ``[1, b_1, b_1 b_2, ...]``."""
        out = [1]
        for b in self.branching:
            out.append(out[-1] * b)
        return out

    @property
    def nodes(self) -> int:
        """N: drafted nodes, the root excluded (what the verifier checks in one pass)."""
        return sum(self.frontiers[1:])

    def __str__(self) -> str:
        text = "x".join(map(str, self.branching))
        return text + "x" if self.depth == 1 else text  # "4x": a tree, never the chain width "4"


Width = int | TreeShape  # what one level hands upward: T tokens, or (level 0 only) a tree


def parse_width(text: str) -> Width:
    """``"6"`` -> 6, ``"3x2x1"`` -> TreeShape((3, 2, 1)), ``"4x"`` -> TreeShape((4,)).

    >>> parse_width("4"), str(parse_width("3x2x1")), parse_width("2x2").nodes, str(parse_width("4x"))
    (4, '3x2x1', 6, '4x')
    """
    text = text.strip().lower()
    parts = text.split("x")
    tree = len(parts) > 1
    if tree and parts[-1] == "" and len(parts) == 2:
        parts = parts[:-1]  # "4x": a tree one level deep
    if not text or not all(p.isascii() and p.isdigit() for p in parts):
        raise ChainError(f"width {text!r} is neither a number nor a tree shape like 3x2x1 (or 4x: 4 candidates, one level)")
    values = tuple(int(p) for p in parts)
    if not tree:
        return values[0]
    if any(v < 1 or v > MAX_WIDTH for v in values):
        raise ChainError(f"tree shape {text!r}: every branching factor must be in 1..{MAX_WIDTH}")
    return TreeShape(values)


def format_width(width: Width) -> str:
    """The text :func:`parse_width` reads back."""
    return str(width)


def positions_needed(prompt_len: int, max_new_tokens: int, widths: Sequence[Width], tree_nodes: bool = False) -> int:
    """The positions a generation can reach: the prompt, the new tokens, and twice the drafts that
    run ahead of the committed text (a tree by its depth; with ``tree_nodes`` by its nodes, the
    cells an engine that keeps every node in its cache needs), plus one.

    >>> positions_needed(10, 20, [4, 2]), positions_needed(10, 20, [TreeShape((3, 2))]), positions_needed(10, 20, [TreeShape((3, 2))], True)
    (43, 35, 49)
    """
    ahead = sum((w.nodes if tree_nodes else w.depth) if isinstance(w, TreeShape) else w for w in widths)
    return prompt_len + max_new_tokens + 2 * ahead + 1
