"""Prompt sets: prompt files, the built-in set (package data), the profiling/validation/training
split, the record of what a trained drafter trained on, and how a prompt becomes token ids (the
chat template).

Used by profiling, validation and training alike; imports no torch and no database.
"""

from .record import TRAINED_PROMPTS, trained_digests, trained_on, write_trained_prompts
from .sets import BUILTIN, TRAIN_RESERVE, PromptSet, encode_prompt, load_prompts, prompt_digest, split

__all__ = [
    "BUILTIN",
    "TRAINED_PROMPTS",
    "TRAIN_RESERVE",
    "PromptSet",
    "encode_prompt",
    "load_prompts",
    "prompt_digest",
    "split",
    "trained_digests",
    "trained_on",
    "write_trained_prompts",
]
