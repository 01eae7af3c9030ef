"""The profiler's rounds of a lookup that keeps state (llama-server's ``ngram-mod``,
``ngram-map-k``, ``ngram-map-k4v``, the list ``ngram-simple,ngram-mod``) are the executor's: over the target's own greedy text, the
visited sums at the plan's width count the executor's rounds, and the tokens it drafted and
accepted (what the latency model prices), state told back round by round."""

import pytest
import torch

from hsd_planner.profiling.acceptance import TokenAcceptance
from hsd_planner.profiling.stateful import stateful_blocks, stateful_visited
from hsd_runtime import Hierarchy, NgramDrafter, SamplingConfig, parse_spec
from tests.tiny import tiny_llama

PROMPT, NEW = [3, 7, 11, 7, 3], 96  # seed 1: the lookups draft about half wrong, so what a round tells back matters


@pytest.mark.parametrize(
    "name, width",
    [
        ("ngram:n=2:rule=ngram-mod", 4),
        ("ngram:n=2:rule=ngram-mod:nmin=3", 4),
        ("ngram:n=2:rule=ngram-mod:nmin=3", 2),
        ("ngram:n=2:rule=ngram-map-k", 4),
        ("ngram:n=3:rule=ngram-map-k", 6),
        ("ngram:n=2:rule=ngram-map-k4v", 3),
        ("ngram:n=3:rule=llama-server+ngram-mod:nmatch=2", 4),
        ("ngram:n=4:rule=llama-server+ngram-mod:nmatch=2:nmin=2", 6),
    ],
)
def test_the_visited_sums_are_the_executors_rounds(name, width):
    model = tiny_llama(1, layers=2)
    out = Hierarchy([NgramDrafter.of(parse_spec(name)), model], [width]).generate(PROMPT, NEW)
    level = out.levels[0]
    assert level.proposed > 0 and level.accepted > 0
    rows = torch.nn.functional.one_hot(torch.tensor(out.tokens), 64).double()  # the target's own argmax
    v = stateful_visited(parse_spec(name), PROMPT, out.tokens, TokenAcceptance(rows, SamplingConfig()), b_max=width)
    b = width - 1
    accepted = sum(v.sums[b][1:])
    drafted = sum(v.drafted[b][1:])
    assert v.counts[b] == out.target_rounds
    # the executor's last draft stops one token short of the text's end, the profile's at it
    assert accepted - level.accepted in (0, 1)
    assert 0 <= drafted - level.proposed <= 2


def test_the_width_free_blocks_come_from_one_state_told_each_starts_acceptance():
    """A map key rejected at its first token drafts nothing again: at every start, one state."""
    spec = parse_spec("ngram:n=2:rule=ngram-map-k")
    prompt = [9, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12]  # "1 2" -> 3 4 at 1
    continuation = [1, 2, 6, 6, 1, 2, 6, 6, 1, 2]  # the target writes "1 2 6 6" instead
    rows = torch.nn.functional.one_hot(torch.tensor(continuation), 16).double()
    blocks = stateful_blocks(spec, prompt, continuation, TokenAcceptance(rows, SamplingConfig()), g_max=2)
    assert blocks[2] == [3, 4]  # after "1 2": the prompt's 3 4, rejected at once
    assert blocks[6] == []  # the key again: its limit is 0
