"""Where and in what precision models run: devices, dtypes, and what this CPU computes natively.

Torch is needed (device probes); nothing here loads a model.
"""

from __future__ import annotations

import torch

from ..terms.errors import ModelSpecError

__all__ = ["auto_dtype", "cpu_capability", "resolve_device", "resolve_dtype"]

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: str | None = None) -> torch.device:
    """``None`` or ``"auto"`` picks CUDA when present, else the CPU; a device this machine lacks is refused."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelSpecError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelSpecError(f"--device {device}: this machine has no CUDA device (torch {torch.__version__}); use cpu or auto")
        if resolved.index is not None and resolved.index >= count:
            raise ModelSpecError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    elif resolved.type != "cpu":
        raise ModelSpecError(f"--device {device}: hsd-plan runs on cpu or cuda")
    return resolved


def resolve_dtype(name: str) -> torch.dtype:
    """Map ``bf16|fp16|fp32`` to a torch dtype."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ModelSpecError(f"unknown dtype {name!r}; use one of {', '.join(_DTYPES)}") from None


def _probe(name: str) -> bool:
    """Call the private ``torch.cpu._is_*_supported`` probe ``name``; False where this torch lacks it."""
    fn = getattr(torch.cpu, name, None)
    return bool(fn()) if fn is not None else False


def cpu_capability() -> str:
    """A short name for the best vector ISA of this CPU, as profiles and reports label machines.

    ``"AMX"`` and ``"AVX512-BF16"`` compute bf16 natively; ``"AVX512"``, ``"AVX2"`` and
    ``"baseline"`` (no AVX2) do not. Non-x86 CPUs get torch's own name (``"SVE256"``, ``"VSX"``...).
    Note: torch reports the ISA its kernels dispatch to, so ``ATEN_CPU_CAPABILITY`` lowers it.
    """
    if _probe("_is_amx_tile_supported"):
        return "AMX"
    if _probe("_is_avx512_bf16_supported"):
        return "AVX512-BF16"
    cap = torch.backends.cpu.get_cpu_capability()  # "AVX512", "AVX2", "DEFAULT", "NO AVX", "SVE256", ...
    if cap.startswith("AVX512"):
        return "AVX512"
    if cap == "AVX2":
        return "AVX2"
    return "baseline" if cap in ("DEFAULT", "NO AVX") else cap


def auto_dtype(device: torch.device) -> str:
    """``"bf16"`` where ``device`` computes bf16 natively, else ``"fp32"``.

    CUDA: ``torch.cuda.is_bf16_supported`` without emulation (pre-Ampere GPUs emulate it slowly).
    CPU: AMX or AVX512-BF16; elsewhere bf16 is emulated and a batch of 8 tokens costs about 4x
    fp32 (measured on an AVX2 EPYC), so fp32 is the faster choice.
    """
    if device.type == "cuda":
        try:
            return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
        except TypeError:  # a torch whose probe has no including_emulation argument
            return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu" and (_probe("_is_amx_tile_supported") or _probe("_is_avx512_bf16_supported")):
        return "bf16"
    return "fp32"
