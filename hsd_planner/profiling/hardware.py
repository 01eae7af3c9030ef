"""The hardware fingerprint latencies are stored under."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass

import torch

__all__ = ["HardwareInfo", "detect_hardware"]


@dataclass(frozen=True)
class HardwareInfo:
    device: str  # "cpu" or "cuda"
    device_name: str  # CPU model or GPU name
    threads: int
    torch_version: str

    @property
    def fingerprint(self) -> str:
        blob = f"{self.device}|{self.device_name}|{self.threads}|{self.torch_version}"
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_hardware(device: torch.device) -> HardwareInfo:
    """Describe ``device`` as profiled: GPU name on CUDA, CPU model and thread count on CPU."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return HardwareInfo(device.type, name, torch.get_num_threads(), torch.__version__)
