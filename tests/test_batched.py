"""The executor over rows: b prompts in lockstep, each exactly as if decoded alone.

Greedy: random chains (depth 0 to 3, the n-gram drafter at the bottom or not, drafters that agree
with the target always, often, rarely), random widths, ragged prompts and end-of-sequence ids;
every sequence's tokens equal the target's own greedy decoding of its prompt alone. Sampling: at
b = 2 with ragged prompts, each sequence's first-L-token law is G-tested against the target's exact
law (tests/law.py), with a failing control. The ragged cache: its logits equal uncached passes
over each sequence alone, and rolling one row back leaves the others as they were. What decodes one
prompt at a time (trees, block-draft heads, steering, the llama.cpp and static engines) refuses
more in one line.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from hsd_runtime import Hierarchy, NgramDrafter, SamplingConfig, quantized_copy
from hsd_runtime.decoding import verify
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats
from tests import law
from tests.law import ALPHA, one_thread
from tests.tiny import tiny_llama

VOCAB = 64
TARGET = tiny_llama(0, layers=3, vocab=VOCAB, head_scale=4.0)


def _noisy(seed: int, scale: float) -> torch.nn.Module:
    """A copy of the target with Gaussian noise of ``scale`` on every weight."""
    model = tiny_llama(0, layers=3, vocab=VOCAB, head_scale=4.0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return model


POOL = {
    "close": _noisy(1, 0.01),
    "far": _noisy(2, 0.05),
    "random": tiny_llama(3, layers=1, vocab=VOCAB, head_scale=4.0),
    "itself": TARGET,
    "int8": quantized_copy(TARGET),
}


def _prompt(rng: random.Random) -> list[int]:
    if rng.random() < 0.5:  # repetitive, so the n-gram drafter proposes
        motif = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 4))]
        return motif * rng.randint(1, 5)
    return [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 24))]


@pytest.mark.parametrize("seed", range(16))
def test_every_sequence_decodes_the_targets_own_greedy_tokens(seed):
    rng = random.Random(seed)
    depth = rng.randint(0, 3)
    ngram = depth > 0 and rng.random() < 0.4
    members = ([NgramDrafter(n=rng.randint(1, 3))] if ngram else []) + [POOL[rng.choice(sorted(POOL))] for _ in range(depth - ngram)]
    widths = [rng.randint(1, 5) for _ in range(depth)]
    prompts = [_prompt(rng) for _ in range(rng.randint(1, 6))]
    eos = rng.choice([[], [rng.randrange(3, VOCAB)]])
    n = rng.randint(1, 30)
    batched = Hierarchy([*members, TARGET], widths, eos_token_ids=eos)
    alone = Hierarchy([TARGET], [], eos_token_ids=eos)
    with one_thread():
        for _ in range(2):  # twice: the caches are reset between batches
            result = batched.generate_batch(prompts, n)
            expected = [alone.generate(p, n).tokens for p in prompts]
            assert result.sequences == expected, f"chain depth {depth}, widths {widths}"
    # stats add up: every sequence's committed tokens, at least one per round it took part in
    assert [sum(c) for c in result.committed] == [len(t) for t in result.sequences]
    assert all(c >= 1 for row in result.committed for c in row)
    assert result.target_rounds == max(len(c) for c in result.committed)
    for k in range(depth):
        assert 0 <= result.levels[k].accepted <= result.levels[k].proposed


def test_a_drafter_equal_to_the_target_is_accepted_whole():
    batched = Hierarchy([TARGET, TARGET], [4])
    result = batched.generate_batch([[5, 6, 7], [9] * 11, [12]], 20, stop_at_eos=False)
    assert result.levels[0].accepted == result.levels[0].proposed
    assert all(c == 5 for row in result.committed for c in row[:-1])  # 4 accepted + 1 bonus a round


def test_without_eos_every_sequence_decodes_exactly_max_new_tokens():
    batched = Hierarchy([POOL["far"], TARGET], [3], eos_token_ids=[int(TARGET.config.eos_token_id)])
    result = batched.generate_batch([[4, 5], [6] * 9], 17, stop_at_eos=False)
    assert [len(t) for t in result.sequences] == [17, 17]
    assert result.ms_per_token > 0 and result.tokens_per_s > 0


def test_ragged_logits_equal_each_sequence_alone_and_rollback_is_per_row():
    cache = CachedModel(TARGET, VOCAB, LevelStats("t"))
    seqs = [[5, 6, 7, 8, 9], [10], [11, 12, 13]]
    cache.prefill_rows(seqs)
    grown = [seqs[0] + [20, 21], seqs[1] + [22, 23, 24, 25], None]
    rows = cache.logits_rows(grown, [5, 0, 0])
    # the first row rolls back 3 tokens (a rejection) while the second only extends
    again = cache.logits_rows([seqs[0][:2] + [30, 31], grown[1] + [26], seqs[2] + [14]], [1, 5, 2])
    with torch.inference_mode():

        def alone(seq: list[int], first: int) -> torch.Tensor:
            return TARGET(input_ids=torch.tensor([seq])).logits[0, first:]

        torch.testing.assert_close(rows[0], alone(grown[0], 5), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(rows[1], alone(grown[1], 0), atol=1e-5, rtol=1e-4)
        assert rows[2] is None
        torch.testing.assert_close(again[0], alone(seqs[0][:2] + [30, 31], 1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(again[1], alone(grown[1] + [26], 5), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(again[2], alone(seqs[2] + [14], 2), atol=1e-5, rtol=1e-4)


def test_a_tree_decodes_one_prompt_at_a_time():
    from hsd_runtime import ChainError, TreeShape

    tree = Hierarchy([POOL["far"], TARGET], [TreeShape((2, 1))])
    with pytest.raises(ChainError, match="one prompt at a time"):
        tree.generate_batch([[5, 6], [7, 8]], 4)
    assert tree.generate_batch([[5, 6]], 4).sequences == [tree.generate([5, 6], 4).tokens]


def test_an_engine_of_one_row_refuses_a_batch_in_one_line():
    from hsd_runtime import ChainError
    from hsd_runtime.models.static_engine import StaticModel

    static = Hierarchy([StaticModel(TARGET, "static", n_ctx=256)], [])
    with pytest.raises(ChainError, match="torch engine only") as refused:
        static.generate_batch([[5, 6], [7, 8]], 4)
    assert "\n" not in str(refused.value)
    assert len(static.generate_batch([[5, 6]], 4).sequences[0]) == 4


def test_one_row_decodes_as_the_one_prompt_call():
    chain = Hierarchy([NgramDrafter(n=2), POOL["far"], TARGET], [2, 3])
    sampling = SamplingConfig(mode="sample", seed=5)
    one = chain.generate([5, 6, 5, 6, 5], 20, sampling)
    rows = chain.generate_batch([[5, 6, 5, 6, 5]], 20, sampling, seeds=[5])
    assert rows.sequences == [one.tokens] and rows.committed == one.committed


# --- the sampled law at b = 2: each sequence's first L tokens follow the target's law ---

PROMPTS = [law.PROMPT, [1, 4, 2]]  # ragged: 6 and 3 tokens


def _law_counts(batched: Hierarchy, sampling: SamplingConfig, runs: int = law.RUNS) -> tuple[list[np.ndarray], list[int], list[int]]:
    counts = [np.zeros(law.V**law.L) for _ in PROMPTS]
    proposed = [0] * len(batched.levels)
    accepted = [0] * len(batched.levels)
    with one_thread():
        for seed in range(runs):
            result = batched.generate_batch(PROMPTS, law.L, sampling.model_copy(update={"seed": seed}))
            for row, tokens in enumerate(result.sequences):
                assert len(tokens) == law.L
                counts[row][law.cell_of(tokens, law.V)] += 1
            for k, level in enumerate(result.levels):
                proposed[k] += level.proposed
                accepted[k] += level.accepted
    return counts, proposed, accepted


def _law_hierarchy() -> tuple[Hierarchy, torch.nn.Module, SamplingConfig]:
    target = law.law_model(10, layers=2)
    members = [law.law_model(12), law.law_model(11), target]
    return Hierarchy(members, [1, 2]), target, SamplingConfig(mode="sample")


def test_each_sequence_follows_the_targets_law_at_batch_two():
    batched, target, sampling = _law_hierarchy()
    counts, proposed, accepted = _law_counts(batched, sampling)
    for prompt, observed in zip(PROMPTS, counts):
        verdict = law.g_test(observed, law.exact_joint(target, prompt, sampling), law.V)
        print(prompt, verdict)
        assert verdict.pvalue > ALPHA
    for k in range(2):  # rejections and acceptances at every level below the target
        assert 0 < accepted[k] < proposed[k]


@pytest.mark.slow
def test_the_law_test_fails_a_batched_runtime_with_a_wrong_residual(monkeypatch):
    monkeypatch.setattr(verify, "residual", law.mixed_residual(1.0))
    batched, target, sampling = _law_hierarchy()
    counts, _, _ = _law_counts(batched, sampling)
    pvalues = [law.g_test(c, law.exact_joint(target, p, sampling), law.V).pvalue for p, c in zip(PROMPTS, counts)]
    assert min(pvalues) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize(
    "chain, widths",
    [(["ngram", "smollm2-135m:layers=8", "smollm2-135m"], [3, 2]), (["smollm2-135m:layers=4", "smollm2-135m"], [4])],
)
def test_smollm2_batched_greedy_equals_each_prompt_alone(chain, widths):
    """fp32, as the other real-model identity tests: in bf16 a pass of n tokens rounds differently
    from n passes of one, so even one sequence's speculative tokens may differ at near ties."""
    from hsd_planner.prompts import encode_prompt
    from hsd_runtime import ModelLoader, build_hierarchy

    loader = ModelLoader(device="cpu", dtype="fp32")
    batched, tokenizer = build_hierarchy(chain, widths, loader)
    alone, _ = build_hierarchy(chain[-1:], [], loader)
    texts = [
        "Write a short poem about the sea.",
        "Explain why the sky is blue in two sentences.",
        "List three uses of a paper clip, then repeat the list.",
        "What is 17 times 23? Show the steps.",
    ]
    ids = [encode_prompt(tokenizer, t) for t in texts]  # 30 to 40 tokens each: ragged
    assert len({len(i) for i in ids}) > 1
    assert batched.generate_batch(ids, 40).sequences == [alone.generate(i, 40).tokens for i in ids]


def test_a_result_keeps_its_own_counters_after_the_next_generation():
    runner = Hierarchy([POOL["far"], TARGET], [3])
    for generate, args in (
        (runner.generate_batch, ([[5, 6, 7], [8]], [[5, 6, 7, 8, 9], [1]])),
        (runner.generate, ([5, 6, 7], [5, 6, 7, 8, 9])),
    ):
        first = generate(args[0], 12)
        passes = first.levels[1].forward_passes
        generate(args[1], 2)
        assert first.levels[1].forward_passes == passes > 2
