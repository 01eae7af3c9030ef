"""Prepacked weights on the CPU: every Linear layer multiplies by a weight laid out once at load.

torch's default CPU ``linear`` hands the dense ``[out, in]`` weight to the GEMM on every call, and
the GEMM re-packs it into its blocked layout each time once more than one row comes in: a pass of
n = 2 tokens then costs about twice a pass of one. oneDNN can take the weight already in its
blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, once) and multiply by it on every call
(``torch.ops.mkldnn._linear_pointwise``): the pass streams the packed weight once, whatever n. These
are the operators ``torch.compile`` emits for a frozen CPU graph; they are called here directly, so
no compilation, no recompilation per shape and no graph breaks (measured against ``torch.compile``
with freezing in ``benchmarks/bench_floor.py``).

A :class:`PackedLinear` holds the packed weight only; the dense one is given back on request
(:attr:`PackedLinear.weight`, a copy) for the rare readers that need it (a quantized copy made
from a packed parent). The target alone and the target inside a hierarchy run the same packed
kernels, so greedy identity between them holds exactly as it did unpacked.

Supported: CPU, fp32 everywhere oneDNN runs, bf16 where the CPU has AVX512 (BW, VL, DQ) or
AVX-NE-CONVERT (torch refuses to reorder bf16 weights elsewhere: an AVX2-only CPU packs fp32 only),
never fp16. Whether a dtype packs is asked of this machine once per process (:func:`can_prepack`,
by packing and running a tiny layer); :func:`prepack` leaves a model it cannot pack on the plain
kernels, and :class:`~hsd_runtime.models.loading.ModelLoader` reports that choice as its ``kernels``.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys

import torch
from torch import nn

__all__ = ["PackedLinear", "can_prepack", "prepack"]

_PACKABLE = (torch.float32, torch.bfloat16)


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with W held in oneDNN's blocked layout, packed once.

    Args:
        linear: the layer to pack; read, never modified (its weight may stay shared elsewhere,
            e.g. a head tied to the input embeddings).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach()  # [out, in]
        self.dtype = weight.dtype
        # batch size None: one layout for every number of rows
        self._packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        # [out] or None; a copy, so no tensor of the packed layer views the checkpoint's memory map
        self.bias = None if linear.bias is None else linear.bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., in]`` -> ``[..., out]`` in the layer's dtype."""
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")

    @property
    def weight(self) -> torch.Tensor:
        """The dense weight ``[out, in]`` (a copy unpacked on each access)."""
        return self._packed.to_dense()

    @property
    def num_weights(self) -> int:
        """Weights and biases held, as ``numel`` counts them in the dense layer."""
        return self.in_features * self.out_features + (0 if self.bias is None else self.bias.numel())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN prepacked {self.dtype}"


def _short(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def _try_pack(dtype: torch.dtype) -> None:
    """Pack and run an 8 x 8 layer in ``dtype``; raises what oneDNN raises where it cannot."""
    probe = PackedLinear(nn.Linear(8, 8, bias=False).to(dtype))
    probe(torch.zeros(2, 8, dtype=dtype))


@functools.cache
def _cpu_answer(dtype: torch.dtype) -> str | None:
    """This CPU's answer for ``dtype``, asked once per process (the CPU does not change under it)."""
    if dtype not in _PACKABLE:
        return f"oneDNN prepacks fp32 and bf16 weights; {_short(dtype)} stays plain"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    try:  # a CPU or build without the operators answers here, not in the middle of a forward pass
        _try_pack(dtype)
    except (RuntimeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"oneDNN cannot prepack {_short(dtype)} weights on this CPU ({first})"
    return None


def can_prepack(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when weights on ``device`` in ``dtype`` can be prepacked here, else the reason why not (one line).

    The CPU is asked once per dtype and process; every later call returns the same answer.
    """
    if device.type != "cpu":
        return f"prepacking is a CPU path (oneDNN); {device.type} runs its own kernels"
    return _cpu_answer(dtype)


def prepack(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (the head included) by a :class:`PackedLinear`, in place.

    Returns how many layers were packed (0 when the model's device or dtype cannot be packed; see
    :func:`can_prepack`). Layers shared by truncated views are packed once and stay shared.
    """
    first = next(model.parameters())
    if can_prepack(first.device, first.dtype) is not None:
        return 0
    mapped = _file_mappings()
    packed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, PackedLinear(child))
                _page_out(child.weight, mapped)
                packed += 1
    return packed


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges ``[start, end)`` of this process's memory-mapped files (Linux; else none)."""
    ranges = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 6 and fields[5].startswith("/"):  # a mapped file (not the heap, a stack or anonymous memory)
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        pass
    return ranges


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_MADV_PAGEOUT = 21  # Linux's value (5.4 on); Python's mmap module names it only where its build headers had it


def _page_out(weight: torch.Tensor, mapped: list[tuple[int, int]]) -> None:
    """Hand back the resident pages of a dense weight that views a memory-mapped checkpoint, once it is packed.

    transformers maps a safetensors checkpoint and its weights view that mapping: packing reads
    every page of it, and the pages stay counted in the process until the mapping closes (after
    the whole model is packed), so a model's load peaked at its checkpoint plus its packed copy
    (12.4 GB for the fp32 Qwen 1.5B). ``MADV_PAGEOUT`` reclaims the clean pages of the weight just
    packed; it never changes what the memory holds (a page read again comes back from the file;
    a page written since mapping stays), so a head tied to the embeddings still reads them.
    Memory that is not a mapped file is left alone, and a kernel without ``MADV_PAGEOUT`` (before
    Linux 5.4) simply keeps the pages.
    """
    if _LIBC is None or weight.device.type != "cpu":
        return
    start, end = weight.data_ptr(), weight.data_ptr() + weight.untyped_storage().nbytes()
    if not any(lo <= start and end <= hi for lo, hi in mapped):
        return
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, end // page * page  # the whole pages inside the weight
    if last > first:
        _LIBC.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_PAGEOUT)
