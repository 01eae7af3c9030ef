"""``layers=K`` on the llama.cpp engine: a GGUF file of a model's first K decoder layers.

llama.cpp runs whole GGUF files, so an early exit is a file of its own: every tensor of the
source but those of blocks K and up (``blk.N.*``, N >= K), the architecture's block count set to
K, and per-layer metadata arrays (one entry per block, as some architectures keep) cut to K. The
embedding, the final norm and the output layer are the source's: the model is the source's first
K layers under its own head, as the torch engine's ``layers=K`` view is. Tensors are copied as
stored (quantized or not), with the ``gguf`` package; nothing is recomputed.

Unlike the torch engine's views, which share their parent's weights, a pruned file is loaded as a
model of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..terms.errors import ModelNotFoundError, ModelSpecError
from .gguf_file import check_gguf

__all__ = ["block_count", "checked_layers", "prune_gguf"]

_BLOCK = re.compile(r"blk\.(\d+)\.")


def block_count(path: Path) -> int:
    """The decoder blocks of the GGUF file ``path`` (its ``ARCH.block_count``), read by the layout
    walk in a fraction of a second (the ``gguf`` package's reader decodes the whole vocabulary:
    seconds for Qwen's)."""
    meta = check_gguf(path)
    arch = meta["general.architecture"]
    count = meta.get(f"{arch}.block_count")
    if not isinstance(count, int):
        raise ModelNotFoundError(f"{path} names no {arch}.block_count: llama.cpp cannot keep its first layers only")
    return count


def checked_layers(path: Path, layers: int) -> int:
    """The decoder blocks of ``path``; :class:`ModelSpecError` in one line where ``layers`` is not 1..that."""
    total = block_count(path)
    if not 1 <= layers <= total:
        raise ModelSpecError(f"layers={layers} is out of range for {path.name}: it has {total} decoder layers (use 1..{total})")
    return total


def prune_gguf(source: Path, out: Path, layers: int) -> None:
    """Write the first ``layers`` decoder blocks of ``source`` with its embedding, final norm and
    head as the GGUF file ``out``; :class:`ModelSpecError` where ``layers`` is not 1..the blocks it has."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    total = checked_layers(source, layers)
    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":  # the header's own counts; the writer adds the architecture
            continue
        value, vtype = field.contents(), field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        if name == f"{arch}.block_count":
            value = layers
        elif sub is not None and name.startswith(f"{arch}.") and len(value) == total:  # one entry per block
            value = value[:layers]
        if name == "general.alignment":
            writer.data_alignment = int(value)
        writer.add_key_value(name, value, vtype, sub_type=sub)
    kept = [t for t in reader.tensors if not ((m := _BLOCK.match(t.name)) and int(m.group(1)) >= layers)]
    for t in kept:  # a quantized tensor's data is its bytes ([rows, bytes a row], uint8); the writer reads the shape back from them
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data)
    writer.close()
