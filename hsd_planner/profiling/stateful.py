"""Lookups that keep state between rounds, measured by running their rounds: llama-server's
``ngram-mod``, ``ngram-map-k``, ``ngram-map-k4v`` and the list ``ngram-simple,ngram-mod``
(``ngram:rule=...``).

What such a lookup drafts at a position depends on its past rounds, not on the text alone:
``ngram-mod``'s table gains the text's n-grams in chunks and empties after five rounds of low
acceptance; an ``ngram-map-k`` key drafts no more tokens than its last draft had accepted, and its
m-gram size is the width itself. So the visited sums (what a decoder drafting b tokens a round
commits, :class:`~.acceptance.VisitedSums`) are measured as the decoder makes them: for each width
b, a fresh state begun on the prompt drafts a round at the continuation's start; the draft is
accepted as far as it agrees with the continuation (greedy: the verifier's argmax, what the decoder
commits; sampling: the sampled continuation, one draw of the decoder's path), that count is told
back, and the next round starts after the token the round commits. Greedy, these are the rounds
the decoder runs, token for token.

The width-free figures (P(G >= g) over every start, and ``alpha``) read a block at every start,
from one state at the widest width told each start's acceptance: no decoder runs that, and a
plan's width reads the visited sums instead.
"""

from __future__ import annotations

import numpy as np

from hsd_runtime.decoding.cache import common_prefix
from hsd_runtime.decoding.ngram import Table, stateful_table
from hsd_runtime.terms.spec import ModelSpec

from .acceptance import G_MAX, VISIT_MAX, TokenAcceptance, VisitedSums, WidthSums

__all__ = ["stateful_blocks", "stateful_visited"]


def _state(spec: ModelSpec, prompt: list[int], width: int) -> Table:
    """A fresh state of ``spec``'s rule drafting up to ``width`` tokens, begun on ``prompt``."""
    assert spec.ngram_rule is not None
    table = stateful_table(spec.ngram_rule, spec.ngram_order, width, spec.min_hits, spec.n_match)
    table.begin(prompt)
    return table


def _round(
    table: Table, spec: ModelSpec, prompt: list[int], continuation: list[int], t: int, width: int, accept: TokenAcceptance
) -> tuple[list[int], list[float], int]:
    """One round at start ``t``: the block drafted (cut at the continuation's end), each of its
    tokens' acceptance, and how many of them the round commits (told back to ``table``)."""
    text = prompt + continuation[:t]
    block = table.draft(text[:-1], text[-1], width, spec.n_min)[: len(continuation) - t]
    c = [accept(t + i, x) for i, x in enumerate(block)]
    if accept.probs is None:  # greedy: the run of the verifier's argmax
        kept = next((i for i, ci in enumerate(c) if ci < 1.0), len(c))
    else:  # sampling: the run the sampled continuation kept
        kept = common_prefix(block, continuation[t:])
    if block:
        table.accept(kept)
    return block, c, kept


def stateful_blocks(
    spec: ModelSpec, prompt: list[int], continuation: list[int], accept: TokenAcceptance, g_max: int = G_MAX
) -> list[list[int]]:
    """The block drafted at every start of ``continuation`` (``[m]`` blocks, cut at its end) by one
    state of ``spec``'s rule drafting up to ``g_max`` tokens, advanced a round at every start."""
    table = _state(spec, prompt, g_max)
    return [_round(table, spec, prompt, continuation, t, g_max, accept)[0] for t in range(len(continuation))]


def stateful_visited(
    spec: ModelSpec, prompt: list[int], continuation: list[int], accept: TokenAcceptance, b_max: int = VISIT_MAX
) -> VisitedSums:
    """:class:`~.acceptance.VisitedSums` of ``spec``'s rule at widths 1..``b_max``, from the rounds
    a decoder drafting b tokens runs over ``continuation`` (one fresh state per width).

    A round at t sees g <= m - t positions (its run beyond them is censored, as in
    :func:`~.acceptance.visited_run_sums`); S_t(g) is the product of its block's first g
    acceptances, 0 past the block; the tokens it proposed count in ``drafted``."""
    m = len(continuation)
    widths = []
    for b in range(1, b_max + 1):
        width = WidthSums(b)
        table = _state(spec, prompt, b)
        t = 0
        while t < m:
            block, c, kept = _round(table, spec, prompt, continuation, t, b, accept)
            s = np.zeros(b + 1)
            s[0] = 1.0
            s[1 : len(c) + 1] = np.cumprod(c[:b])
            width.add(1.0, s, min(b, m - t), len(block))
            t += kept + 1
        widths.append(width)
    return WidthSums.collect(widths, drafted=True)
