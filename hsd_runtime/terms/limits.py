"""The runtime's bounds and defaults, defined once and torch-free: widths, tree sizes, temperatures,
seeds, spec lengths, the n-gram order, the sizes of the files it reads. The closed sets of values
(dtypes, modes) live in :mod:`.choices`."""

from __future__ import annotations

__all__ = [
    "BPD_DEFAULTS",
    "DEFAULT_NGRAM_ORDER",
    "MAX_BATCH",
    "MAX_BPD_K",
    "MAX_BPD_PATHS",
    "MAX_CONFIG_BYTES",
    "MAX_CORPUS_BYTES",
    "MAX_DIR_ENTRIES",
    "MAX_GGUF_ARRAY",
    "MAX_GGUF_BYTES",
    "MAX_GGUF_ENTRIES",
    "MAX_GGUF_HEADER",
    "MAX_HEADS",
    "MAX_JSON_NUMBER_CHARS",
    "MAX_RANKING_BYTES",
    "MAX_SEED",
    "MAX_SPEC_CHARS",
    "MAX_SPEC_INT",
    "MAX_TEMPERATURE",
    "MAX_TREE_NODES",
    "MAX_WIDTH",
    "MIN_TEMPERATURE",
]

DEFAULT_NGRAM_ORDER = 3  # the n of `ngram` when its spec sets none; shorter matches are the fallback

# a `bpd:DIR` drafter's options when its spec sets none: top-k per head, paths verified, rescoring, its weight
# vocab 0: the host's whole output layer (or the one the heads were trained through); corpus "": the context alone
BPD_DEFAULTS = {"k": "4", "p": "1", "rescore": "none", "alpha": "1", "vocab": "0", "corpus": ""}
MAX_CORPUS_BYTES = 64 << 20  # an n-gram corpus file for bpd rescoring: tens of millions of tokens
MAX_BPD_K = 32  # tokens per head in the lattice (the k-best search grows with k squared)
MAX_BPD_PATHS = 16  # p-best paths verified together as one tree
MAX_HEADS = 16  # blocks of more than 16 tokens from one hidden state agree with nothing

# the most tokens one level hands upward per request: a verifier accepts far fewer in a row, and a
# mistyped width (10000) must not draft for minutes
MAX_WIDTH = 64

# the most sequences one batched hierarchy decodes in lockstep (and the largest batch size profiled or solved)
MAX_BATCH = 256

# the most tree nodes one verification pass checks (a tree shape multiplies quickly: 4x4x4 is 84)
MAX_TREE_NODES = 64

# sampling temperatures outside this range overflow fp32 logits (1e-300 divides them to inf)
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3

# a torch generator takes a 64-bit seed; profiling adds the prompt index to the seed, so one below 2**63 leaves room
MAX_SEED = 2**63 - 1

# the longest model spec: a name is at most a path (PATH_MAX), and a longer string is a typo or an attack
MAX_SPEC_CHARS = 4096
MAX_SPEC_INT = 10**6  # layers=, n=, min=, vocab=: far above any model's layer count or n-gram order; a longer number is a typo

# files read on a user's word: regular and bounded (hsd_runtime.models.files)
MAX_CONFIG_BYTES = 16 << 20  # a model's config.json or tokenizer_config.json (chat templates make the latter long)
MAX_RANKING_BYTES = 16 << 20  # a ranking of every token of a 262k vocabulary is about 2 MB of JSON
MAX_JSON_NUMBER_CHARS = 100  # the longest number in a JSON file read (a tokenizer's "no limit" 10**30 has 31 digits)
MAX_DIR_ENTRIES = 10_000  # entries of a model directory checked (a model has a dozen; the bound keeps a huge folder quick)
MAX_GGUF_BYTES = 1 << 40  # a GGUF is read by transformers in pieces; the bound only keeps devices and FIFOs out
MAX_GGUF_ENTRIES = 1 << 16  # a GGUF header's keys and tensors: far above any model's (a few thousand), far below a garbage count
# what a GGUF header may declare beside that: every reader (transformers, the gguf package, llama.cpp)
# decodes the whole metadata into memory, so a claim is bounded before anything reads it
MAX_GGUF_ARRAY = 1 << 21  # entries of one metadata array: 8x Gemma 3's vocabulary (262,144 tokens)
MAX_GGUF_HEADER = 1 << 26  # bytes of the metadata and tensor table together: 10x Gemma 3's (6.5 MB)
