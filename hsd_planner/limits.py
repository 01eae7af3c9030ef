"""Bounds of the numbers a user types or an import holds, and of the files the planner reads,
checked before anything is written.

The runtime's own bounds (widths, tree nodes, temperatures, seeds, model files) are :mod:`hsd_runtime.terms.limits`.
"""

from __future__ import annotations

__all__ = [
    "MAX_BRANCHING",
    "MAX_CHECKPOINT_BYTES",
    "MAX_CONNECT_TIMEOUT_S",
    "MAX_COUNT",
    "MAX_DOCUMENT_BYTES",
    "MAX_HEAD_INNER",
    "MAX_HOSTS",
    "MAX_LENGTH",
    "MAX_NAME_CHARS",
    "MAX_PROMPTS",
    "MAX_PROMPT_CHARS",
    "MAX_PROMPT_FILE_BYTES",
    "MAX_RECORD_BYTES",
    "MAX_RENDERED_CHARS",
    "MAX_REPEATS",
    "MAX_STALE",
    "MAX_STEER_RANK",
    "MAX_TRAINING_CORPUS_BYTES",
    "SQLITE_INT_MAX",
]

SQLITE_INT_MAX = 2**63 - 1  # the largest integer SQLite stores (a row id, a count)
MAX_LENGTH = 10**7  # tokens: a prompt, a continuation, a context length, a pass (far beyond any model's context)
MAX_COUNT = 10**6  # how many of something a run does: prompts, steps, plans listed, a batch
MAX_REPEATS = 1000  # timed rounds per latency point, validation runs per prompt

# the most children per node a tree the solver tries has: A(k) gains little past a few siblings,
# while the nodes to verify grow with the product of the branching factors
MAX_BRANCHING = 4

# prompt files
MAX_PROMPT_CHARS = 200_000  # about 50k tokens: longer than any model here attends over
MAX_PROMPTS = 100_000
MAX_PROMPT_FILE_BYTES = 1 << 30  # read line by line, so this only keeps /dev/zero-like files out
MAX_RECORD_BYTES = 1 << 24  # a trained-prompts record: 16 hex digits a prompt, a million prompts
MAX_RENDERED_CHARS = 1_000_000  # a prompt in its chat template: the longest prompt and a long system text beside it

# trained drafters' shapes (the heads' count is the runtime's MAX_HEADS)
MAX_HEAD_INNER = 1 << 16  # a block-draft head's hidden width: far above any host's hidden size
MAX_STEER_RANK = 1 << 14  # the rank of a low-rank steering projection
MAX_STALE = 32  # drafted tokens per block a steering is trained for: far beyond any useful draft length

# a checkpoint holds the trained weights and the optimizer's two moments of each: the bound only
# ends a read of a file that keeps growing (the file is checked a regular file before it is opened)
MAX_CHECKPOINT_BYTES = 1 << 40
# a cached training corpus is read whole (complete rows of a large vocabulary are gigabytes): the
# bound only ends a read of a file that keeps growing; every file is checked a regular file before it is opened
MAX_TRAINING_CORPUS_BYTES = 1 << 40

MAX_DOCUMENT_BYTES = 1 << 30  # the largest export read: 1 GiB of JSON, about 20 times a large database's
# a stored model spec or workload name: a server's column width (store.schema), and an import's bound
MAX_NAME_CHARS = 500

# database URLs
MAX_CONNECT_TIMEOUT_S = 600  # a longer wait for one host is never what an interactive command wants
MAX_HOSTS = 8  # each host waits up to connect_timeout: the number of hosts bounds the whole open
