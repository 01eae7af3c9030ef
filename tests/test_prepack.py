"""Prepacked weights (hsd_runtime.models.packing), the machine's floor (profiling.floor) and the kernels key."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from hsd_planner.cli import cli
from hsd_planner.profiling import floor as floor_mod
from hsd_planner.profiling.floor import FloorProbe, PassTraffic, pass_floor_ms, pass_traffic, probe_floor
from hsd_planner.profiling.hardware import detect_hardware, hardware_fingerprint, this_machine
from hsd_runtime import Hierarchy, Int8Linear, ModelLoader, PackedLinear, SamplingConfig, can_prepack, prepack, quantized_copy
from hsd_runtime.models import packing
from tests.conftest import NO_BF16, refuse_bf16_packing
from tests.tiny import tiny_llama

pytestmark = pytest.mark.skipif(can_prepack(torch.device("cpu"), torch.float32) is not None, reason="no oneDNN prepacking here")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 48), (7, 48), (2, 5, 48)])
def test_packed_linear_matches_linear_in_fp32(bias, shape):
    torch.manual_seed(0)
    lin = nn.Linear(48, 80, bias=bias)
    packed = PackedLinear(lin)
    x = torch.randn(*shape)
    with torch.no_grad():
        torch.testing.assert_close(packed(x), lin(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(packed.weight, lin.weight)  # the dense weight comes back unchanged
    assert packed.out_features == 80 and packed.num_weights == 48 * 80 + (80 if bias else 0)


@pytest.mark.skipif(
    can_prepack(torch.device("cpu"), torch.bfloat16) is not None, reason=f"{can_prepack(torch.device('cpu'), torch.bfloat16)}"
)
def test_packed_linear_bf16_matches_bf16_linear():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(PackedLinear(lin)(x).float(), lin(x).float(), rtol=2e-2, atol=2e-2)


def test_prepack_replaces_every_linear_and_keeps_logits():
    plain = tiny_llama(3)
    packed = copy.deepcopy(plain)
    n_linear = sum(isinstance(m, nn.Linear) for m in plain.modules())
    assert prepack(packed) == n_linear
    assert not any(isinstance(m, nn.Linear) for m in packed.modules())
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        torch.testing.assert_close(packed(ids).logits, plain(ids).logits, rtol=1e-4, atol=1e-4)


def test_prepack_leaves_fp16_plain():
    model = tiny_llama(3).to(torch.float16)
    assert can_prepack(torch.device("cpu"), torch.float16) is not None
    assert prepack(model) == 0
    assert any(isinstance(m, nn.Linear) for m in model.modules())


def test_packed_and_plain_give_the_same_greedy_tokens_alone_and_in_a_hierarchy():
    target, drafter = tiny_llama(5, layers=3, head_scale=4.0), tiny_llama(6, layers=1, head_scale=4.0)
    packed_target, packed_drafter = copy.deepcopy(target), copy.deepcopy(drafter)
    prepack(packed_target), prepack(packed_drafter)
    prompt = [0, 5, 9, 14, 5, 9]
    greedy = SamplingConfig()
    plain_alone = Hierarchy([target], []).generate(prompt, 40, greedy).tokens
    packed_alone = Hierarchy([packed_target], []).generate(prompt, 40, greedy).tokens
    packed_chain = Hierarchy([packed_drafter, packed_target], [3]).generate(prompt, 40, greedy).tokens
    assert packed_alone == plain_alone
    assert packed_chain == packed_alone  # the same kernels alone and verifying: greedy identity


def test_loader_packs_on_request_and_switches_kernels(tiny_dirs):
    spec = str(tiny_dirs["target"])
    packed = ModelLoader("cpu", "fp32").load(spec)
    plain_loader = ModelLoader("cpu", "fp32", prepack=False)
    plain = plain_loader.load(spec)
    assert any(isinstance(m, PackedLinear) for m in packed.model.modules())
    assert not any(isinstance(m, PackedLinear) for m in plain.model.modules())  # off restores the old path
    assert packed.num_parameters == plain.num_parameters and packed.logits_width == plain.logits_width
    assert plain_loader.kernels == "plain" and plain_loader.with_kernels("plain") is plain_loader
    assert plain_loader.with_kernels("prepacked").kernels == "prepacked"
    # a view of a packed parent shares its packed layers; a quantized copy of it equals one of the plain parent
    loader = ModelLoader("cpu", "fp32")
    view = loader.load(f"{spec}:layers=2").model
    full = loader.load(spec).model
    assert view.model.layers[0].mlp.up_proj is full.model.layers[0].mlp.up_proj
    q_packed, q_plain = quantized_copy(full), quantized_copy(plain.model)
    assert isinstance(q_packed.lm_head, Int8Linear)
    assert torch.equal(q_packed.lm_head.weight.int_repr(), q_plain.lm_head.weight.int_repr())


def test_pass_traffic_counts_shapes_exactly():
    model = tiny_llama(1, layers=2, vocab=64, hidden=32)  # 4 heads of 8, 2 KV heads, MLP 64
    t = pass_traffic(model)
    per_layer = 32 * 32 + 2 * (32 * 16) + 32 * 32 + 3 * (32 * 64)  # q, k+v (2 KV heads x 8), o, MLP
    linear = 2 * per_layer + 64 * 32  # + head
    norms = (2 * 2 + 1) * 32
    assert t.linear_weights == linear
    assert t.weight_bytes == 4 * (linear + norms)
    assert t.row_bytes == 4 * 32
    assert t.kv_bytes_per_position == 2 * 2 * 2 * 8 * 4  # layers x (K, V) x KV heads x head dim x fp32
    assert t.attn_flops_per_pair == 2 * 4 * 4 * 8
    prepack(model)
    assert pass_traffic(model) == t  # packing changes where weights live, not how many bytes a pass reads
    assert pass_traffic(quantized_copy(tiny_llama(1, layers=2))).weight_bytes == linear + 4 * norms


def test_floor_is_the_larger_of_bandwidth_and_compute_bounds():
    t = PassTraffic(
        weight_bytes=10**9, row_bytes=1000, linear_weights=5 * 10**8, kv_bytes_per_position=10**4, attn_flops_per_pair=100, dtype="fp32"
    )
    probe = FloorProbe(bandwidth_gbs=50.0, bandwidth_spread=1.0, peak_gflops={"fp32": 100.0})
    assert pass_floor_ms(t, 1, 100, probe) == pytest.approx(1000 * (10**9 + 1000 + 101 * 10**4) / 50e9)
    assert pass_floor_ms(t, 64, 100, probe) == pytest.approx(1000 * (2 * 64 * 5e8 + 64 * 164 * 100) / 100e9)
    assert pass_floor_ms(t, 1, 100, probe) == pass_floor_ms(t, 1, 100, probe)  # arithmetic only


def test_probe_reports_rates_and_their_spread(monkeypatch):
    monkeypatch.setattr(floor_mod, "PROBE_MIB", 16)
    monkeypatch.setattr(floor_mod, "_GEMM", (16, 256, 256))
    probe = probe_floor("cpu", ["fp32", "bf16"], "prepacked", repeats=3)
    assert probe.bandwidth_gbs > 0 and probe.bandwidth_spread >= 1.0
    assert set(probe.peak_gflops) == {"fp32", "bf16"} and all(v > 0 for v in probe.peak_gflops.values())
    assert all(v >= 1.0 for v in probe.peak_spread.values())


def test_kernels_are_part_of_the_hardware_key():
    cpu = torch.device("cpu")
    plain, packed = detect_hardware(cpu), detect_hardware(cpu, "prepacked")
    legacy = hardware_fingerprint(plain.device, plain.device_name, plain.threads, plain.torch_version)
    assert plain.fingerprint == legacy  # profiles taken before prepacking keep their key
    assert packed.fingerprint != plain.fingerprint
    assert this_machine()[:2] == [packed.fingerprint, plain.fingerprint]


def test_profile_stores_kernels_probe_and_floors(tiny_dirs, monkeypatch, isolated_db):
    monkeypatch.setattr(floor_mod, "PROBE_MIB", 16)
    monkeypatch.setattr(floor_mod, "_GEMM", (16, 256, 256))
    runner = CliRunner()
    args = ["profile", "--models", str(tiny_dirs["target"]), "--skip-acceptance", "--latency-grid", "1,2", "--context-lens", "16"]
    args += ["--repeats", "2", "--max-prompts", "2", "--dtype", "fp32", "--device", "cpu"]  # prepacking is a CPU path
    for flag in ("--prepack", "--no-prepack"):
        result = runner.invoke(cli, [*args, flag, "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["hardware"]["kernels"] == flag[2:].replace("no-prepack", "plain").replace("prepack", "prepacked")
        assert summary["latency"][0]["c1_over_floor"] > 0
    shown = runner.invoke(cli, ["profiles", "show"])
    assert shown.exit_code == 0, shown.output
    assert "prepacked kernels" in shown.output and "plain kernels" in shown.output
    assert "floor probe: read" in shown.output and "x floor)" in shown.output


def test_level_time_splits_into_forward_cache_draft_and_verify():
    target, drafter = tiny_llama(5, layers=3), tiny_llama(6, layers=1)
    result = Hierarchy([drafter, target], [3]).generate([0, 5, 9, 14], 24, SamplingConfig())
    low, top = result.levels
    for level in (low, top):
        assert level.forward_s > 0 and level.cache_s >= 0
        assert level.forward_s + level.cache_s == pytest.approx(level.time_s, abs=1e-9)
    assert low.draft_s > 0 and low.verify_s == 0  # level 0 chooses tokens, verifies nothing
    assert top.verify_s > 0 and top.draft_s == 0
    assert sum(lv.time_s + lv.draft_s + lv.verify_s for lv in result.levels) <= result.decode_s
    assert {"forward_s", "cache_s", "draft_s", "verify_s"} <= set(low.to_dict())


@pytest.fixture
def no_bf16_packing(monkeypatch):
    """oneDNN answers as on an AVX2-only CPU: the weight reorder refuses bf16 (fp32 still packs)."""
    refuse_bf16_packing(monkeypatch)
    yield
    packing._cpu_answer.cache_clear()


def test_the_cpu_is_asked_once_per_dtype(monkeypatch):
    asked = []
    monkeypatch.setattr(packing, "_try_pack", asked.append)
    packing._cpu_answer.cache_clear()
    try:
        for _ in range(3):
            assert can_prepack(torch.device("cpu"), torch.float32) is None
        assert asked == [torch.float32]
    finally:
        packing._cpu_answer.cache_clear()


def test_a_cpu_that_cannot_pack_bf16_runs_bf16_on_plain_kernels(no_bf16_packing, tiny_dirs):
    reason = can_prepack(torch.device("cpu"), torch.bfloat16)
    assert reason == f"oneDNN cannot prepack bf16 weights on this CPU ({NO_BF16})"
    assert can_prepack(torch.device("cpu"), torch.float32) is None
    bf16 = ModelLoader("cpu", "bf16")
    assert bf16.kernels == "plain" and bf16.prepack_refusal == reason
    model = bf16.load(str(tiny_dirs["target"])).model
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    assert prepack(tiny_llama(0).to(torch.bfloat16)) == 0  # never a traceback from the packing operator
    fp32 = ModelLoader("cpu", "fp32")
    assert fp32.kernels == "prepacked" and fp32.prepack_refusal is None
    assert ModelLoader("cpu", "bf16", prepack=False).prepack_refusal is None  # not asked for: nothing to say


def test_the_floor_probe_times_bf16_on_plain_kernels_where_it_cannot_pack(no_bf16_packing, monkeypatch):
    monkeypatch.setattr(floor_mod, "PROBE_MIB", 16)
    monkeypatch.setattr(floor_mod, "_GEMM", (16, 256, 256))
    probe = probe_floor("cpu", ["fp32", "bf16"], "prepacked", repeats=2)
    assert set(probe.peak_gflops) == {"fp32", "bf16"} and all(v > 0 for v in probe.peak_gflops.values())


def test_profile_generate_and_validate_in_bf16_where_it_cannot_pack(no_bf16_packing, tiny_dirs, tmp_path, isolated_db):
    runner = CliRunner()
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i} w{i + 1}" for i in range(10)))
    models = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    common = ["--dtype", "bf16", "--device", "cpu"]
    profile = runner.invoke(
        cli,
        ["profile", "--models", models, "--prompts", str(prompts), "--latency-grid", "1,4", "--context-lens", "8"]
        + ["--repeats", "1", "--max-new-tokens", "6", *common, "--json"],
    )
    assert profile.exit_code == 0, profile.output
    note = f"note: oneDNN cannot prepack bf16 weights on this CPU ({NO_BF16}); bf16 models run torch's plain kernels\n"
    assert profile.stderr == note  # said once, on stderr, as one line
    summary = json.loads(profile.stdout)
    assert summary["hardware"]["kernels"] == "plain"
    assert all(row["c1_over_floor"] > 0 for row in summary["latency"] if row["model"] != "ngram")
    assert runner.invoke(cli, ["solve"]).exit_code == 0
    validate = runner.invoke(cli, ["validate", "--best", "--max-prompts", "1", "--max-new-tokens", "4", *common, "--json"])
    assert validate.exit_code == 0, validate.output
    assert validate.stderr.count("note: oneDNN cannot prepack bf16") == 1
    chain = f"{tiny_dirs['draft']},{tiny_dirs['target']}"
    generate = runner.invoke(cli, ["generate", "--chain", chain, "--widths", "2", "--prompt", "w1 w2", "--max-new-tokens", "6", *common])
    assert generate.exit_code == 0, generate.output


@pytest.mark.skipif(packing._LIBC is None, reason="pages are handed back on Linux only")
def test_packing_hands_back_the_mapped_checkpoint_pages_and_keeps_what_they_hold(tmp_path):
    from transformers import AutoModelForCausalLM

    plain = tiny_llama(3)
    plain.save_pretrained(tmp_path)  # safetensors: from_pretrained maps it and the weights view the mapping
    mapped = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    ranges = packing._file_mappings()
    weight = mapped.model.layers[0].mlp.up_proj.weight
    assert any(lo <= weight.data_ptr() < hi for lo, hi in ranges)  # a view of the file, not a copy
    before = weight.detach().clone()
    packing._page_out(weight, ranges)
    assert torch.equal(weight, before)  # read back from the file: the same numbers
    heap = torch.randn(4096, 64)
    kept = heap.clone()
    packing._page_out(heap, ranges)  # not a mapped file: left alone
    assert torch.equal(heap, kept)
    prepack(mapped)
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        torch.testing.assert_close(mapped(ids).logits, plain(ids).logits, rtol=1e-4, atol=1e-4)
