import torch

from hsd_planner.profiling.acceptance import model_conditionals, ngram_blocks, start_survival, visited_run_sums
from hsd_runtime import DraftContext, NgramDrafter, Proposal, SamplingConfig, ngram_lookup, server_lookup


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


def test_the_server_rule_copies_the_latest_exact_match_and_needs_n_tokens(tiny_dirs):
    """``ngram:rule=llama-server``: an exact n-token match at its latest occurrence, nothing at a
    width below n or where fewer than n tokens follow the match; the drafter built from the spec
    drafts so, and the profiler's blocks are its proposals at any width >= n."""
    from hsd_runtime import ModelLoader, build_hierarchy, parse_spec

    tokens = [9, 5, 6, 7, 1, 8, 8, 5, 6, 2, 3, 4, 0, 0, 6, 5, 6]
    assert ngram_lookup(tokens, n=2, count=3, min_size=2) == [7, 1, 8]  # ours: the earliest "5 6"
    assert server_lookup(tokens, n=2, count=3) == [2, 3, 4]  # llama-server's: the latest
    assert server_lookup(tokens, n=3, count=3) == []  # "6 5 6" never occurred: no shorter fallback
    assert server_lookup([9, 5, 6, 0, 0, 0, 0, 5, 6, 3, 5, 6], n=2, count=4) == [3, 5]  # what follows, to the text's end
    run = [9, 8, 8, 8, 8, 8, 8, 5, 5, 5, 5, 5]  # the latest earlier "5 5 5" is followed by one token
    assert server_lookup(run, n=3, count=4) == [] and server_lookup(run, n=1, count=4) == [5]
    spec = parse_spec("ngram:n=2:rule=llama-server")
    assert (spec.ngram_order, spec.ngram_min) == (2, 2) and parse_spec("ngram:rule=llama-server").ngram_order == 12
    hierarchy, _ = build_hierarchy([spec, str(tiny_dirs["target"])], [3], ModelLoader(device="cpu", dtype="fp32"))
    drafter = hierarchy.levels[0]
    ctx = DraftContext.one(tokens, SamplingConfig(), torch.Generator())
    assert isinstance(drafter, NgramDrafter) and drafter.propose(ctx, 3) == [Proposal([2, 3, 4])]
    assert drafter.propose(ctx, 1) == [Proposal([])]  # size-m below size-n: llama-server drafts nothing
    prompt, continuation = tokens[:12], tokens[12:]
    blocks = ngram_blocks(2, prompt, continuation, g_max=8, server=True)
    for t, block in enumerate(blocks):
        assert block[:3] == server_lookup(prompt + continuation[:t], 2, 3, gate=2)[: len(continuation) - t]


def test_a_width_below_the_server_rule_n_commits_one_token_a_round():
    c = model_conditionals(torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0]), 4)
    v = visited_run_sums(start_survival(c), 3, 0, [3, 2, 1, 0, 1], min_width=2)
    assert v.sums[0] == [5.0, 0.0] and v.counts[0] == 5.0 and v.drafted[0] == [5.0, 0.0]  # width 1: every start, nothing drafted
    assert v.sums[1] == visited_run_sums(start_survival(c), 3, 0, [3, 2, 1, 0, 1]).sums[1]  # width 2 drafts as before
