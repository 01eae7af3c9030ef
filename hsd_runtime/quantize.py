"""``quant=int8``: a copy of a model whose Linear layers hold int8 weights, computing in fp32.

Path chosen: the fbgemm/oneDNN **dynamic int8 linear** of torch's own quantized operators
(``torch.ops.quantized.linear_prepack`` / ``linear_dynamic``: weights int8 per output channel,
prepacked once; each call quantizes its fp32 activations per tensor, multiplies in int8 with
int32 accumulation and returns fp32). This is the kernel behind the deprecated
``torch.ao.quantization.quantize_dynamic``; the operators are called directly, so nothing here
depends on that Python API surviving, and :class:`Int8Linear` keeps a ``weight`` attribute with
the layer's shape (``get_output_embeddings().weight.shape`` is how callers read a vocabulary).

Why this path: per Linear shape of Qwen2.5-Coder-0.5B on 2 threads, this kernel beat fp32
``F.linear`` and ``torch._weight_int8pack_mm`` (the int8 weight-only kernel, which is slow with
fp32 activations) at n = 1, 8 and 16 tokens.

torchao 0.18.0 (the release for torch 2.13) was measured beside it: its CPU int8 weight-only
(``Int8WeightOnlyConfig``) and int8 x int8 (``Int8DynamicActivationInt8WeightConfig``) paths
were 5-10x *slower* than the fbgemm kernel at every n, and its CPU int4 kernels live under
``torchao.prototype``; so no torchao dependency and no ``int4``.

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

from .errors import ModelSpecError
from .spec import QUANTS

__all__ = ["Int8Linear", "quantized_copy"]


class Int8Linear(nn.Module):
    """``y = x W^T + b`` with W stored int8 per output channel; x stays fp32 outside the kernel.

    Args:
        linear: the fp32 layer to quantize; it is read, never modified.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        w = linear.weight.detach().float()  # [out, in]
        # symmetric per output channel: row o maps [-max|w_o|, max|w_o|] onto [-127, 127]
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()  # [out]
        zero = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 warns that qint8 tensors will go some day
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch.quantize_per_channel(w, scale, zero, axis=0, dtype=torch.qint8)
        bias = None if linear.bias is None else linear.bias.detach().float()
        # Prepacking re-lays the weight out for the engine's GEMM once, not on every call.
        self._packed = torch.ops.quantized.linear_prepack(qweight, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., in]`` fp32 -> ``[..., out]`` fp32."""
        # reduce_range: 7-bit activations, so that AVX2 CPUs without VNNI cannot saturate the
        # 16-bit intermediate sums of their u8 x s8 multiply (what quantize_dynamic does too).
        return torch.ops.quantized.linear_dynamic(x, self._packed, True)

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
        return self.in_features * self.out_features + (self.out_features if self.bias is not None else 0)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def quantized_copy(model: nn.Module, quant: str = "int8") -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` (the head included) replaced by an int8 layer.

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
        if isinstance(module, nn.Linear):
            memo[id(module)] = Int8Linear(module)
    for tensor in [*model.parameters(), *model.buffers()]:
        memo.setdefault(id(tensor), tensor)
    clone = copy.deepcopy(model, memo)
    return clone.eval()
