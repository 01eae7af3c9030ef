"""``quant=int8``: specs, a quantized copy that leaves its fp32 parent alone, and lossless hierarchies."""

from __future__ import annotations

import pytest
import torch

from hsd_runtime import Hierarchy, ModelLoader, ModelSpecError, build_hierarchy, parse_spec
from hsd_runtime.models.quantize import Int8Linear, quantized_copy
from tests.tiny import tiny_llama


@pytest.mark.parametrize(
    "text",
    [
        "qwen2.5-coder-1.5b:quant=int8",
        "smollm2-135m:layers=8:quant=int8",
        "smollm2-135m:quant=int8:layers=8",
        "m:quant=int8:dtype=fp32",
        "/models/x.gguf:dtype=fp32:quant=int8:layers=2",
    ],
)
def test_quant_specs_round_trip(text):
    spec = parse_spec(text)
    assert str(spec) == text and spec.quant == "int8"
    assert spec.base.quant == "int8" and spec.base.layers is None  # the full model a view is taken of


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("m:quant=int4", "quant=int4 in model spec 'm:quant=int4'; use one of int8"),
        ("m:quant=fp8", "use one of int8"),
        ("m:quant=", "is not key=value"),
        ("m:quant=int8:dtype=bf16", "computes in fp32; drop dtype=bf16"),
        ("m:dtype=fp16:quant=int8", "drop dtype=fp16"),
        ("ngram:quant=int8", "ngram takes only"),
        ("m:quant=int8:quant=int8", "given twice"),
    ],
)
def test_bad_quant_specs_are_one_line(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment) as err:
        parse_spec(text)
    assert "\n" not in str(err.value)


def test_quantized_copy_leaves_the_parent_alone_and_shares_what_it_does_not_quantize():
    parent = tiny_llama(0, layers=2)
    before = {k: v.clone() for k, v in parent.state_dict().items()}
    ids = torch.tensor([[0, 5, 9, 17, 33, 4, 8]])
    with torch.inference_mode():
        logits_before = parent(ids).logits
        q = quantized_copy(parent)
        q(ids)
        logits_after = parent(ids).logits
    assert all(torch.equal(before[k], v) for k, v in parent.state_dict().items())
    assert torch.equal(logits_before, logits_after)
    assert all(type(m) is not Int8Linear for m in parent.modules())
    assert isinstance(q.lm_head, Int8Linear) and isinstance(q.model.layers[1].mlp.down_proj, Int8Linear)
    assert q.model.embed_tokens.weight is parent.model.embed_tokens.weight  # embeddings: not quantized, shared
    assert q.model.norm.weight is parent.model.norm.weight
    assert q.config is not parent.config and q.model.layers is not parent.model.layers
    assert q.get_output_embeddings().weight.shape == parent.lm_head.weight.shape == (64, 32)


def test_int8_logits_are_close_to_fp32():
    parent = tiny_llama(3, layers=2, head_scale=8.0)
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        p, q = parent(ids).logits, quantized_copy(parent)(ids).logits
    assert (p - q).abs().max() < 0.05 * p.abs().max()
    assert (p.argmax(-1) == q.argmax(-1)).float().mean() > 0.8


_HAS_VNNI = bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)())


@pytest.mark.parametrize(
    "vnni",
    [
        # 8-bit activations are exact only where the kernel sums in 32 bits: forcing them on a CPU
        # without VNNI saturates vpmaddubsw's 16-bit pair sums, which is why 7 bits are used there
        pytest.param(True, marks=pytest.mark.skipif(not _HAS_VNNI, reason="8-bit activations need AVX512-VNNI, which this CPU lacks")),
        False,  # the 7-bit path: what a CPU without VNNI (AVX2) runs, and exact on any CPU
    ],
)
def test_activations_use_7_bits_only_without_vnni(monkeypatch, vnni):
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: vnni, raising=False)
    parent = tiny_llama(4, layers=1)
    q = quantized_copy(parent)
    assert all(m.reduce_range is not vnni for m in q.modules() if isinstance(m, Int8Linear))
    ids = torch.tensor([[0, 9, 8, 7, 6]])
    with torch.inference_mode():
        p, got = parent(ids).logits, q(ids).logits
    assert (p - got).abs().max() < 0.05 * p.abs().max()


def test_quantized_copy_refuses_non_fp32_models():
    with pytest.raises(ModelSpecError, match="made from an fp32 model"):
        quantized_copy(tiny_llama(0).to(torch.bfloat16))
    with pytest.raises(ModelSpecError, match="use one of int8"):
        quantized_copy(tiny_llama(0), "int4")


def test_loader_caches_one_quantized_copy_per_source_and_views_share_it(tiny_dirs):
    loader = ModelLoader(device="cpu", dtype="bf16")  # a quantized copy is fp32 whatever the default
    target = str(tiny_dirs["target"])
    full = loader.load(f"{target}:dtype=fp32").model
    before = {k: v.clone() for k, v in full.state_dict().items()}
    q = loader.load(f"{target}:quant=int8")
    view = loader.load(f"{target}:layers=2:quant=int8")
    assert str(q.spec) == f"{target}:quant=int8" and q.num_layers == 4 and view.num_layers == 2
    assert loader.load(f"{target}:quant=int8:dtype=fp32").model is q.model
    assert q.model is not full and isinstance(q.model.lm_head, Int8Linear)
    assert view.model.lm_head is q.model.lm_head and view.model.model.layers[1] is q.model.model.layers[1]
    assert q.model.model.embed_tokens.weight is full.model.embed_tokens.weight
    assert next(q.model.parameters()).dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in full.state_dict().items())
    assert not isinstance(full.lm_head, Int8Linear)  # the parent keeps its own (packed) layers
    assert q.logits_width == 64 and q.fingerprint == loader.load(target).fingerprint
    assert q.num_parameters == loader.load(f"{target}:dtype=fp32").num_parameters  # int8 weights count


def test_greedy_hierarchy_over_an_int8_drafter_equals_the_fp32_target():
    target = tiny_llama(5, layers=3, head_scale=6.0)
    hierarchy = Hierarchy([quantized_copy(target), target], [3], eos_token_ids=[1])
    alone = Hierarchy([target], [], eos_token_ids=[1])
    for prompt in ([0, 7, 9, 11], [0, 40, 41], [0, 3, 3, 3, 60, 12]):
        ours = hierarchy.generate(prompt, 24)
        assert ours.tokens == alone.generate(prompt, 24).tokens
    assert ours.levels[0].accepted > 0  # the int8 copy agrees often enough to be accepted


def test_greedy_chain_of_int8_views_from_specs_equals_the_fp32_target(tiny_dirs):
    loader = ModelLoader(device="cpu")
    t = str(tiny_dirs["target"])
    chain = ["ngram", f"{t}:layers=2:quant=int8", f"{t}:quant=int8", t]
    hierarchy, tokenizer = build_hierarchy(chain, [2, 3, 4], loader)
    alone, _ = build_hierarchy([t], [], loader)
    ids = tokenizer.encode("w1 w2 w3 w1 w2")
    assert hierarchy.generate(ids, 20).tokens == alone.generate(ids, 20).tokens


def test_planner_latency_timing_runs_on_a_quantized_copy():
    from hsd_planner.profiling.timing import time_forward

    median, p10, p90 = time_forward(quantized_copy(tiny_llama(0)), n=4, context_len=16, repeats=3)
    assert 0 < p10 <= median <= p90


def test_a_quantized_copy_keeps_its_parent_only_where_the_parent_is_loaded_itself(tiny_dirs):
    target = str(tiny_dirs["target"])
    alone = ModelLoader(device="cpu", dtype="bf16")  # a bf16 run whose int8 drafter is made from an fp32 parent
    q = alone.load(f"{target}:quant=int8")
    assert (target, "fp32") not in alone._full  # the fp32 Linear weights went with the transient parent
    chain = ModelLoader(device="cpu", dtype="fp32")
    copy, parent = chain.load_chain([parse_spec(f"{target}:quant=int8"), parse_spec(target)])
    assert copy is not None and parent is not None
    assert copy.model.model.embed_tokens.weight is parent.model.model.embed_tokens.weight  # loaded parent first: shared
    assert isinstance(q.model.lm_head, Int8Linear)
