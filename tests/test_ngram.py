import torch

from hsd_runtime import DraftContext, NgramDrafter, Proposal, SamplingConfig, ngram_lookup


def test_lookup_prefers_longest_then_earliest_match():
    assert ngram_lookup([5, 6, 7, 1, 6, 8, 5, 6], n=2, count=2) == [7, 1]  # "5 6" beats the later "6"
    assert ngram_lookup([6, 1, 6, 2, 9, 6], n=2, count=2) == [1, 6]  # only "6": the earliest match wins
    assert ngram_lookup([1, 2, 3, 4], n=3, count=5) == []  # no earlier occurrence
    assert ngram_lookup([4, 4], n=3, count=5) == [4]  # continuation ends at the sequence end
    assert ngram_lookup([7], n=3, count=2) == []


def test_drafter_proposes_at_most_n_and_counts_calls():
    drafter = NgramDrafter(n=2)
    ctx = DraftContext.one([1, 2, 3, 4, 5, 1, 2], SamplingConfig(), torch.Generator())
    (proposal,) = drafter.propose(ctx, 2)
    assert proposal.tokens == [3, 4] and proposal.probs is None
    assert drafter.stats.forward_passes == 1


def test_a_minimum_match_drafts_only_on_long_enough_suffixes(tiny_dirs):
    """``ngram:min=K``: a suffix shorter than K that recurs proposes nothing, and the drafter of
    that spec, built where chains are built, drafts the same way."""
    from hsd_runtime import ModelLoader, build_hierarchy, parse_spec

    tokens = [5, 6, 7, 1, 9, 6]  # only "6" recurs
    assert ngram_lookup(tokens, n=3, count=2) == [7, 1]
    assert ngram_lookup(tokens, n=3, count=2, min_size=2) == []
    assert ngram_lookup([5, 6, 7, 1, 5, 6], n=3, count=2, min_size=2) == [7, 1]  # "5 6" does
    spec = parse_spec("ngram:n=3:min=2")
    assert (spec.ngram_order, spec.ngram_min, str(spec)) == (3, 2, "ngram:n=3:min=2")
    hierarchy, _ = build_hierarchy([spec, str(tiny_dirs["target"])], [2], ModelLoader(device="cpu", dtype="fp32"))
    drafter = hierarchy.levels[0]
    ctx = DraftContext.one(tokens, SamplingConfig(), torch.Generator())
    assert isinstance(drafter, NgramDrafter) and drafter.propose(ctx, 2) == [Proposal([])]
