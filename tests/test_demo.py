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


def test_each_engine_and_device_runs_candidates_it_can():
    """The static engine runs the family's own candidates, named for it; llama.cpp its GGUF
    copies; on a GPU an int8 copy (the CPU's kernels) gives way to the model it copies, and the
    CPU's measured run times are not promised there."""
    qwen = FAMILIES["qwen"]
    assert qwen.on_engine("torch", "cpu") is qwen
    assert qwen.on_engine("static", "cpu").models.split(",") == [
        "ngram",
        "qwen2.5-coder-0.5b:quant=int8:engine=static",
        "qwen2.5-coder-1.5b:engine=static",
    ]
    assert qwen.on_engine("torch", "cuda").models.split(",") == ["ngram", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert qwen.on_engine("static", "cuda").models.split(",") == [
        "ngram",
        "qwen2.5-coder-0.5b:engine=static",
        "qwen2.5-coder-1.5b:engine=static",
    ]
    assert "quant=q4_0" in qwen.on_engine("llamacpp", "cpu").models
    assert all(not qwen.on_engine(e, d).measured for e, d in [("static", "cpu"), ("torch", "cuda"), ("llamacpp", "cpu")])
    smollm2 = FAMILIES["smollm2"]
    assert smollm2.on_engine("torch", "cuda").models == smollm2.models  # early exits run anywhere


def test_the_demo_runs_on_the_static_engine(tiny_dirs, tmp_path):
    """profile, solve and validate of the demo on the static engine: the solve finds the static
    engine's latency as this machine's and the report holds the plans it validated."""
    import json

    from tests.helpers import run

    target = tiny_dirs["target"]
    result = run(
        "demo", "--engine", "static", "--device", "cpu", "--dtype", "fp32", "--models", f"ngram,{target}:layers=2,{target}",
        "--max-prompts", "2", "--validate-prompts", "1", "--max-new-tokens", "8", "--rounds", "1", "--repeats", "1",
        "--db", tmp_path / "demo.db", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    plans = report["validation"]["plans"]
    assert plans and all(p["measured_ms_per_token"] > 0 for p in plans)
    assert all(c.endswith(":engine=static") for p in plans for c in p["chain"] if c != "ngram")
