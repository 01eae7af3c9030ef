"""A plan: a hierarchy with its predicted latency, and how it is written down.

:class:`Plan` is what every solve, prediction and export speaks of: drafters smallest first, then
the target, one width per drafter (the first may be a draft tree). :func:`format_chain` is its
one-line label; :func:`widths_to_json` and :func:`widths_from_json` its widths as stored and
printed as JSON (a number stays a number, a tree is its text ``"3x2x1"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hsd_runtime.terms.shape import Width, format_width, parse_width

from .latency import Prediction

__all__ = ["Plan", "format_chain", "widths_from_json", "widths_to_json"]


def format_chain(chain: Sequence[str], widths: Sequence[Width]) -> str:
    """``ngram[4] -> m:layers=8[2] -> m``: each drafter with its width (or tree shape), then the target.

    >>> from hsd_runtime.terms.shape import TreeShape
    >>> format_chain(["ngram", "t"], [4]), format_chain(["m", "t"], [TreeShape((3, 2, 1))])
    ('ngram[4] -> t', 'm[3x2x1] -> t')
    """
    return " -> ".join([f"{m}[{w}]" for m, w in zip(chain, widths)] + [chain[-1]])


@dataclass(frozen=True)
class Plan:
    """A hierarchy: drafters smallest first, then the target, with one width per drafter
    (the first may be a tree shape)."""

    chain: tuple[str, ...]
    widths: tuple[Width, ...]
    prediction: Prediction

    @property
    def depth(self) -> int:
        """The number of drafter levels."""
        return len(self.widths)

    @property
    def label(self) -> str:
        """The plan as one line, e.g. ``ngram[4] -> m`` or ``d[3x2x1] -> m``."""
        return format_chain(self.chain, self.widths)

    def to_dict(self) -> dict:
        """The plan as every JSON report and stored row writes it (a tree as ``"3x2x1"``).

        >>> Plan(("d", "t"), (4,), Prediction(5.0, 2.5, 3.0)).to_dict()["widths"]
        [4]
        """
        p = self.prediction
        return {
            "chain": list(self.chain),
            "widths": widths_to_json(self.widths),
            "predicted_ms_per_token": p.ms_per_token,
            "predicted_mean_accepted_length": p.mean_accepted_length,
            "predicted_speedup": p.speedup,
        }


def widths_to_json(widths: Sequence[Width]) -> list[int | str]:
    """Widths as stored and printed: numbers stay numbers, a tree becomes ``"3x2x1"``.

    >>> from hsd_runtime.terms.shape import TreeShape
    >>> widths_to_json([TreeShape((3, 2, 1)), 4])
    ['3x2x1', 4]
    """
    return [w if isinstance(w, int) else format_width(w) for w in widths]


def widths_from_json(values: Sequence[int | str]) -> list[Width]:
    """The widths :func:`widths_to_json` wrote, trees as TreeShape; a ChainError names one that
    cannot be read.

    >>> widths_from_json(["3x2x1", 4])
    [TreeShape(branching=(3, 2, 1)), 4]
    """
    return [v if isinstance(v, int) else parse_width(v) for v in values]
