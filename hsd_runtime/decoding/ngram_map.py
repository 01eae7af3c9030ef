"""llama-server's ``ngram-map-k`` and ``ngram-map-k4v`` lookups, as they run: keys of n tokens found
through a hash map, each key remembering how many tokens its last draft had accepted.

Read from llama.cpp's ``common/ngram-map.cpp`` (``common_ngram_map_begin``, ``_draft``,
``_accept``; tree of 2026-10-01), whose rules this module follows one for one:

- The key is the last n - 1 tokens of the text and the token just sampled (n:
  ``--spec-ngram-map-k-size-n``, 12 by default). Its earlier occurrence is looked up first in a
  map of 262,144 hash slots (``h = h * 2654435761 + token`` over the key, mod 2^32, then mod the
  map's size), each holding the position of the first n-gram written to it (a later one of the
  same slot is not written: the earliest stays, collisions included); a slot's n-gram must equal
  the key, and start before position cur - n - m - 1 (cur: the text's length before the sampled
  token; m: ``--spec-ngram-map-k-size-m``, 48 by default). Failing that, the positions not yet in
  the map are searched, latest first: the prompt's up to its length less n + m + 1, then the
  generated text's past the prompt's length. The n + m positions before the prompt's end are thus
  never found. After the lookup, the positions up to cur - n - m - 1 join the map.
- Nothing is drafted until the text holds 2n + m tokens.
- A key found for the first time gets an entry (kept for the rest of the generation) whose draft
  limit is m. ``ngram-map-k`` drafts the min(m, limit) tokens that follow the occurrence found;
  the round's accepted count becomes the key's limit, so a key whose draft was rejected at its
  first token never drafts again, and a limit never grows back.
- ``ngram-map-k4v`` counts, for the key, the m-grams that followed its occurrences (up to four
  distinct ones, counted again at each lookup from the last position counted, that position
  included), drafts only once the key was looked up ``min_hits`` times and only when the most
  frequent m-gram occurred at least twice as often as the others together, and then drafts, as
  ``ngram-map-k`` does, the tokens after the occurrence found (the most frequent m-gram's slot
  holds the limit).

The server runs ``begin`` on each request's prompt but keeps the map of a slot across its
requests, emptying it only from the last prompt's length on and searching only past what it had
covered (:meth:`KeyMap.begin` does the same to a map that drafted before), so most of a later
request's prompt is never found. Here each generation row starts a fresh map, as the server's
first request on a slot does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["KEY_MAP_SLOTS", "KeyMap"]

KEY_MAP_SLOTS = 262_144  # the server's hash map: 2^18 slots of one position each
MAX_VALUES = 4  # m-grams counted per key
_MULT = 2_654_435_761  # the server's LCG factor, near (sqrt(5) - 1) / 2 * 2^32
_MASK32 = 0xFFFFFFFF
_MAX_COUNT = 16_380  # the server's cap on a count


@dataclass
class _Value:
    """An m-gram seen after a key: where it begins in the text, how often, and the draft limit."""

    at: int = 0  # 0: an unused slot (a value never begins at 0: it follows its key)
    count: int = 0
    limit: int = 0


@dataclass
class _Key:
    """A key n-gram looked up at least once: its first occurrence found, its lookups, how far its
    m-grams were counted, and its value slots."""

    at: int
    limit: int  # the value slots' initial draft limit: m
    counted: int = 0  # the server's stat_idx
    hits: int = 0
    values: list[_Value] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = [_Value(limit=self.limit) for _ in range(MAX_VALUES)]


def _hash(tokens: Sequence[int], start: int, n: int) -> int:
    """The map's slot of the n-gram of ``tokens`` at ``start``."""
    h = 0
    for i in range(start, start + n):
        h = (h * _MULT + tokens[i]) & _MASK32
    return h % KEY_MAP_SLOTS


class KeyMap:
    """One sequence's state of llama-server's ``ngram-map-k`` (``values=False``) or
    ``ngram-map-k4v`` (``values=True``): the hash map, the keys looked up, and the last draft's
    key and value (for :meth:`accept`).

    >>> text = [9, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6, 7, 1]
    >>> km = KeyMap(n=2, m=2)
    >>> km.begin(text)
    >>> km.draft(text, 2, n_max=8)  # "1 2": its latest occurrence n + m + 1 or more back, at 6
    [3, 4]
    >>> km.accept(1)  # the round kept one of them: the key's limit is now 1
    >>> km.draft([*text, 2, 3], 4, n_max=8)  # "3 4" -> 5 6, then the same key "1 2" again:
    [5, 6]
    >>> km.draft([*text, 2, 3, 4, 5, 6, 7, 1], 2, n_max=8)
    [3]
    """

    def __init__(self, n: int, m: int, values: bool = False, min_hits: int = 1) -> None:
        self.n, self.m = n, m
        self.values = values
        self.min_hits = min_hits
        self.slots: dict[int, int] = {}  # slot -> position of the n-gram written first (sparse)
        self.hashed = 0  # the server's key_map_last_idx: positions above it are not in the map
        self.prompt_len = 0  # the server's size_last_begin
        self.keys: list[_Key] = []
        self.last: tuple[_Key, int] | None = None  # the last draft's key and value slot
        self.checked = 0  # the server's idx_last_check: the text's length at the last begin or draft

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: its prompt's length bounds the two searches. On a map that drafted
        before (the server's slot after a request), as the server does: where the new prompt is
        shorter than the text last seen, the positions from the last prompt's length on (or from
        the new prompt's length less n + m, if that is less) leave the map and the keys, and only
        positions past them are searched again; the rest of the map, checked against the new text,
        stays, and so does the prompt's part below it, never searched."""
        size = len(prompt)
        if size < self.checked:
            cut = self.prompt_len
            if cut > size:
                cut = size - self.n - self.m if size > self.n + self.m else 0
            self.slots = {h: at for h, at in self.slots.items() if at < cut}
            self.hashed = cut - 1 if cut > 0 else 0
            self.keys = [k for k in self.keys if k.at < cut and self._values_below(k, cut)]
        self.checked = self.prompt_len = size

    def _values_below(self, key: _Key, cut: int) -> bool:
        """``ngram-map-k4v``: drop ``key``'s value slots from ``cut`` on (the later ones move up,
        keeping their limits; the emptied last slot keeps its limit too); whether any is left."""
        if not self.values:
            return True
        for j in range(MAX_VALUES - 1, -1, -1):
            if key.values[j].at and key.values[j].at >= cut:
                limit = key.values[-1].limit
                key.values[j:] = [*key.values[j + 1 :], _Value(at=0, count=0, limit=limit)]
        return key.values[0].at != 0

    def draft(self, history: Sequence[int], sampled: int, n_max: int, n_min: int = 0) -> list[int]:
        """What the server drafts after ``history`` (the text before the token just sampled) and
        ``sampled``, cut at ``n_max`` tokens (the server's cap, applied after the lookup);
        ``n_min`` is not a rule of these types (the server reads none)."""
        self.last = None
        inp, n, m = history, self.n, self.m
        cur = len(inp)
        if cur < 2 * n + m:
            return []
        self.checked = cur
        key = [*inp[cur - n + 1 :], sampled]
        top = cur - n - m - 1  # the latest position whose key has m tokens after it, short of the end
        found = self._find(inp, key, top)
        self._hash_up_to(inp, top)
        if not found:
            return []
        entry = next((k for k in self.keys if list(inp[k.at : k.at + n]) == key), None)
        if entry is None:
            entry = _Key(at=found, limit=m)
            self.keys.append(entry)
        entry.hits = min(entry.hits + 1, _MAX_COUNT)
        slot = 0
        if self.values:
            if entry.hits < self.min_hits:
                return []
            slot = self._count_values(entry, inp, key, found)
            counts = [v.count for v in entry.values]
            others = sum(counts) - counts[slot]
            if others > 0 and counts[slot] < 2 * others:
                return []
        size = min(m, entry.values[slot].limit, n_max)
        if size > 0:  # a round that drafts nothing is not verified: no acceptance to tell back
            self.last = (entry, slot)
        return list(inp[found + n : found + n + size])

    def _unmapped(self, top: int) -> list[range]:
        """The positions not yet in the map that the server searches and then writes, latest first:
        the prompt's up to its length less n + m + 1, then the generated text's up to ``top``."""
        n, m = self.n, self.m
        spans = [range(self.prompt_len - n - m - 1, self.hashed, -1)] if self.prompt_len > n + m + 1 else []
        return [*spans, range(top, max(self.prompt_len, self.hashed), -1)]

    def _find(self, inp: Sequence[int], key: list[int], top: int) -> int:
        """Where ``key`` occurred (0: nowhere the server looks): the map's position, else the
        latest unmapped one in the prompt, else in the generated text."""
        n = self.n
        at = self.slots.get(_hash(key, 0, n), 0)
        if at and at < top and list(inp[at : at + n]) == key:
            return at
        return next((j for span in self._unmapped(top) for j in span if list(inp[j : j + n]) == key), 0)

    def _hash_up_to(self, inp: Sequence[int], top: int) -> None:
        """Write the n-grams not yet in the map, up to position ``top``, latest first, into their
        empty slots (the prompt's, then the generated text's, as the server orders them)."""
        for span in self._unmapped(top):
            for j in span:
                self.slots.setdefault(_hash(inp, j, self.n), j)
        self.hashed = max(top, self.hashed)

    def _count_values(self, entry: _Key, inp: Sequence[int], key: list[int], found: int) -> int:
        """``ngram-map-k4v``: count the m-grams after the key's occurrences from where the count
        last stopped (inclusive) to ``found``; the slot of the most frequent (the first on a tie)."""
        n, m = self.n, self.m
        for i in range(entry.counted, found + 1):
            if list(inp[i : i + n]) != key:
                continue
            begin = i + n
            for v in entry.values:
                if v.at == 0:
                    v.at, v.count, v.limit = begin, 0, m
                elif list(inp[begin : begin + m]) != list(inp[v.at : v.at + m]):
                    continue
                v.count = min(v.count + 1, _MAX_COUNT)
                break
        entry.counted = found
        best = 0
        for i, v in enumerate(entry.values):
            if v.count > entry.values[best].count:
                best = i
        return best

    def accept(self, accepted: int) -> None:
        """The round of the last draft accepted ``accepted`` of its tokens: the key's (value's)
        draft limit from now on. The server calls this only after a round that drafted."""
        if self.last is not None:
            entry, slot = self.last
            entry.values[slot].limit = accepted
