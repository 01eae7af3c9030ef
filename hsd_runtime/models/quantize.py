"""``quant=int8``: a copy of a model whose Linear layers hold int8 weights, computing in fp32.

Path chosen: the fbgemm/oneDNN **dynamic int8 linear** of torch's own quantized operators
(``torch.ops.quantized.linear_prepack`` / ``linear_dynamic``: weights int8 per output channel,
prepacked once; each call quantizes its fp32 activations per tensor, multiplies in int8 with
int32 accumulation and returns fp32). This is the kernel behind the deprecated
``torch.ao.quantization.quantize_dynamic``; the operators are called directly, so nothing here
depends on that Python API surviving, and :class:`Int8Linear` keeps a ``weight`` attribute with
the layer's shape (``get_output_embeddings().weight.shape`` is how callers read a vocabulary).

Why this path (measured with ``hsd_planner.profiling.timing.time_forward``, torch 2.13.0 CPU, 2 threads,
AMD EPYC reporting AVX512-BF16, Qwen2.5-Coder-0.5B, context 200, ms per cached forward pass of
n new tokens, median of 5 samples interleaved across the variants; each variant a copy sharing
the fp32 parent's embeddings):

==================================================  =====  =====  =====  =====  =====
path                                                n=1    n=2    n=4    n=8    n=16
==================================================  =====  =====  =====  =====  =====
fp32 (no quantization)                              188    334    274    257    306
this module (per-channel int8 weights)              36     32     39     39     49
``torch.ao.quantization.quantize_dynamic``          31     31     39     40     53
torchao 0.18.0 ``Int8WeightOnlyConfig``             477    636    599    569    728
torchao 0.18.0 ``Int8DynamicActivationInt8Weight``  505    540    512    557    478
==================================================  =====  =====  =====  =====  =====

(Measured with 7-bit activations; 8-bit ones, the default on VNNI CPUs such as this one, ran at
the same speed: c(1) 29 vs 27 ms, c(8) 40 vs 37 ms.) ``quantize_dynamic`` is the same kernel with
per-tensor weight scales, within noise of this module; but its head's ``weight`` is a method,
which breaks every caller that reads ``get_output_embeddings().weight.shape``, and
``torch.ao.quantization`` is deprecated. torchao's int8 paths with fp32 activations are 12-15x
slower here than the fbgemm kernel, and slower than plain fp32. No ``int4``: torchao 0.18.0 keeps
its CPU int4 under ``torchao.prototype``; the aten tinygemm kernel it wraps
(``_weight_int4pack_mm_for_cpu``, group 128), timed per Linear shape of the 0.5B's MLP and head,
is 25-100x slower than this kernel with fp32 activations, and with bf16 activations takes
0.7-0.8x its time at n = 1 but 1.1-1.2x at n = 8, for 4-bit weights.

Weight sharing: :func:`quantized_copy` builds a new module tree whose Linear layers are
:class:`Int8Linear` and whose every other parameter and buffer (embeddings, norms, rotary
tables) *is* the parent's tensor, never a copy: the fp32 parent, which other levels of a chain
may run, is left untouched, and a quantized copy costs only its int8 weights (about a quarter of
the fp32 Linear weights). Views ``layers=K`` of a quantized copy are taken of the full quantized
copy, so ``m:layers=8:quant=int8`` and ``m:quant=int8`` share one set of int8 weights.

The int8 kernels take fp32 activations, so a quantized copy is fp32 whatever the loader's default
dtype, and ``dtype=bf16|fp16`` with ``quant=int8`` is refused when the spec is parsed. They run
on the CPU only.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..terms.errors import ModelSpecError
from ..terms.spec import QUANTS
from .packing import PackedLinear

__all__ = ["Int8Linear", "quantized_copy"]


class Int8Linear(nn.Module):
    """``y = x W^T + b`` with W stored int8 per output channel; x stays fp32 outside the kernel.

    Args:
        linear: the fp32 layer to quantize; it is read, never modified.
    """

    def __init__(self, linear: nn.Linear | PackedLinear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        w = linear.weight.detach().float()  # [out, in]
        # symmetric per output channel: row o maps [-max|w_o|, max|w_o|] onto [-127, 127]; max|w_o|
        # from the row's max and min, so no second [out, in] tensor is made (0.9 GB for the 1.5B's head)
        scale = (torch.maximum(w.amax(dim=1), -w.amin(dim=1)) / 127.0).clamp_min(1e-12).double()  # [out]
        zero = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 warns that qint8 tensors will go some day
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch.quantize_per_channel(w, scale, zero, axis=0, dtype=torch.qint8)
        # [out] or None; a copy, so the packed layer holds no view of the parent's memory-mapped checkpoint
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self._bias_numel = 0 if bias is None else bias.numel()
        # Prepacking re-lays the weight out for the engine's GEMM once, not on every call.
        self._packed = torch.ops.quantized.linear_prepack(qweight, bias)
        self.reduce_range = _needs_reduced_range()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., in]`` fp32 -> ``[..., out]`` fp32."""
        return torch.ops.quantized.linear_dynamic(x, self._packed, self.reduce_range)

    @property
    def weight(self) -> torch.Tensor:
        """The int8 weight ``[out, in]`` (a qint8 tensor, unpacked on each access)."""
        return torch.ops.quantized.linear_unpack(self._packed)[0]

    @property
    def bias(self) -> torch.Tensor | None:
        return torch.ops.quantized.linear_unpack(self._packed)[1]

    @property
    def num_weights(self) -> int:
        """Weights and biases held, as ``numel`` would count them in the fp32 layer."""
        return self.in_features * self.out_features + self._bias_numel

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def _needs_reduced_range() -> bool:
    """Whether activations must be quantized to 7 bits instead of 8.

    Without AVX512-VNNI, fbgemm multiplies u8 x s8 with ``vpmaddubsw``, whose 16-bit pair sums
    saturate for full-range activations; 7-bit activations cannot saturate (quantize_dynamic always
    uses them). With VNNI the sums are 32-bit, and the 8th bit buys agreement: teacher-forced
    greedy agreement with fp32 on 4 prompts, 0.5B 0.83 -> 0.90, 1.5B 0.91 -> 0.96.
    """
    probe = getattr(torch.cpu, "_is_vnni_supported", None)  # checks avx512_vnni
    return not (probe is not None and probe())


def quantized_copy(model: nn.Module, quant: str = "int8") -> nn.Module:
    """A copy of ``model`` with every Linear layer (the head included) replaced by an int8 layer.

    Embeddings are not quantized. Every tensor that is not a Linear weight is shared with
    ``model``; the module tree, config and generation config are the copy's own.
    """
    if quant not in QUANTS:
        raise ModelSpecError(f"quant={quant} is not supported; use one of {', '.join(QUANTS)}")
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ModelSpecError(f"quant={quant} runs on the CPU only (fbgemm/oneDNN int8 kernels); drop quant or use device cpu")
    if next(model.parameters()).dtype != torch.float32:
        raise ModelSpecError(f"quant={quant} is made from an fp32 model; got {next(model.parameters()).dtype}")
    # deepcopy consults the memo before copying: seeding it makes every Linear come out as its
    # int8 replacement and every other parameter/buffer come out as the parent's own tensor.
    memo: dict[int, object] = {}
    for module in model.modules():
        if isinstance(module, (nn.Linear, PackedLinear)):  # a packed parent gives its weights back dense
            memo[id(module)] = Int8Linear(module)
    for tensor in [*model.parameters(), *model.buffers()]:
        memo.setdefault(id(tensor), tensor)
    clone = copy.deepcopy(model, memo)
    return clone.eval()
