"""Option values that are lists: widths, integers, model specs, each refused with one line naming the option."""

from __future__ import annotations

import re

from hsd_runtime.terms.limits import MAX_WIDTH
from hsd_runtime.terms.shape import Width, parse_width

from ..errors import ChainError
from ..limits import MAX_LENGTH

__all__ = ["int_list", "model_list", "parse_widths", "split_specs"]


def parse_widths(text: str | None) -> list[Width]:
    """``"4,2"`` -> ``[4, 2]``, ``"3x2x1,6"`` -> ``[TreeShape((3, 2, 1)), 6]``; empty or None -> ``[]``.

    Each width is at most MAX_WIDTH; a tree shape (level 0 only) at most MAX_TREE_NODES nodes.
    """
    if not text:
        return []
    try:
        widths = [parse_width(part) for part in text.split(",")]
    except ChainError as exc:
        raise ChainError(f"--widths {text}: {exc}") from None
    if any(isinstance(w, int) and w < 1 for w in widths):
        raise ChainError(f"--widths {text}: a width is at least 1")
    if any(isinstance(w, int) and w > MAX_WIDTH for w in widths):
        raise ChainError(f"--widths {text}: a width is at most {MAX_WIDTH} (a verifier accepts far fewer tokens in a row)")
    return widths


def int_list(text: str, option: str, most: int = MAX_LENGTH) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``, every value from 1 to ``most``."""
    parts = text.split(",")
    if not all(re.fullmatch(r"\s*-?[0-9]{1,30}\s*", p) for p in parts):  # ASCII digits only: int() takes '٣' too
        raise ChainError(f"{option} {text[:80]!r} is not a comma-separated list of integers")
    values = [int(p) for p in parts]
    if min(values) < 1 or max(values) > most:
        raise ChainError(f"{option} {text[:80]}: every value is an integer from 1 to {most}")
    return values


def model_list(text: str, option: str) -> list[str]:
    """The model specs of a comma-separated ``option`` (empty parts dropped); refuse a list of none."""
    specs = list(split_specs(text))
    if not specs:
        raise ChainError(f"{option} {text!r} names no model; write a comma-separated list such as ngram,smollm2-135m:layers=8,smollm2-135m")
    return specs


def split_specs(text: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``, empty parts dropped."""
    return tuple(x for x in text.split(",") if x)
