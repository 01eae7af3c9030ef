"""Prompt sets: prompt files, the built-in set (package data), the profiling/validation split,
and how a prompt becomes token ids (the chat template).

Used by profiling, validation and training alike; imports no torch and no database.
"""

from .sets import BUILTIN, PromptSet, encode_prompt, load_prompts, split

__all__ = ["BUILTIN", "PromptSet", "encode_prompt", "load_prompts", "split"]
