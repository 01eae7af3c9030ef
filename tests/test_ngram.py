import torch

from hsd_runtime import DraftContext, NgramDrafter, SamplingConfig, ngram_lookup


def test_lookup_prefers_longest_then_earliest_match():
    assert ngram_lookup([5, 6, 7, 1, 6, 8, 5, 6], n=2, count=2) == [7, 1]  # "5 6" beats the later "6"
    assert ngram_lookup([6, 1, 6, 2, 9, 6], n=2, count=2) == [1, 6]  # only "6": the earliest match wins
    assert ngram_lookup([1, 2, 3, 4], n=3, count=5) == []  # no earlier occurrence
    assert ngram_lookup([4, 4], n=3, count=5) == [4]  # continuation ends at the sequence end
    assert ngram_lookup([7], n=3, count=2) == []


def test_drafter_proposes_at_most_n_and_counts_calls():
    drafter = NgramDrafter(n=2)
    ctx = DraftContext([1, 2, 3, 4, 5, 1, 2], SamplingConfig(), torch.Generator())
    proposal = drafter.propose(ctx, 2)
    assert proposal.tokens == [3, 4] and proposal.probs is None
    assert drafter.stats.forward_passes == 1
