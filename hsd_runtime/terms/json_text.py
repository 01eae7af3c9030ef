"""JSON read from a user's files, parsed within bounds: the one reader of every such file.

Python's parser turns any JSON into objects, but some valid JSON breaks what comes after it: an
integer of more than 4,300 digits raises a ``ValueError`` of its own (Python bounds the
conversion), a float literal like ``1e999`` becomes infinity, ``NaN`` and ``Infinity`` (not JSON
at all) are accepted, and a deep nesting raises ``RecursionError``. :func:`parse_json` refuses
each of these, and malformed text, with one :class:`JSONTextError` whose message says what the
text holds; the caller names the file. No file hsd-plan reads holds a number of more than
:data:`MAX_JSON_NUMBER_CHARS` characters (the longest seen, a tokenizer's "no limit" length of
10**30, has 31).
"""

from __future__ import annotations

import json
import math
from typing import Any

from .limits import MAX_JSON_NUMBER_CHARS

__all__ = ["JSONTextError", "parse_json"]


class JSONTextError(ValueError):
    """Text that :func:`parse_json` refuses; the message completes a sentence that starts with
    the file's name (``prompts.json`` + ``is not JSON (...)``)."""


def _number(text: str) -> None:
    if len(text) > MAX_JSON_NUMBER_CHARS:
        raise JSONTextError(f"holds a number written with {len(text):,} characters; numbers here have at most {MAX_JSON_NUMBER_CHARS}")


def _int(text: str) -> int:
    _number(text)
    return int(text)


def _float(text: str) -> float:
    _number(text)
    value = float(text)
    if not math.isfinite(value):
        raise JSONTextError(f"holds the number {text}, beyond the range of a floating-point number")
    return value


def _constant(name: str) -> float:
    raise JSONTextError(f"holds {name}, which is no JSON number")


def parse_json(data: str | bytes) -> Any:
    """The JSON value of ``data`` (bytes are read as UTF-8, -16 or -32, as :func:`json.loads` does).

    >>> parse_json('{"tokens": [3, 1.5e2]}')
    {'tokens': [3, 150.0]}
    >>> for text in ("[1, 2", "9" * 5000, "[NaN]", "1e999", "[" * 100_000):
    ...     try:
    ...         parse_json(text)
    ...     except JSONTextError as exc:
    ...         print(exc)
    is not JSON (Expecting ',' delimiter at column 6)
    holds a number written with 5,000 characters; numbers here have at most 100
    holds NaN, which is no JSON number
    holds the number 1e999, beyond the range of a floating-point number
    is nested too deeply to be read
    """
    try:
        return json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except JSONTextError:
        raise
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno}, column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise JSONTextError(f"is not JSON ({exc.msg} at {at})") from None
    except UnicodeDecodeError:
        raise JSONTextError("is not UTF-8 text, so not JSON") from None
    except RecursionError:
        raise JSONTextError("is nested too deeply to be read") from None
