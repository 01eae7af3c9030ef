"""The demo workflow's families: what they run and what they say before a long run starts."""

from __future__ import annotations

from dataclasses import replace

from hsd_planner.demo import FAMILIES


def test_the_long_demo_says_how_long_it_took_where_it_was_measured():
    qwen = FAMILIES["qwen"]
    assert qwen.expected("bf16", converted=True) == "expected: about 3 min in bf16 (measured on a 2-core AMD EPYC with AVX512-BF16)"
    bf16 = qwen.expected("bf16", converted=False)
    assert bf16 is not None and bf16.endswith(", plus about 4 min to convert the packaged models once")
    assert qwen.expected("fp32", converted=True) is None  # never measured at this workload: nothing promised
    assert replace(qwen, measured=()).expected("bf16", converted=True) is None


def test_the_default_demo_writes_function_bodies_with_a_stack_of_drafters():
    """Replies long enough to write the body (the first 48 tokens restate the stub, where the
    lookup alone wins), and the candidates of the hierarchy that pays there."""
    qwen = FAMILIES["qwen"]
    assert qwen.max_new_tokens >= 128
    assert qwen.models.split(",") == ["ngram", "qwen2.5-coder-0.5b:quant=int8", "qwen2.5-coder-1.5b"]
