"""Token rankings for trimmed drafter heads (``vocab=FILE``): the tokens of a workload, most frequent first.

A trimmed head keeps the first N tokens of a ranking (:mod:`hsd_runtime.models.trim`). Ranking by token
id (``vocab=N``) needs no data; a ranking counted on the workload's own prompts keeps the tokens
that workload uses. Tokens never seen follow in id order (the tokenizer's merge order), so a
ranking covers the whole vocabulary and any N can be cut from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from hsd_runtime import LoadedModel

__all__ = ["TokenRanking", "count_ranking"]


class TokenRanking(BaseModel):
    """A ranking file's content: the kept tokens and where they were counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str  # the spec whose tokenizer counted
    fingerprint: str  # that tokenizer's fingerprint: the loader refuses the file for another one
    prompts: str  # the prompt set (and split) counted
    prompts_hash: str
    counted_tokens: int  # token occurrences counted
    distinct_tokens: int  # distinct tokens among them
    coverage: float  # share of the counted occurrences that the kept tokens cover
    tokens: list[int]  # the kept token ids, most frequent first

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def summary(self) -> dict[str, Any]:
        """The ranking without its token list (what ``--json`` prints)."""
        return self.model_dump(exclude={"tokens"}) | {"size": len(self.tokens)}


def count_ranking(model: LoadedModel, texts: Iterable[str], size: int) -> tuple[list[int], int, int, float]:
    """The ``size`` most frequent tokens of ``texts`` under ``model``'s tokenizer, ties and unseen
    tokens in id order; with the occurrences counted, the distinct tokens and the kept share."""
    counts: Counter[int] = Counter()
    for text in texts:
        counts.update(model.tokenizer.encode(text, add_special_tokens=False))
    width = model.logits_width
    seen = sorted((t for t in counts if t < width), key=lambda t: (-counts[t], t))
    tokens = (seen + [t for t in range(width) if t not in counts])[:size]
    total = sum(counts.values())
    covered = sum(counts[t] for t in tokens)
    return tokens, total, len(counts), covered / total if total else 0.0
