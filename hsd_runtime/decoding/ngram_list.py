"""llama-server's ``--spec-type ngram-simple,ngram-mod``: two lookups as the alternatives they are.

Read from llama.cpp's ``common_speculative_draft`` and ``common_speculative_accept`` (tree of
2026-10-01). A list of types enables each of them; the server asks them in a fixed order (the
n-gram types first, ``ngram-simple`` before ``ngram-mod``), and the first whose draft is not empty
drafts the round, the rest not being asked. So:

- ``ngram-mod`` looks up only in rounds where ``ngram-simple`` found nothing, and adds the text's
  n-grams to its table only then (in its chunks of more than 32: the table lags by the rounds
  ``ngram-simple`` drafted);
- a round's acceptance is told to the type that drafted it; the other is told it as another's,
  which ``ngram-mod`` ignores, so its streak of low rounds counts only its own;
- both draft up to the plan's width k (``--spec-ngram-simple-size-m`` and ``--spec-ngram-mod-n-max``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .ngram_mod import ModTable
from .ngram_simple import server_lookup

__all__ = ["SimpleThenMod"]


class SimpleThenMod:
    """One sequence's state of ``ngram-simple`` (size-n ``n``, size-m ``width``) then ``ngram-mod``
    (n-match ``n_match``), with the interface of :class:`~.ngram_mod.ModTable`.

    >>> s = SimpleThenMod(n=3, n_match=2, width=3)
    >>> s.begin([0, 7, 8, 9, 5, 6, 1, 2, 3])
    >>> s.draft([0, 7, 8, 9, 5, 6, 1, 2, 3, 4, 7, 8], 9, n_max=3)  # "7 8 9" recurs: ngram-simple copies what followed
    [5, 6, 1]
    >>> s.by_mod
    False
    >>> s.draft([0, 7, 8, 9, 5, 6, 1, 2, 3, 4, 0, 9], 5, n_max=3)  # "0 9 5" never occurred; ngram-mod's "9 5" did
    [6, 1, 2]
    >>> s.by_mod
    True
    """

    def __init__(self, n: int, n_match: int, width: int) -> None:
        self.n = n
        self.width = width  # ngram-simple's size-m: its check of the text's length uses it, not a round's cut
        self.mod = ModTable(n_match)
        self.by_mod = False  # whether ngram-mod drafted the last round

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: ``ngram-mod`` adds the prompt's n-grams (``ngram-simple`` keeps nothing)."""
        self.mod.begin(prompt)
        self.by_mod = False

    def draft(self, history: Sequence[int], sampled: int, n_max: int, n_min: int = 0) -> list[int]:
        """What the server drafts after ``history`` and ``sampled``: ``ngram-simple``'s draft, or
        where it is empty ``ngram-mod``'s walk (``n_min``: its ``--spec-ngram-mod-n-min``)."""
        out = server_lookup([*history, sampled], self.n, n_max, gate=self.width)
        self.by_mod = not out
        return self.mod.draft(history, sampled, n_max, n_min) if self.by_mod else out

    def accept(self, accepted: int) -> None:
        """The last round accepted ``accepted`` of its draft: told to ``ngram-mod`` when it drafted it."""
        if self.by_mod:
            self.mod.accept(accepted)
