"""Decoding b prompts in lock step: a ragged KV cache over padded rows and the batched hierarchy."""
