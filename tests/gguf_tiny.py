"""Tiny Llamas written as GGUF files in-process, for the llama.cpp engine's tests (no download).

The ``gguf`` package writes the file: llama.cpp's names for the tensors of a Llama, fp32 weights,
and a vocabulary of one token per id. Queries and keys are reordered for llama.cpp's rotary
layout: transformers rotates the two halves of each head (``rotate_half``), llama.cpp's Llama
rotates adjacent pairs, so each head's rows go from ``[x_0..x_{d/2-1}, y_0..y_{d/2-1}]`` to
``[x_0, y_0, x_1, y_1, ...]``; the rotation then computes the same numbers.

:func:`char_gguf` writes one whose vocabulary is single characters: the tokenizer read from the
file splits lowercase text into them, so the commands run on it with a text prompt.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaForCausalLM

from tests.tiny import tiny_llama

# <bos> <eos> <pad> <unk>, the word-start mark, a-z, 0-9, and fillers to 64 ids
CHAR_TOKENS = ["<bos>", "<eos>", "<pad>", "<unk>", "\u2581", *string.ascii_lowercase, *string.digits]
CHAR_TOKENS += [f"<x{i}>" for i in range(64 - len(CHAR_TOKENS))]


def _interleave_heads(weight: torch.Tensor, heads: int) -> np.ndarray:
    """``[heads * d, in]`` rows of each head from halves order to pairs order."""
    out, inner = weight.shape
    d = out // heads
    w = weight.detach().float().reshape(heads, 2, d // 2, inner).transpose(1, 2)  # [heads, d/2, 2, in]
    return w.reshape(out, inner).numpy()


def write_gguf(
    model: LlamaForCausalLM, path: Path, tokens: list[str] | None = None, head_count: bool = True, leave_out: tuple[str, ...] = ()
) -> Path:
    """Write ``model`` (a transformers Llama) as a llama.cpp GGUF file with fp32 weights.

    ``tokens`` names each id (default ``t0, t1, ...``); id 0 is BOS and id 1 EOS, as in the tiny
    models of the tests. ``head_count=False`` leaves the attention head count out of the metadata:
    a whole GGUF that llama.cpp's quantizer copies but its loader refuses. ``leave_out`` names
    tensors not written (``blk.1.attn_q.weight``: a block that lacks a weight).
    """
    import gguf

    cfg = model.config
    vocab = cfg.vocab_size
    tokens = tokens or [f"t{i}" for i in range(vocab)]
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    if head_count:
        writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // heads)
    writer.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * (vocab - 2))
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_add_bos_token(False)

    def put(name: str, tensor: torch.Tensor | np.ndarray) -> None:
        if name in leave_out:
            return
        array = tensor if isinstance(tensor, np.ndarray) else tensor.detach().float().numpy()
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    put("token_embd.weight", model.model.embed_tokens.weight)
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        put(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight)
        put(f"blk.{i}.attn_q.weight", _interleave_heads(attn.q_proj.weight, heads))
        put(f"blk.{i}.attn_k.weight", _interleave_heads(attn.k_proj.weight, kv_heads))
        put(f"blk.{i}.attn_v.weight", attn.v_proj.weight)
        put(f"blk.{i}.attn_output.weight", attn.o_proj.weight)
        put(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight)
        put(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight)
        put(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight)
        put(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight)
    put("output_norm.weight", model.model.norm.weight)
    put("output.weight", model.lm_head.weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def char_gguf(
    path: Path,
    seed: int,
    layers: int = 1,
    tokens: list[str] = CHAR_TOKENS,
    head_count: bool = True,
    kv_heads: int = 2,
    leave_out: tuple[str, ...] = (),
) -> Path:
    """A tiny random Llama over ``tokens`` (by default :data:`CHAR_TOKENS`) written to ``path``; its 4
    attention heads share ``kv_heads`` key/value heads (3: unevenly, which llama.cpp aborts on);
    ``head_count`` and ``leave_out`` as :func:`write_gguf` takes them."""
    model = tiny_llama(seed, layers=layers, vocab=len(tokens), kv_heads=kv_heads)
    return write_gguf(model, path, tokens=tokens, head_count=head_count, leave_out=leave_out)
