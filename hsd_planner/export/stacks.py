"""Each serving stack's configuration for a plan, and the version of the stack it was read from.

Versions move: this module is the one place that knows how a stack spells speculative decoding
and which version that spelling was read from (see the "Serving stacks" table in the design
notes). No stack runs more than one drafter level, none drafts a tree from a standalone drafter,
and none loads hsd-plan's own model variants (an early exit ``layers=K``, an int8 copy
``quant=int8`` made at load time); :mod:`.restrict` solves for the best plan a stack can express.

Every stack counts "tokens drafted per round" its own way; :class:`Served` holds k, the tokens
the drafter proposes per target round (the plan's width), and each mapping converts it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from hsd_runtime.terms.choices import Mode
from hsd_runtime.terms.spec import MOD_NGRAM_ORDER, MOD_RULE, SERVER_RULE, SIMPLE_MOD_RULE

from ..errors import ExportError
from .batch import trtllm_schedule

__all__ = ["FORMATS", "STACKS", "Rendered", "Served", "Stack", "comment_line", "stack_for"]


@dataclass(frozen=True)
class Served:
    """The plan a stack runs, in the names its server knows: the target, and the one drafter
    (None: autoregressive decoding) proposing ``k`` tokens a round."""

    target: str
    drafter: str | None
    lookup: bool  # the drafter is the n-gram prompt lookup
    k: int
    ngram_order: int
    mode: Mode
    temperature: float | None
    # k per range of batch sizes, ((start, end, k), ...), for a stack that takes a batch-size table
    # (empty: k at every batch size); see export.batch
    schedule: tuple[tuple[int, int, int], ...] = ()
    ngram_min: int = 1  # the lookup's shortest suffix match (ngram:min=K)
    p_min: float = 0.0  # the drafter model ends its draft below this top share (pmin=P); 0: it drafts k every round
    n_min: int = 0  # and drops a draft shorter than this (nmin=N; of ngram:rule=ngram-mod, a walk ended that short)
    ngram_rule: str | None = None  # the lookup's rule= (llama-server, ngram-mod...), None for the longest-suffix rule
    n_match: int = MOD_NGRAM_ORDER  # ngram-mod's n-gram size in rule=llama-server+ngram-mod (nmatch=N)


@dataclass(frozen=True)
class Rendered:
    """A stack's configuration: ``payload`` as data (for ``--json``), ``lines`` as the file holds them."""

    payload: dict
    lines: list[str]


@dataclass(frozen=True)
class Stack:
    """One serving stack at one version: what it can express and how it spells a plan."""

    format: str  # the --format name
    name: str
    version: str
    render: Callable[[Served], Rendered]
    ngram: bool = True  # has an n-gram (prompt lookup) drafter
    # the lookup rules its n-gram drafters run (a spec's rule=), empty where the stack's own
    # lookup is mapped from any of ours (vLLM, SGLang, TensorRT-LLM, transformers)
    lookup_rules: tuple[str, ...] = ()
    max_depth: int = 1  # drafter levels it chains
    trees: bool = False  # a standalone drafter may draft a tree
    early_exit: bool = False  # loads the first K layers of a model as its own drafter
    int8_copy: bool = False  # loads hsd-plan's dynamic-int8 copy of a model
    gguf_files: bool = False  # runs GGUF files: a packaged alias is its GGUF, llama.cpp's quant= copies load
    batch_schedule: bool = False  # takes k per range of batch sizes
    # ends a drafter model's draft on its top token's probability among its ten likeliest (pmin=):
    # llama-server's rule. transformers' assistant_confidence_threshold reads the whole softmax,
    # another rule, so a pmin= drafter is not mapped there
    p_min: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def comment_line(text: str) -> str:
    """``# text`` as one line of a shell, Python or YAML file, whatever ``text`` holds: a character
    that is not printable (a newline above all, which would end the comment and begin a command or
    a statement of its own) is written as its escape (``\\n``, ``\\u2028``).

    >>> comment_line("plan 3: m\\ntouch x")
    '# plan 3: m\\\\ntouch x'
    """
    return "# " + "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _py(value: object) -> str:
    """A Python literal: JSON's strings and numbers are Python's too; true/false are not."""
    return repr(value) if isinstance(value, bool) else json.dumps(value)


def _transformers(s: Served) -> Rendered:
    config: dict = {"do_sample": s.mode == "sample"}
    if s.mode == "sample":
        config["temperature"] = s.temperature
    if s.drafter is not None and s.lookup:
        config |= {"prompt_lookup_num_tokens": s.k, "max_matching_ngram_size": s.ngram_order}
    elif s.drafter is not None:
        # k every round: "constant" keeps k from growing and shrinking with acceptance, and a
        # confidence threshold of 0 keeps the assistant from stopping early (generate's default 0.4)
        config |= {"num_assistant_tokens": s.k, "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
    assistant = s.drafter if s.drafter is not None and not s.lookup else None
    kwargs = ", ".join(f"{k}={_py(v)}" for k, v in config.items())
    lines = [
        "from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig",
        "",
        f"model = AutoModelForCausalLM.from_pretrained({_py(s.target)})",
        f"tokenizer = AutoTokenizer.from_pretrained({_py(s.target)})",
    ]
    call = "model.generate(**inputs, generation_config=config, max_new_tokens=256"
    if assistant is not None:
        lines.append(f"assistant = AutoModelForCausalLM.from_pretrained({_py(assistant)})")
        call += ", assistant_model=assistant"
    lines += [
        f"config = GenerationConfig({kwargs})",
        'inputs = tokenizer("Write a haiku about the sea.", return_tensors="pt")',
        f"output = {call})",
    ]
    generate = config | ({"assistant_model": assistant} if assistant is not None else {})
    return Rendered({"model": s.target, "generate_kwargs": generate, "generation_config": config}, lines)


def _vllm(s: Served) -> Rendered:
    spec: dict | None = None
    if s.drafter is not None and s.lookup:
        # the n-gram drafter tries the longest match first and falls back down to one token
        spec = {"method": "ngram", "num_speculative_tokens": s.k, "prompt_lookup_max": s.ngram_order, "prompt_lookup_min": s.ngram_min}
    elif s.drafter is not None:
        spec = {"method": "draft_model", "model": s.drafter, "num_speculative_tokens": s.k}
    if spec is not None and s.schedule:
        # inclusive [start, end, k] ranges, the first from batch size 1 (vLLM refuses others; a
        # batch smaller than the smallest solved takes its k); num_speculative_tokens is the most
        # any range drafts and must be > 0: with every k 0 the server runs without speculation
        most = max(k for _, _, k in s.schedule)
        ranges = [[1 if i == 0 else start, end, k] for i, (start, end, k) in enumerate(s.schedule)]
        spec = None if most == 0 else spec | {"num_speculative_tokens": most, "num_speculative_tokens_per_batch_size": ranges}
    command = ["vllm", "serve", s.target] + (["--speculative-config", json.dumps(spec)] if spec else [])
    return Rendered({"model": s.target, "speculative_config": spec, "command": shlex.join(command)}, [shlex.join(command)])


_SGLANG_TRIE_DEPTH = 18  # SGLang's default --speculative-ngram-max-trie-depth


def _sglang(s: Served) -> Rendered:
    args: list[str] = []
    # SGLang's draft tokens count the root it verifies with them: steps + 1 with topk 1
    if s.drafter is not None and s.lookup:
        args = [
            "--speculative-algorithm",
            "NGRAM",
            "--speculative-num-draft-tokens",
            str(s.k + 1),
            # the trie matches suffixes up to this length and stores what follows them: room for
            # the plan's n-gram and its k tokens (SGLang's default, 18, when that is more)
            "--speculative-ngram-max-trie-depth",
            str(max(_SGLANG_TRIE_DEPTH, s.ngram_order + s.k)),
            # breadth 1: one chain per round, as the plan was predicted, not a tree of matches
            "--speculative-ngram-min-bfs-breadth",
            "1",
            "--speculative-ngram-max-bfs-breadth",
            "1",
        ]
    elif s.drafter is not None:
        args = [
            "--speculative-algorithm",
            "STANDALONE",
            "--speculative-draft-model-path",
            s.drafter,
            "--speculative-num-steps",
            str(s.k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(s.k + 1),
        ]
    command = ["python", "-m", "sglang.launch_server", "--model-path", s.target, *args]
    return Rendered({"model": s.target, "server_args": args, "command": shlex.join(command)}, [shlex.join(command)])


def _simple_flags(n: int, k: int) -> list[str]:
    """llama-server's ngram-simple flags: its size-n and the plan's k as its size-m."""
    return ["--spec-ngram-simple-size-n", str(n), "--spec-ngram-simple-size-m", str(k)]


def _mod_flags(n_match: int, n_min: int, k: int) -> list[str]:
    """llama-server's ngram-mod flags: its n-gram size, its n_min (0: any walk, where the server's
    default is 48) and the plan's k as its n_max."""
    return ["--spec-ngram-mod-n-match", str(n_match), "--spec-ngram-mod-n-min", str(n_min), "--spec-ngram-mod-n-max", str(k)]


def _llamacpp(draft_max: str, draft_min: str, p_min: str, spec_type: bool) -> Callable[[Served], Rendered]:
    """llama-server's start-up flags for a plan: every speculative setting is fixed when the server
    starts (its per-request ``speculative.*`` fields are compiled out), so a plan is flags alone."""

    def render(s: Served) -> Rendered:
        args: list[str] = []
        if s.drafter is not None and s.lookup and spec_type:
            # only a lookup profiled as the server runs it gets here (Stack.lookup_rules): it drafts
            # what the server's type (or list of types) drafts, so the prediction holds for the server
            if s.ngram_rule == SIMPLE_MOD_RULE:  # ngram-simple where it finds a match, ngram-mod the rounds it found none
                args = ["--spec-type", "ngram-simple,ngram-mod", *_simple_flags(s.ngram_order, s.k), *_mod_flags(s.n_match, s.n_min, s.k)]
            elif s.ngram_rule == MOD_RULE:
                args = ["--spec-type", "ngram-mod", *_mod_flags(s.ngram_order, s.n_min, s.k)]
            else:
                args = ["--spec-type", "ngram-simple", *_simple_flags(s.ngram_order, s.k)]
        elif s.drafter is not None:
            # p_min and n_min are the plan's (pmin=, nmin=): 0 and 0 draft k tokens every round, as
            # the plan was predicted (a build's defaults may differ)
            args = ["-md", s.drafter, draft_max, str(s.k), draft_min, str(s.n_min), p_min, f"{s.p_min:g}"]
            if spec_type:  # -md alone loads the drafter and drafts nothing: draft-simple must be named
                args = ["--spec-type", "draft-simple", *args]
        command = ["llama-server", "-m", s.target, *args]
        return Rendered({"model": s.target, "server_args": args, "command": shlex.join(command)}, [shlex.join(command)])

    return render


def _yaml_map(values: dict[int, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in values.items()) + "}"


def _trtllm(s: Served) -> Rendered:
    spec: dict | None = None
    k = s.k
    schedule = trtllm_schedule(s.schedule) if s.schedule else None
    if schedule is not None:
        k = next(iter(schedule.values()))  # max_draft_len: the k of the smallest key, the largest of the schedule
    if s.drafter is not None and s.lookup and k:
        # is_use_oldest: the n-gram drafter proposes what followed the earliest occurrence
        spec = {"decoding_type": "NGram", "max_draft_len": k, "max_matching_ngram_size": s.ngram_order, "is_use_oldest": True}
    elif s.drafter is not None and k:
        spec = {"decoding_type": "DraftTarget", "max_draft_len": k, "speculative_model": s.drafter}
    if spec is not None and schedule is not None:
        # {key: k}: a batch of s requests drafts the k of the smallest key >= s, none above the largest
        spec["draft_len_schedule"] = schedule
    command = f"trtllm-serve {shlex.quote(s.target)} --extra_llm_api_options extra-llm-api-options.yaml"
    lines = [comment_line(command)]
    if spec is None:
        lines.append("{}")
    else:
        # the speculative examples of TensorRT-LLM's documentation run without the overlap scheduler
        lines.append("disable_overlap_scheduler: true")
        lines.append("speculative_config:")
        # JSON scalars are YAML scalars: names quoted as JSON strings stay one safe line each
        # a dict (the schedule) as a YAML flow mapping with integer keys, as TensorRT-LLM reads it
        lines += [f"  {k}: {_yaml_map(v) if isinstance(v, dict) else json.dumps(v)}" for k, v in spec.items()]
    return Rendered({"model": s.target, "speculative_config": spec, "command": command}, lines)


# per --format, its versions, newest (the default) first
STACKS: dict[str, list[Stack]] = {
    "hf": [Stack("hf", "transformers", "5.23", _transformers)],
    "vllm": [Stack("vllm", "vLLM", "0.31", _vllm, batch_schedule=True)],
    "sglang": [Stack("sglang", "SGLang", "0.5.21", _sglang)],
    "llamacpp": [
        # read from llama.cpp's source of 2026-10-01 (the tree llama-cpp-python 0.3.36 vendors):
        # --spec-type names what drafts (a list enables types; their priority is fixed in code, the
        # n-gram types first), --spec-draft-n-max/-n-min bound the draft model's tokens,
        # --spec-draft-p-min ends its draft on its confidence (pmin=), and --draft-max/--draft-min
        # are removed (the server exits on them). Its n-gram drafters mapped are ngram-simple,
        # ngram-mod and their list ngram-simple,ngram-mod, each only from a lookup profiled as
        # it runs (ngram:rule=llama-server, ngram:rule=ngram-mod, ngram:rule=llama-server+ngram-mod).
        # ngram-map-k(4v) is not: the server keeps a slot's key map from one request to the next,
        # and past the first finds little of the prompt (see export.restrict). Lists with a draft
        # model are not mapped
        Stack(
            "llamacpp",
            "llama.cpp server",
            "2026-10",
            _llamacpp("--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min", True),
            gguf_files=True,
            lookup_rules=(SERVER_RULE, MOD_RULE, SIMPLE_MOD_RULE),
            p_min=True,
        ),
        # builds before the --spec-* flags (spring 2026): --draft-max, --draft-min, --draft-p-min
        # (whose default there was not 0: written always); their n-gram drafter (early 2026 only)
        # is not mapped
        Stack(
            "llamacpp",
            "llama.cpp server",
            "legacy",
            _llamacpp("--draft-max", "--draft-min", "--draft-p-min", False),
            ngram=False,
            gguf_files=True,
            p_min=True,
        ),
    ],
    # the draft_len_schedule of the 1.3 pre-releases (keys are the largest batch of each k); 1.2
    # read its keys as the smallest batch of each k
    "trtllm": [Stack("trtllm", "TensorRT-LLM", "1.3.0rc24", _trtllm, batch_schedule=True)],
}

FORMATS: tuple[str, ...] = ("json", *STACKS)


def stack_for(fmt: str, version: str | None = None) -> Stack:
    """The mapping of ``fmt`` at ``version`` (None: the newest this module knows)."""
    if fmt not in STACKS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    known = STACKS[fmt]
    if version is None:
        return known[0]
    for stack in known:
        if stack.version == version:
            return stack
    raise ExportError(f"no mapping for {known[0].name} {version}; known versions: {', '.join(s.version for s in known)}")
