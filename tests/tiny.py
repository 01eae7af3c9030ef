"""Tiny random Llama models built in-process, and model directories on disk."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def tiny_llama(
    seed: int, layers: int = 2, vocab: int = 64, hidden: int = 32, head_scale: float = 1.0, bias: bool = False, kv_heads: int = 2
) -> LlamaForCausalLM:
    """A random fp32 Llama of 4 attention heads over ``kv_heads`` key/value heads; ``head_scale``
    sharpens its distributions; ``bias`` gives its Linear layers biases (as Qwen's)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        attention_bias=bias,
        mlp_bias=bias,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over ``<bos> <eos> <pad> <unk>`` and ``words``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<bos>", "<eos>", "<pad>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


WORDS = [f"w{i}" for i in range(60)]


def save_tiny_model(path: Path, seed: int, layers: int = 4, words: list[str] = WORDS, bias: bool = False) -> Path:
    """Write a tiny Llama with a word tokenizer as a Hugging Face directory."""
    tokenizer = word_tokenizer(words)
    model = tiny_llama(seed, layers=layers, vocab=len(tokenizer), bias=bias)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
