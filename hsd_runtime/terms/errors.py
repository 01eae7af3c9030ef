"""The exceptions a user can act on.

Every message is one line that says what went wrong and what to do about it; the CLI prints
``Error: <message>`` and exits non-zero, never a traceback.
"""

from __future__ import annotations

__all__ = [
    "ChainError",
    "HSDError",
    "ModelNotFoundError",
    "ModelOutputError",
    "ModelSpecError",
    "PackageMissingError",
    "PathError",
    "PromptError",
    "TokenizerMismatchError",
    "first_line",
]


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty), for
    turning a library's multi-line error into the one line a user is shown."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class HSDError(Exception):
    """Base class of every error hsd-plan reports to a user."""


class ModelSpecError(HSDError):
    """A model spec string is malformed or has an option out of range."""


class ModelNotFoundError(HSDError):
    """A model spec names no packaged alias, directory or file that exists."""


class ModelOutputError(HSDError):
    """A model computed probabilities that are not finite (NaN or infinite weights)."""


class PackageMissingError(HSDError):
    """A packaged alias whose PyPI package is not installed."""


class TokenizerMismatchError(HSDError):
    """Models of one hierarchy do not share a tokenizer."""


class ChainError(HSDError):
    """A chain and its widths do not describe a valid hierarchy."""


class PathError(HSDError):
    """A path the user gave cannot be read or written as asked (a FIFO, a device, a folder, too
    large, a symbolic link loop, or an existing file that would be replaced without --force)."""


class PromptError(HSDError):
    """A prompt is empty or cannot be read."""
