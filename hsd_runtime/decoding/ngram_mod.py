"""llama-server's ``ngram-mod`` lookup, as it runs: a hashed table of n-grams walked token by token.

Read from llama.cpp's ``common/ngram-mod.cpp`` and ``common_speculative_impl_ngram_mod`` (tree of
2026-10-01), whose rules this module follows one for one:

- The table has 4,194,304 slots. An n-gram (``n``: ``--spec-ngram-mod-n-match``, 24 by default)
  hashes to ``h = h * 6364136223846793005 + token`` over its tokens (mod 2^64), then mod the
  table's size; its slot holds the token that followed it, the latest written winning. Two
  n-grams of one slot collide, as they do in the server.
- ``begin`` (a new request) adds every n-gram of the prompt that has a token after it. While
  drafting, the n-grams of the text since are added in chunks: only once more than 32 of them wait,
  so the newest text's n-grams are missing from the table until then.
- A draft starts from the last n - 1 tokens of the text and the token just sampled, and walks:
  look the last n tokens up, append what the slot holds, repeat, up to n_max tokens
  (``--spec-ngram-mod-n-max``, a plan's width k). An empty slot ends the walk; a walk ended so
  before n_min tokens (``--spec-ngram-mod-n-min``) drafts nothing. A walk that reaches n_max is
  kept whatever n_min is.
- After a round, a draft that had under a quarter of its tokens accepted counts a low round; five
  in a row empty the table (the next draft adds the whole text again).

The server keeps one table for all requests and sequences, emptied only by that low-acceptance
rule or once a quarter of its slots is used; here each generation row has its own, so what a row
drafts depends on its own text and rounds only (as the profiler measures it). On a workload whose requests
repeat each other's n-grams, the server drafts more than this predicts.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MOD_SLOTS", "ModTable"]

MOD_SLOTS = 4 * 1024 * 1024  # the server's table: 4M slots of one token id each
_MULT = 6364136223846793005
_MASK = MOD_SLOTS - 1  # MOD_SLOTS divides 2^64, so h mod 2^64 mod MOD_SLOTS is h's low 22 bits
_EMPTY = -1
_REFRESH = 32  # new n-grams wait until more than this many tokens have come since the last add
_LOW_SHARE = 0.25  # a round accepting under this share of its draft is a low round
_LOW_STREAK = 5  # low rounds in a row that empty the table
_FULL = 0.25  # the share of slots in use above which a new request empties the table


class ModTable:
    """One sequence's state of llama-server's ``ngram-mod``: the table of n-gram slots, how far the
    text's n-grams were added, and the streak of low rounds.

    >>> t = ModTable(2)
    >>> t.begin([7, 8, 9, 5, 6])  # the table: "7 8" -> 9, "8 9" -> 5, "9 5" -> 6
    >>> t.draft([7, 8, 9, 5, 6, 0, 7], 8, n_max=4)  # from "7 8": 9, 5, 6, then "5 6" is empty
    [9, 5, 6]
    >>> t.draft([7, 8, 9, 5, 6, 0, 7], 8, n_max=4, n_min=4)  # the walk ended before n_min
    []
    >>> t.draft([7, 8, 9, 5, 6, 0, 7], 8, n_max=3, n_min=4)  # it reached n_max: kept
    [9, 5, 6]
    >>> t.draft([7, 8, 9, 5, 6, 0, 7], 2, n_max=4)  # "7 2" never occurred
    []
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.slots: dict[int, int] = {}  # slot -> the token that followed its latest n-gram (sparse: most slots are empty)
        self.added = 0  # llama.cpp's i_last: n-grams beginning before this are in the table
        self.drafted = 0  # the length of the last draft (0: none), for the low-acceptance rule
        self.low = 0  # low rounds in a row
        self._power = pow(_MULT, n - 1, MOD_SLOTS)  # MULT^(n - 1): rolls a token out of a hash

    def slot(self, tokens: Sequence[int]) -> int:
        """The slot of the n-gram ``tokens`` (n tokens)."""
        h = 0
        for tok in tokens:
            h = (h * _MULT + tok) & _MASK
        return h

    def add(self, text: Sequence[int], start: int, stop: int) -> None:
        """Write the n-grams of ``text`` beginning at ``start`` .. ``stop - 1``, each followed by its next token."""
        if stop <= start:
            return
        n = self.n
        h = self.slot(text[start : start + n])
        for i in range(start, stop):
            if i > start:  # roll: drop text[i - 1], take in text[i + n - 1]
                h = ((h - text[i - 1] * self._power) * _MULT + text[i + n - 1]) & _MASK
            self.slots[h] = text[i + n]

    def reset(self) -> None:
        """Empty the table."""
        self.slots.clear()

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: add the prompt's n-grams (those with a token after them)."""
        self.added = 0
        self.drafted = 0
        if len(prompt) < self.n:
            return
        self.add(prompt, 0, len(prompt) - self.n)
        self.added = len(prompt) - self.n
        if len(self.slots) / MOD_SLOTS > _FULL:
            self.reset()

    def draft(self, history: Sequence[int], sampled: int, n_max: int, n_min: int = 0) -> list[int]:
        """What the server drafts after ``history`` (the text before the token just sampled) and
        ``sampled``: the table's walk from their last n tokens, up to ``n_max`` tokens; nothing
        where the walk found fewer than ``n_min`` before an empty slot."""
        self.drafted = 0
        n, cur = self.n, len(history)
        if cur < n:
            return []
        if self.added + _REFRESH < cur:  # the waiting n-grams, in one chunk
            self.add(history, self.added, cur - n)
            self.added = cur - n
        key = [*history[cur - n + 1 :], sampled]
        h = self.slot(key)
        out: list[int] = []
        for i in range(n_max):
            if i:  # roll the key one token on: drop key[i - 1], take in the token just drafted
                h = ((h - key[i - 1] * self._power) * _MULT + key[i + n - 1]) & _MASK
            tok = self.slots.get(h, _EMPTY)
            if tok == _EMPTY:
                if i < n_min:
                    return []
                break
            out.append(tok)
            key.append(tok)
        self.drafted = len(out)
        return out

    def accept(self, accepted: int) -> None:
        """The round of the last draft accepted ``accepted`` of its tokens."""
        if not self.drafted:
            return
        if accepted / self.drafted < _LOW_SHARE:
            self.low += 1
            if self.low >= _LOW_STREAK:
                self.reset()
                self.low = 0
                self.added = 0
        else:
            self.low = 0
