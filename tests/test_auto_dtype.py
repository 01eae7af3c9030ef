"""auto_dtype and cpu_capability read the capability probes, which the tests replace."""

from __future__ import annotations

import pytest
import torch

from hsd_runtime.models.device import auto_dtype, cpu_capability


def _cpu(monkeypatch, amx: bool = False, avx512_bf16: bool = False, isa: str = "AVX2") -> None:
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: isa)


@pytest.mark.parametrize(
    "amx, avx512_bf16, isa, name, dtype",
    [
        (True, True, "AVX512", "AMX", "bf16"),
        (False, True, "AVX512", "AVX512-BF16", "bf16"),
        (False, False, "AVX512", "AVX512", "fp32"),
        (False, False, "AVX2", "AVX2", "fp32"),
        (False, False, "DEFAULT", "baseline", "fp32"),
        (False, False, "NO AVX", "baseline", "fp32"),
        (False, False, "SVE256", "SVE256", "fp32"),
    ],
)
def test_cpu_capability_and_dtype(monkeypatch, amx, avx512_bf16, isa, name, dtype):
    _cpu(monkeypatch, amx, avx512_bf16, isa)
    assert cpu_capability() == name
    assert auto_dtype(torch.device("cpu")) == dtype


def test_a_torch_without_the_private_probes_falls_back_to_the_isa(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert cpu_capability() == "AVX512" and auto_dtype(torch.device("cpu")) == "fp32"


@pytest.mark.parametrize("native, dtype", [(True, "bf16"), (False, "fp32")])
def test_cuda_asks_for_native_bf16_without_emulation(monkeypatch, native, dtype):
    seen = {}

    def probe(including_emulation: bool = True) -> bool:
        seen["including_emulation"] = including_emulation
        return native

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", probe)
    _cpu(monkeypatch, amx=True)  # the CPU's probes must not leak into the CUDA answer
    assert auto_dtype(torch.device("cuda", 0)) == dtype and seen == {"including_emulation": False}


def test_cuda_probe_without_the_emulation_argument(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert auto_dtype(torch.device("cuda")) == "bf16"


def test_other_devices_get_fp32(monkeypatch):
    _cpu(monkeypatch, amx=True)
    assert auto_dtype(torch.device("meta")) == "fp32"
