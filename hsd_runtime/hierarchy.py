"""The hierarchy executor: models m_0 < ... < m_K, widths T_0..T_{K-1}, one commit per target pass.

Level 0 drafts T_0 tokens; each level 0 < k < K verifies batches of T_{k-1} from the level below
until it holds exactly T_k; the target verifies one batch of T_{K-1} per round and commits what
it accepted plus one token of its own. K = 0 is plain autoregressive decoding of the target.
A model at level 0 may draft a tree instead (T_0 a :class:`TreeShape` such as 3x2x1): level 1
verifies it in one pass and hands up (or commits) the accepted path plus one token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import torch
from torch import nn

from .bpd import BpdDrafter, check_host, load_bpd
from .cache import CachedModel
from .drafters import DraftContext, Drafter, ModelDrafter, VerifierLevel
from .engines.llamacpp import GgufModel
from .errors import ChainError, PromptError
from .limits import MAX_WIDTH
from .loading import ModelLoader, check_same_tokenizer, context_limit, head_rows
from .ngram import NgramDrafter
from .sampling import SamplingConfig
from .shape import TreeShape, Width
from .spec import ModelSpec, parse_spec
from .stats import GenerationResult, LevelStats
from .steering import SteeredDrafter, Steerer, check_verifier, steer_model

__all__ = ["Hierarchy", "build_hierarchy"]


class Hierarchy:
    """A runnable chain of drafters over a target.

    Args:
        members: level 0 first, target last; each an ``nn.Module`` causal LM or a model of another
            engine (a :class:`~hsd_runtime.engines.llamacpp.GgufModel`), or at level 0 only
            an :class:`NgramDrafter` or a :class:`BpdDrafter` (whose host is level 1). A model
            below the target may be steered (:func:`~hsd_runtime.steering.steered_model`): the
            level above it then keeps the inputs of the layers its steering reads.
        widths: T_k for every level below the target (``len(members) - 1`` values, each >= 1);
            the first may be a :class:`TreeShape` when level 0 is a model.
        names: one label per level for the stats (defaults to the class names).
        logits_width: columns of the shared vocabulary (defaults to the smallest head).
        eos_token_ids: tokens that end generation.
    """

    def __init__(
        self,
        members: Sequence[nn.Module | GgufModel | NgramDrafter | BpdDrafter],
        widths: Sequence[Width],
        names: Sequence[str] | None = None,
        logits_width: int | None = None,
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        if not members:
            raise ChainError("a chain needs at least the target model")
        if len(widths) != len(members) - 1:
            raise ChainError(
                f"a chain of {len(members)} models needs {len(members) - 1} widths (one per level below the target), got {len(widths)}"
            )
        text = ",".join(map(str, widths))
        if any(isinstance(w, TreeShape) for w in widths[1:]):
            raise ChainError(f"widths {text}: only level 0 drafts trees; the levels above hand up T tokens")
        if widths and isinstance(widths[0], TreeShape) and isinstance(members[0], NgramDrafter):
            raise ChainError(f"widths {text}: ngram drafts chains only; give level 0 a number or make it a model")
        if any(isinstance(w, int) and w < 1 for w in widths):
            raise ChainError(f"widths must be >= 1, got {text}")
        if any(isinstance(w, int) and w > MAX_WIDTH for w in widths):
            raise ChainError(f"widths must be <= {MAX_WIDTH}, got {text}")
        if any(isinstance(m, NgramDrafter) for m in members[1:]):
            raise ChainError("ngram can only be the lowest level of a chain (it cannot verify)")
        if any(isinstance(m, BpdDrafter) for m in members[1:]) or (len(members) == 1 and isinstance(members[0], BpdDrafter)):
            raise ChainError("bpd can only be the lowest level of a chain, directly below the model whose heads it holds")
        if widths and isinstance(widths[0], TreeShape) and isinstance(members[0], BpdDrafter):
            raise ChainError(f"widths {text}: a bpd drafter's width is its block length; its tree comes from p= paths")
        names = list(names) if names is not None else [type(m).__name__ for m in members]
        models = [m for m in members if not isinstance(m, (NgramDrafter, BpdDrafter))]
        width = logits_width or min(head_rows(m) for m in models)
        self.names = names
        self.widths = list(widths)
        self.eos_token_ids = frozenset(eos_token_ids)
        top_model = models[-1]
        self.device = torch.device("cpu") if isinstance(top_model, GgufModel) else next(top_model.parameters()).device
        # the shortest context any level can attend over (None: no model declares one)
        self.context_limit: int | None = min((x for x in map(context_limit, models) if x is not None), default=None)

        self.levels: list[Drafter] = []
        last = len(members) - 1
        if getattr(members[last], "steerer", None) is not None:
            raise ChainError(f"{names[last]} is steered by the model above it; the target has none")
        for k, member in enumerate(members):
            if isinstance(member, (NgramDrafter, BpdDrafter)):
                member.stats = LevelStats(model=names[k])
                self.levels.append(member)
                continue
            below = members[k - 1] if k else None
            carries = isinstance(below, BpdDrafter)  # the host keeps its hidden rows for the heads
            steerer: Steerer | None = getattr(below, "steerer", None)  # or the inputs of the layers that steer the level below
            taps = tuple(steerer.card.taps) if steerer is not None else ()
            cached = CachedModel(member, width, LevelStats(model=names[k]), keep_hidden=carries or bool(taps), layers=taps)
            if carries:
                cast(BpdDrafter, below).attach(cached)
            level: Drafter
            if k == 0 and k < last:
                level = ModelDrafter(cached)
            else:  # a verifier; the target alone (K = 0) verifies an empty draft each round
                # a lenience in the sampling config relaxes the target's test only
                level = VerifierLevel(cached, self.levels[-1] if k else None, widths[k - 1] if k else 0, lenient=k == last)
            if taps:
                cast(SteeredDrafter, self.levels[-1]).attach(cached)
            own: Steerer | None = getattr(member, "steerer", None)
            if own is not None:  # a steered model: its vectors are set before each of its proposals
                assert isinstance(level, (ModelDrafter, VerifierLevel))
                level = SteeredDrafter(level, own)
            self.levels.append(level)
        top = self.levels[-1]
        assert isinstance(top, VerifierLevel)  # the last member is a model (checked above)
        self.top = top

    @property
    def depth(self) -> int:
        """K: the number of levels below the target."""
        return len(self.levels) - 1

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        sampling: SamplingConfig | None = None,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after ``prompt``, stopping after an EOS token."""
        sampling = sampling or SamplingConfig()
        prompt = list(prompt)
        if not prompt:
            raise PromptError("the prompt is empty; give at least one token")
        if max_new_tokens < 1:
            raise ChainError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        # drafts run ahead of the committed text by at most twice the widths (a tree by its depth in
        # positions); all must fit every level
        ahead = sum(w.depth if isinstance(w, TreeShape) else w for w in self.widths)
        needed = len(prompt) + max_new_tokens + 2 * ahead + 1
        if self.context_limit is not None and needed > self.context_limit:
            raise PromptError(
                f"the prompt has {len(prompt)} tokens; with {max_new_tokens} new tokens and the drafts it needs {needed} positions, "
                f"more than the models' context of {self.context_limit}: shorten the prompt or lower --max-new-tokens"
            )
        for level in self.levels:
            level.stats.reset()
        generator = torch.Generator(device=self.device).manual_seed(sampling.seed)

        t0 = time.perf_counter()
        self.top.prefill(prompt)
        t1 = time.perf_counter()
        seq = list(prompt)
        per_round: list[int] = []
        while len(seq) - len(prompt) < max_new_tokens:
            got = self.top.round(DraftContext(seq, sampling, generator)).tokens
            got = got[: max_new_tokens - (len(seq) - len(prompt))]
            stop = next((i for i, t in enumerate(got) if t in self.eos_token_ids), None)
            if stop is not None:
                got = got[: stop + 1]
            seq += got
            per_round.append(len(got))
            if stop is not None:
                break
        t2 = time.perf_counter()
        return GenerationResult(
            tokens=seq[len(prompt) :],
            prompt_tokens=len(prompt),
            levels=[replace(level.stats) for level in self.levels],  # copies: the next generation resets the counters
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            target_rounds=len(per_round),
            committed_per_round=per_round,
        )


def build_hierarchy(chain: Sequence[str | ModelSpec], widths: Sequence[Width], loader: ModelLoader) -> tuple[Hierarchy, object]:
    """Load ``chain`` (smallest first, target last) and build its hierarchy.

    Returns the hierarchy and the target's tokenizer. Raises if the models do not share a
    tokenizer or a spec cannot be loaded.
    """
    specs = [parse_spec(s) if isinstance(s, str) else s for s in chain]
    if not specs or not specs[-1].is_model:
        raise ChainError("the last model of a chain is the target and cannot be ngram or bpd")
    loaded = [None if m is None else steer_model(m) for m in loader.load_chain(specs)]
    models = [m for m in loaded if m is not None]
    width = check_same_tokenizer(models)
    members: list[nn.Module | GgufModel | NgramDrafter | BpdDrafter] = []
    for i, (s, m) in enumerate(zip(specs, loaded)):
        if s.is_bpd:
            drafter = load_bpd(s, loader, models)
            check_host(drafter, s, specs[i + 1] if i + 1 < len(specs) else None)
            members.append(drafter)
        else:
            if s.steer is not None and m is not None:
                steered: Any = m.model
                check_verifier(s, steered.steerer, specs[i + 1] if i + 1 < len(specs) else None)
            members.append(NgramDrafter(n=s.ngram_order, name=str(s), min_size=s.ngram_min) if m is None else m.model)
    target = models[-1]
    hierarchy = Hierarchy(members, widths, names=[str(s) for s in specs], logits_width=width, eos_token_ids=target.eos_token_ids)
    return hierarchy, target.tokenizer
