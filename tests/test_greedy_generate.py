"""Greedy hierarchies of real models decode exactly what transformers' own ``generate`` decodes.

An independent decoder: ``model.generate(do_sample=False)`` of transformers on the same loaded
weights (the same module objects, so the same kernels) against the hierarchy, fp32, at least 64
new tokens, on 8 prompts of different kinds (the built-in categories and HumanEval problems).
SmolLM2-135M with early exits, the n-gram drafter, trees, an int8 copy, depth 3 and a drafter that
ends its drafts on its confidence (``pmin=``) (every one of the 8 prompts by some shape);
Qwen2.5-Coder 0.5B -> 1.5B chains (one with ``pmin=``) and trees, an int8 copy of the 0.5B as a
drafter, depth 3 (two HumanEval problems and the short prompt). Runs where an end-of-sequence
token falls inside a round and where the length limit cuts a round are both required to occur.
"""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from hsd_planner.prompts import encode_prompt, load_prompts
from hsd_runtime import GenerationResult, Hierarchy, ModelLoader, TreeShape, build_hierarchy
from tests.test_qwen_packaged import needs_qwen

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("qwen")]  # one worker holds the Qwen models

NEW = 64  # new tokens per prompt
CATEGORIES = ["writing", "qa", "summarization", "translation", "math_reasoning", "coding", "extraction"]
SHORT = "Answer with one word: is the sea salty?"  # the target ends its answer early: an EOS inside a round


def _prompts() -> list[str]:
    """8 prompts of different kinds: one per built-in category but the last, two HumanEval problems, one short."""
    builtin = [load_prompts(category=c).prompts[0] for c in CATEGORIES[:5]]
    humaneval = load_prompts("humaneval").prompts
    return [*builtin, humaneval[0], humaneval[53], SHORT]


PROMPTS = _prompts()


@pytest.fixture
def loader() -> ModelLoader:
    """SmolLM2's loader, for its one test: its models (1.4 GiB) are gone before the Qwen test loads."""
    return ModelLoader(device="cpu", dtype="fp32")


@torch.inference_mode()
def _transformers_greedy(model: torch.nn.Module, ids: list[int], eos: tuple[int, ...], new: int) -> list[int]:
    """transformers' own greedy decoding: no sampling, no penalty, stop at the same EOS ids."""
    config = GenerationConfig(
        max_new_tokens=new, do_sample=False, num_beams=1, eos_token_id=list(eos), pad_token_id=eos[0], repetition_penalty=1.0
    )
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), generation_config=config)
    return out[0, len(ids) :].tolist()


def _cut(result: GenerationResult, hierarchy: Hierarchy) -> int:
    """Tokens the last target round produced but the run did not keep (an EOS or the length limit cut it)."""
    if not hierarchy.widths or not isinstance(hierarchy.widths[-1], int):
        return 0  # the target alone commits one token per round; a tree's accepted counts its depth
    return result.levels[-2].accepted + result.target_rounds - len(result.tokens)


def _compare(loader: ModelLoader, cases: list[tuple[list[str], list, list[int]]], new: int = NEW) -> tuple[int, int]:
    """Run each ``(chain, widths, prompt indices)`` against transformers; return (runs cut by EOS, by length)."""
    target_spec = cases[0][0][-1]
    target = loader.load(target_spec)
    eos = target.eos_token_ids
    encoded = [encode_prompt(target.tokenizer, text) for text in PROMPTS]
    reference: dict[int, list[int]] = {}
    by_eos = by_length = 0
    for chain, widths, indices in cases:
        hierarchy, _ = build_hierarchy(chain, widths, loader)
        for i in indices:
            if i not in reference:
                reference[i] = _transformers_greedy(target.model, encoded[i], eos, new)
            result = hierarchy.generate(encoded[i], new)
            assert result.tokens == reference[i], (
                f"{chain} {widths} on prompt {i}: diverges at token {_first_difference(result.tokens, reference[i])}"
            )
            if _cut(result, hierarchy) > 0:
                ended = result.tokens[-1] in eos
                by_eos += ended
                by_length += not ended
    return by_eos, by_length


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_smollm2_hierarchies_equal_transformers_generate(loader):
    # Every prompt is decoded by some shape, the depth-3 chain with an int8 copy on four of them
    # (a question, arithmetic, a HumanEval problem and the short prompt that ends inside a round).
    cases = [
        (["smollm2-135m"], [], [7]),  # the target alone
        (["ngram", "smollm2-135m:layers=8", "smollm2-135m"], [4, 2], [0, 3, 7]),
        (["smollm2-135m:layers=8", "smollm2-135m"], [TreeShape((3, 2, 1))], [1, 4]),
        (["smollm2-135m:layers=8:pmin=0.6", "smollm2-135m"], [5], [0, 3]),
        (["smollm2-135m:layers=4", "smollm2-135m:layers=16", "smollm2-135m"], [TreeShape((2, 2)), 3], [2, 6]),
        (["ngram", "smollm2-135m:layers=6", "smollm2-135m:quant=int8", "smollm2-135m"], [3, 2, 3], [1, 4, 5, 7]),
    ]
    by_eos, by_length = _compare(loader, cases)
    # an EOS inside a round happened; no round of a chain ran past the length limit: near the end
    # a draft holds at most the tokens still to make less one (DraftContext.budget)
    assert by_eos >= 1 and by_length == 0


@needs_qwen
def test_qwen_hierarchies_equal_transformers_generate(qwen_loader):
    # The 1.5B's own decoding is the costly part, so the shapes share two HumanEval problems (the
    # coder's own kind, 64 tokens each) and the short prompt: three references for six runs.
    cases = [
        (["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], [4], [5, 7]),
        (["qwen2.5-coder-0.5b:pmin=0.5", "qwen2.5-coder-1.5b"], [6], [7]),
        (["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], [TreeShape((2, 2, 1))], [6]),
        (["ngram", "qwen2.5-coder-0.5b:quant=int8", "qwen2.5-coder-1.5b"], [3, 4], [5]),
        (["ngram", "qwen2.5-coder-0.5b:quant=int8", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], [3, 2, 4], [6]),
    ]
    by_eos, by_length = _compare(qwen_loader, cases)
    assert by_eos + by_length >= 1
