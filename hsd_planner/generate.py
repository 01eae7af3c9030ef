"""Run one hierarchy on one prompt, optionally checked against the target's own greedy decoding."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hsd_runtime import CachePool, GenerationResult, ModelLoader, SamplingConfig, build_hierarchy, parse_chain, positions_needed
from hsd_runtime.terms.shape import Width

from .errors import PromptError
from .plan import widths_to_json
from .prompts import encode_prompt

__all__ = ["CheckResult", "GenerateReport", "compare_tokens", "generate_text"]

# the warm-up's prompt: the first tokens of the real one. It meets the framework's one-off costs;
# the whole prompt would be prefilled twice (2,431 tokens on llama.cpp: 10 s each on two idle cores, 40 s on busy ones)
WARMUP_TOKENS = 16


@dataclass
class CheckResult:
    """Speculative tokens against the target's own greedy tokens."""

    identical: bool
    first_divergence: int | None  # index of the first differing new token
    agreement: float  # fraction of positions, over the longer output, holding the same token
    exact: bool  # fp32 target on torch: identity is guaranteed, so a difference is a failure


def compare_tokens(spec: list[int], ref: list[int], exact: bool) -> CheckResult:
    """Compare two token lists position by position.

    >>> compare_tokens([1, 2, 3], [1, 2, 4], exact=True).first_divergence
    2
    """
    first = next((i for i, (a, b) in enumerate(zip(spec, ref)) if a != b), None)
    if first is None and len(spec) != len(ref):
        first = min(len(spec), len(ref))
    longest = max(len(spec), len(ref)) or 1
    agreement = sum(a == b for a, b in zip(spec, ref)) / longest
    return CheckResult(identical=first is None, first_divergence=first, agreement=agreement, exact=exact)


@dataclass
class GenerateReport:
    """Everything ``hsd-plan generate`` prints."""

    chain: list[str]
    widths: list[Width]
    text: str
    result: GenerationResult
    dtype: str
    device: str
    engine: str = "torch"
    check: CheckResult | None = None
    lenience: float = 1.0  # below 1 the output was verified by the lossy rule

    def to_dict(self) -> dict:
        return {
            "chain": self.chain,
            "lenience": self.lenience,
            "widths": widths_to_json(self.widths),  # a tree as "3x2x1"
            "text": self.text,
            "dtype": self.dtype,
            "device": self.device,
            "engine": self.engine,
            **self.result.to_dict(),
            "check": asdict(self.check) if self.check else None,
        }


def generate_text(
    chain: str,
    widths: list[Width],
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig,
    loader: ModelLoader,
    chat: bool = True,
    check: bool = False,
    warmup: bool = True,
) -> GenerateReport:
    """Run ``chain`` with ``widths`` on ``prompt``; with ``check``, also decode with the target alone.

    A short warm-up generation on the prompt's first :data:`WARMUP_TOKENS` tokens runs first (when
    ``warmup``), so that one-off start-up costs of the framework do not land in the measured ms per
    token, and a long prompt is prefilled once. The hierarchy and the check's
    reference share one cache per model, sized to the positions this generation needs where an
    engine allocates its cache up front (llama.cpp), not to the model's whole context.
    """
    if not prompt.strip():  # before any model loads
        raise PromptError("the prompt is empty; pass some text with --prompt")
    specs = parse_chain(chain)
    # load first (the loader keeps what it loaded for the build): the prompt's length sizes the caches
    target = loader.load_chain(specs)[-1]
    assert target is not None  # parse_chain refuses a chain whose target is not a model
    tokenizer: Any = target.tokenizer
    ids = encode_prompt(tokenizer, prompt, chat)
    pool = CachePool(positions_needed(len(ids), max_new_tokens, widths, tree_nodes=True))
    hierarchy, _ = build_hierarchy(specs, widths, loader, caches=pool)
    if warmup:
        hierarchy.prepare()  # on the static engine: every verification's CUDA graph, not captured in the timed run
        hierarchy.generate(ids[:WARMUP_TOKENS], min(4, max_new_tokens), sampling)
    result = hierarchy.generate(ids, max_new_tokens, sampling)
    target_dtype = loader.run_dtype(specs[-1])
    report = GenerateReport(
        chain=[str(s) for s in specs],
        widths=list(widths),
        text=tokenizer.decode(result.tokens, skip_special_tokens=True),
        result=result,
        dtype=target_dtype,
        device=str(loader.device),
        engine=specs[-1].engine or loader.engine,
        lenience=sampling.lenience,
    )
    if check:
        reference, _ = build_hierarchy(specs[-1:], [], loader, caches=pool)
        ref = reference.generate(ids, max_new_tokens, SamplingConfig(mode="greedy"))
        report.check = compare_tokens(result.tokens, ref.tokens, exact=target_dtype == "fp32")
    return report
