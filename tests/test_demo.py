"""The demo workflow's families: what they run and what they say before a long run starts."""

from __future__ import annotations

from dataclasses import replace

from hsd_planner.demo import FAMILIES


def test_the_long_demo_says_how_long_it_took_where_it_was_measured():
    qwen = FAMILIES["qwen"]
    assert qwen.expected("bf16", converted=True) == "expected: about 3 min in bf16 (measured on a 2-core AMD EPYC with AVX512-BF16)"
    fp32 = qwen.expected("fp32", converted=False)
    assert fp32 is not None and fp32.startswith("expected: about 13 min in fp32 (measured on a 2-core AMD EPYC with AVX2 only)")
    assert fp32.endswith(", plus about 4 min to convert the packaged models once")
    assert qwen.expected("fp16", converted=True) is None  # never measured: nothing promised
    assert replace(qwen, measured=()).expected("bf16", converted=True) is None
