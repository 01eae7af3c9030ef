"""llama-server's ``ngram-simple`` lookup, as it runs (read from llama.cpp's
``common_ngram_simple_draft``, tree of 2026-10-01): the last n tokens must recur exactly, the
latest occurrence is copied, nothing is drafted unless at least n tokens follow it and the text
holds more than n + m + 1 tokens. It keeps no state between rounds.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["server_lookup"]


def server_lookup(tokens: list[int], n: int, count: int, gate: int | None = None) -> list[int]:
    """What llama-server's ``ngram-simple`` (size-n ``n``, size-m ``count``) drafts after ``tokens``
    (the text so far, its last token the one just sampled): up to ``count`` tokens that followed
    the latest earlier occurrence of the last ``n`` tokens; nothing when fewer than ``n`` of them
    would be copied, or when the text before the last token holds no more than n + ``gate`` + 1
    tokens (``gate``: the size-m of that check, ``count`` unless given).

    >>> server_lookup([5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 1, 2], n=2, count=3)  # the latest "1 2" is followed by 3 4 7
    [3, 4, 7]
    >>> server_lookup([5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 1, 2], n=2, count=1)  # fewer than n would be copied
    []
    >>> server_lookup([1, 2, 3, 1, 2], n=2, count=2)  # a text too short for the check
    []
    """
    cur = len(tokens) - 1  # llama.cpp's history excludes the token just sampled
    if cur <= n + (count if gate is None else gate) + 1:
        return []
    seq = np.asarray(tokens, dtype=np.int64)
    # windows start at j = 1 .. cur - n - 1 (position 0 is llama.cpp's "no match"), so a match
    # ends before the current suffix begins and is followed by at least one token
    windows = sliding_window_view(seq[1 : cur - 1], n)
    hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
    if not len(hits):
        return []
    start = int(hits[-1]) + 1 + n  # the token after the latest match
    copy = min(count, cur - start)
    return seq[start : start + copy].tolist() if copy >= n else []
