"""The hardware fingerprint latencies are stored under."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass

import torch

from hsd_runtime import cpu_capability
from hsd_runtime.engines import LLAMA_CPP_PYTHON

from ..store.records import HardwareRecord

__all__ = ["HardwareInfo", "cpu_name", "detect_hardware", "this_machine"]


@dataclass(frozen=True)
class HardwareInfo:
    """The machine a latency profile was measured on; ``fingerprint`` is its key in the database."""

    device: str  # "cpu" or "cuda"
    device_name: str  # CPU model or GPU name
    threads: int
    torch_version: str
    capability: str = ""  # what the device computes natively (AMX, AVX512-BF16, AVX2, CUDA sm_90); not in the fingerprint
    kernels: str = "plain"  # "prepacked" (weights packed once at load, see hsd_runtime.packing) or "plain"

    @property
    def fingerprint(self) -> str:
        """The key of this machine and runtime: latencies measured with other kernels are another machine's.

        Plain kernels keep the fingerprint profiles had before prepacking existed.
        """
        blob = f"{self.device}|{self.device_name}|{self.threads}|{self.torch_version}"
        if self.kernels != "plain":
            blob += f"|{self.kernels}"
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def record(self) -> HardwareRecord:
        """This machine as the database keeps it."""
        return HardwareRecord(
            self.fingerprint, self.device, self.device_name, self.capability or None, self.threads, self.torch_version, self.kernels
        )


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


def detect_hardware(device: torch.device, kernels: str = "plain") -> HardwareInfo:
    """Describe ``device`` as profiled: GPU name on CUDA, CPU model and thread count on CPU, and
    the ``kernels`` its models run (``ModelLoader.kernels``)."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return HardwareInfo(
            "cuda", torch.cuda.get_device_name(device), torch.get_num_threads(), torch.__version__, f"CUDA sm_{major}{minor}", kernels
        )
    return HardwareInfo("cpu", cpu_name(), torch.get_num_threads(), torch.__version__, cpu_capability(), kernels)


def this_machine() -> list[str]:
    """The fingerprints a profile taken here could carry: the CPU's with prepacked, plain and
    llama.cpp's kernels (of the binding version this install builds), and each CUDA device's."""
    cpu = torch.device("cpu")
    cuda = [detect_hardware(torch.device("cuda", i)).fingerprint for i in range(torch.cuda.device_count())]
    kernels = ("prepacked", "plain", f"llamacpp-{LLAMA_CPP_PYTHON}")
    return [*(detect_hardware(cpu, k).fingerprint for k in kernels), *cuda]
