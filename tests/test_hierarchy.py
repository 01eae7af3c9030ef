"""Greedy hierarchies decode exactly what the target decodes alone."""

import random

import pytest

from hsd_runtime import CachePool, ChainError, Hierarchy, NgramDrafter, PromptError, SamplingConfig, TreeShape
from tests.tiny import tiny_llama

TARGET = tiny_llama(0, layers=4)
DRAFTERS = [tiny_llama(s, layers=1 + s % 3) for s in range(1, 5)]
PROMPTS = [[0, 5, 9, 5, 9, 13], [0, 7, 7, 7, 3, 21, 40, 7, 7]]


def _reference(prompt, n):
    return Hierarchy([TARGET], []).generate(prompt, n).tokens


@pytest.mark.parametrize("case", range(12))
def test_random_chains_match_target_greedy(case):
    rng = random.Random(case)
    depth = rng.randint(1, 3)
    members = rng.sample(DRAFTERS, depth - 1)
    members.insert(0, NgramDrafter(n=rng.randint(1, 3)) if rng.random() < 0.4 else rng.choice(DRAFTERS))
    widths = [rng.randint(1, 8) for _ in range(depth)]
    prompt = rng.choice(PROMPTS)
    result = Hierarchy([*members, TARGET], widths).generate(prompt, 30)
    assert result.tokens == _reference(prompt, 30)
    assert len(result.levels) == depth + 1
    # one target pass per round (the first round may use the prefill's logits alone), and every
    # round commits at least one token
    assert result.target_rounds - 1 <= result.levels[-1].forward_passes <= result.target_rounds <= len(result.tokens)


def test_drafter_identical_to_target_accepts_every_token():
    result = Hierarchy([TARGET, TARGET], [4]).generate(PROMPTS[0], 40)
    drafter = result.levels[0]
    assert drafter.accepted == drafter.proposed > 0
    assert result.mean_accepted_length == pytest.approx(5.0)
    assert result.tokens == _reference(PROMPTS[0], 40)


def test_intermediate_level_returns_exactly_its_width():
    # ngram -> identical model -> target: the middle level holds exactly T_1 = 3 tokens per call
    result = Hierarchy([NgramDrafter(), TARGET, TARGET], [2, 3]).generate(PROMPTS[1], 24)
    middle = result.levels[1]
    assert middle.proposed == 3 * result.target_rounds
    assert result.committed_per_round == [4] * 6


def test_eos_and_max_new_tokens_stop_generation():
    ref = _reference(PROMPTS[0], 20)
    eos = ref[7]
    result = Hierarchy([DRAFTERS[0], TARGET], [3], eos_token_ids=[eos]).generate(PROMPTS[0], 20)
    assert result.tokens == ref[: ref.index(eos) + 1]
    assert len(Hierarchy([TARGET, TARGET], [8]).generate(PROMPTS[0], 5).tokens) == 5


@pytest.mark.parametrize(
    "members, widths, eos",
    [
        ([], [], False),
        ([DRAFTERS[0]], [3], False),
        ([NgramDrafter(), DRAFTERS[1]], [4, 3], True),
        ([DRAFTERS[2]], [TreeShape((3, 2))], False),
    ],
    ids=["alone", "chain", "ngram-depth2-eos", "tree"],
)
def test_kept_target_logits_are_a_teacher_forced_pass_over_the_output(members, widths, eos):
    """keep_logits: the target's rows of every new token, from its verification passes, are the
    rows of one uncached pass over prompt + output (the last round cut by the length limit or an
    end-of-sequence token keeps only the rows of what it committed)."""
    import torch

    prompt = PROMPTS[1]
    stop = [_reference(prompt, 30)[17]] if eos else []
    result = Hierarchy([*members, TARGET], widths, eos_token_ids=stop).generate(prompt, 30, keep_logits=True)
    m = len(result.tokens)
    assert result.target_logits is not None and result.target_logits.shape[0] == m
    with torch.inference_mode():
        whole = TARGET(input_ids=torch.tensor([prompt + result.tokens])).logits[0, len(prompt) - 1 : -1]  # [m, V]
    torch.testing.assert_close(result.target_logits, whole, rtol=1e-4, atol=1e-4)
    assert result.target_logits.argmax(-1).tolist() == result.tokens  # greedy: each row's argmax is its token
    assert Hierarchy([TARGET], []).generate(prompt, 4).target_logits is None  # kept only when asked


@pytest.mark.parametrize(
    "members, widths",
    [([], []), ([DRAFTERS[0]], [3]), ([NgramDrafter(), DRAFTERS[1]], [4, 3]), ([DRAFTERS[2]], [TreeShape((3, 2))])],
    ids=["alone", "chain", "ngram-depth2", "tree"],
)
@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_a_reused_prompt_decodes_as_a_fresh_prefill_does(members, widths, mode):
    """reuse_prompt: a repeat of the last prompt keeps every level's cached prompt and feeds
    nothing for it, and decodes the same tokens (sampled: with the same seed); another prompt is
    prefilled afresh even when asked to reuse."""
    h = Hierarchy([*members, TARGET], widths)
    sampling = SamplingConfig(mode=mode, seed=5)
    first = h.generate(PROMPTS[1], 25, sampling)
    again = h.generate(PROMPTS[1], 25, sampling, reuse_prompt=True)
    assert again.tokens == first.tokens and again.committed == first.committed
    assert all(lv.prefill_tokens == 0 for lv in again.levels) and first.levels[-1].prefill_tokens == len(PROMPTS[1])
    other = h.generate(PROMPTS[0], 25, sampling, reuse_prompt=True)
    assert other.levels[-1].prefill_tokens == len(PROMPTS[0])
    assert other.tokens == Hierarchy([*members, TARGET], widths).generate(PROMPTS[0], 25, sampling).tokens


@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_hierarchies_on_one_pool_share_a_models_prefill(mode):
    """Hierarchies built on one CachePool hold one cache per model: a plan decoding the prompt
    another plan prefilled keeps that prefill for the models they share (its own models feed
    theirs) and decodes what a fresh hierarchy decodes; results already returned keep their counts."""
    pool, sampling = CachePool(), SamplingConfig(mode=mode, seed=3)
    alone = Hierarchy([TARGET], [], caches=pool)
    chain = Hierarchy([NgramDrafter(), DRAFTERS[0], TARGET], [3, 2], caches=pool)
    first = alone.generate(PROMPTS[1], 20, sampling)
    second = chain.generate(PROMPTS[1], 20, sampling, reuse_prompt=True)
    assert second.levels[-1].prefill_tokens == 0 and second.levels[1].prefill_tokens == len(PROMPTS[1])
    assert second.tokens == Hierarchy([NgramDrafter(), DRAFTERS[0], TARGET], [3, 2]).generate(PROMPTS[1], 20, sampling).tokens
    assert first.levels[0].prefill_tokens == len(PROMPTS[1]) and first.levels[0].forward_passes == 19
    again = alone.generate(PROMPTS[1], 20, sampling, reuse_prompt=True)  # after the chain's decode on the same cache
    assert again.tokens == first.tokens and again.levels[0].prefill_tokens == 0


def test_a_model_listed_twice_keeps_two_caches_in_a_pool():
    pool = CachePool()
    twice = Hierarchy([TARGET, TARGET], [4], caches=pool)
    assert twice.levels[0].cached is not twice.top.cached
    assert Hierarchy([TARGET], [], caches=pool).top.cached is twice.levels[0].cached  # the first one is the pool's
    assert twice.generate(PROMPTS[0], 30).tokens == _reference(PROMPTS[0], 30)


def test_autoregressive_chain_counts_one_pass_per_token():
    result = Hierarchy([TARGET], []).generate(PROMPTS[0], 10)
    # the prefill pass already yields the first token, as in transformers' generate
    assert result.target_rounds == 10 and result.levels[0].forward_passes == 9
    assert result.levels[0].tokens_per_pass == 1.0
    assert result.levels[0].prefill_tokens == len(PROMPTS[0])


def test_sampling_is_reproducible_with_a_seed():
    chain = Hierarchy([DRAFTERS[0], DRAFTERS[1], TARGET], [2, 3])
    cfg = SamplingConfig(mode="sample", temperature=0.8, top_k=20, seed=7)
    assert chain.generate(PROMPTS[0], 20, cfg).tokens == chain.generate(PROMPTS[0], 20, cfg).tokens


@pytest.mark.parametrize(
    "members, widths, fragment",
    [
        ([TARGET], [2], "needs 0 widths"),
        ([DRAFTERS[0], TARGET], [0], "widths must be >= 1"),
        ([DRAFTERS[0], NgramDrafter(), TARGET], [2, 2], "lowest level"),
        ([], [], "at least the target"),
    ],
)
def test_bad_chains_are_refused(members, widths, fragment):
    with pytest.raises(ChainError, match=fragment):
        Hierarchy(members, widths)


def test_empty_prompt_is_refused():
    with pytest.raises(PromptError, match="empty"):
        Hierarchy([TARGET], []).generate([], 5)


def test_no_level_drafts_past_what_the_generation_keeps():
    """Near the length limit a draft holds at most the tokens still to make less one, at every
    level (as llama-server caps its drafts): a 2-token generation asks the drafters for 1 token,
    then none, however wide the chain; the tokens are the target's all the same."""
    chain = Hierarchy([NgramDrafter(n=2), DRAFTERS[0], DRAFTERS[1], TARGET], [6, 5, 8])
    for prompt in PROMPTS:
        result = chain.generate(prompt, 2)
        assert result.tokens == _reference(prompt, 2)
        lookup, low, mid = result.levels[:3]
        assert mid.proposed <= 1 and low.proposed <= 1 and lookup.proposed <= 1, (lookup.proposed, low.proposed, mid.proposed)
    wide = chain.generate(PROMPTS[1], 9)  # budgets 8, then what is left: the tokens all the same
    assert wide.tokens == _reference(PROMPTS[1], 9) and wide.levels[2].proposed <= 8 * wide.target_rounds
