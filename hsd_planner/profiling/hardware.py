"""The hardware fingerprint latencies are stored under."""

from __future__ import annotations

import hashlib
import platform

import torch

from hsd_runtime import cpu_capability
from hsd_runtime.models.engine import LLAMA_CPP_PYTHON
from hsd_runtime.models.static_engine import static_kernels

from ..store.records import HardwareRecord

__all__ = ["cpu_name", "detect_hardware", "hardware_fingerprint", "this_machine"]


def hardware_fingerprint(device: str, device_name: str, threads: int, torch_version: str, kernels: str = "plain") -> str:
    """The key of a machine and runtime in the database: latencies measured with other kernels are
    another machine's. Plain kernels keep the fingerprint profiles had before prepacking existed;
    the capability is not part of it (profiles taken before it was recorded keep their key)."""
    blob = f"{device}|{device_name}|{threads}|{torch_version}"
    if kernels != "plain":
        blob += f"|{kernels}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _record(device: str, device_name: str, capability: str, kernels: str) -> HardwareRecord:
    """The machine as the database keeps it, with this process's threads and torch version."""
    threads, version = torch.get_num_threads(), torch.__version__
    key = hardware_fingerprint(device, device_name, threads, version, kernels)
    return HardwareRecord(key, device, device_name, capability or None, threads, version, kernels)


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_hardware(device: torch.device, kernels: str = "plain") -> HardwareRecord:
    """``device`` as profiled: GPU name on CUDA, CPU model and thread count on CPU, and the
    ``kernels`` its models run (``ModelLoader.kernels``); no floor probe yet."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return _record("cuda", torch.cuda.get_device_name(device), f"CUDA sm_{major}{minor}", kernels)
    return _record("cpu", cpu_name(), cpu_capability(), kernels)


def this_machine() -> list[str]:
    """The fingerprints a profile taken here could carry: the CPU's with prepacked, plain,
    llama.cpp's (of the binding version this install builds) and the static engine's kernels, and
    each CUDA device's with the torch engine's and the static engine's (for fp32 and for bf16/fp16,
    whose attention backends differ)."""
    cpu = torch.device("cpu")
    kernels = ("prepacked", "plain", f"llamacpp-{LLAMA_CPP_PYTHON}", static_kernels(cpu, True), static_kernels(cpu))
    cuda = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [
        *(detect_hardware(cpu, k).fingerprint for k in kernels),
        *(detect_hardware(d, k).fingerprint for d in cuda for k in ("plain", static_kernels(d), static_kernels(d, dtype=torch.bfloat16))),
    ]
