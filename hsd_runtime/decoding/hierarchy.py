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

import torch
from torch import nn

from ..models.engine import EngineModel
from ..models.loading import context_limit, head_rows
from ..models.torch_engine import engine_model
from ..terms.errors import ChainError, PromptError
from ..terms.limits import MAX_WIDTH
from ..terms.shape import TreeShape, Width, positions_needed
from .cache import CachedModel, CachePool
from .drafters import DraftContext, Drafter, ModelDrafter, StandaloneDrafter, SteeredLevel, Steering, VerifierLevel, standalone
from .results import GenerationResult, LevelStats
from .sampling import SamplingConfig

__all__ = ["Hierarchy", "Member", "check_chain"]

# a member of a chain: a torch causal LM, a model of another engine, or a level-0 drafter without a
# model (the n-gram lookup, block-draft heads)
Member = nn.Module | EngineModel | StandaloneDrafter


def check_chain(members: Sequence[Member], widths: Sequence[Width], batched: bool = False) -> None:
    """Refuse, with one line, a chain an executor cannot run (``batched``: the batched one, which
    runs chains of torch models over an optional n-gram lookup, and no tree)."""
    if not members:
        raise ChainError("a chain needs at least the target model")
    if len(widths) != len(members) - 1:
        raise ChainError(
            f"a chain of {len(members)} models needs {len(members) - 1} widths (one per level below the target), got {len(widths)}"
        )
    text, trees = ",".join(map(str, widths)), [k for k, w in enumerate(widths) if isinstance(w, TreeShape)]
    if batched and trees:
        raise ChainError(f"widths {text}: a batched hierarchy drafts chains only; give every level a number of tokens")
    if any(k > 0 for k in trees):
        raise ChainError(f"widths {text}: only level 0 drafts trees; the levels above hand up T tokens")
    first = members[0]
    if trees and standalone(first):
        raise ChainError(f"widths {text}: {first.tree_refusal}")
    if any(isinstance(w, int) and w < 1 for w in widths):
        raise ChainError(f"widths must be >= 1, got {text}")
    if any(isinstance(w, int) and w > MAX_WIDTH for w in widths):
        raise ChainError(f"widths must be <= {MAX_WIDTH}, got {text}")
    misplaced = next((m for m in members[1:] if standalone(m)), first if len(members) == 1 and standalone(first) else None)
    if misplaced is not None:
        raise ChainError(misplaced.placement)
    if batched and not all(not m.reads_host if standalone(m) else engine_model(m).engine == "torch" for m in members):
        raise ChainError("the batched runtime runs torch models and ngram only")


class Hierarchy:
    """A runnable chain of drafters over a target.

    Args:
        members: level 0 first, target last; each an ``nn.Module`` causal LM or a model of another
            engine (a :class:`~hsd_runtime.models.llamacpp.GgufModel`), or at level 0 only
            a drafter of its own (:class:`~hsd_runtime.decoding.drafters.StandaloneDrafter`: the n-gram
            lookup, or block-draft heads whose host is level 1). A model below the target may be
            steered (it carries a :class:`~hsd_runtime.decoding.drafters.Steering` as ``steerer``): the
            level above it then keeps the inputs of the layers its steering reads.
        widths: T_k for every level below the target (``len(members) - 1`` values, each >= 1);
            the first may be a :class:`TreeShape` when level 0 is a model.
        names: one label per level for the stats (defaults to the class names).
        logits_width: columns of the shared vocabulary (defaults to the smallest head).
        eos_token_ids: tokens that end generation.
        caches: a pool shared with other hierarchies run one at a time: each model level takes
            its model's cache from it, so a generation of the prompt another of them prefilled
            last keeps that prefill (with ``reuse_prompt``), and the keys and values are held once.
    """

    def __init__(
        self,
        members: Sequence[Member],
        widths: Sequence[Width],
        names: Sequence[str] | None = None,
        logits_width: int | None = None,
        eos_token_ids: Sequence[int] = (),
        caches: CachePool | None = None,
    ) -> None:
        check_chain(members, widths)
        names = list(names) if names is not None else [type(m).__name__ for m in members]
        models = [m for m in members if not standalone(m)]
        width = logits_width or min(head_rows(m) for m in models)
        self.names = names
        self.widths = list(widths)
        self.eos_token_ids = frozenset(eos_token_ids)
        top_model = models[-1]
        # where the target's logits come back (llama.cpp: the CPU)
        self.device = engine_model(top_model).device
        # the shortest context any level can attend over (None: no model declares one)
        self.context_limit: int | None = min((x for x in map(context_limit, models) if x is not None), default=None)
        # the fewest cells any cache of an engine that allocates them up front (llama.cpp) holds: its
        # context, or a pool's cells; such a cache holds every node of a tree in a cell of its own
        cells = [x for x in map(context_limit, (m for m in models if engine_model(m).allocates_cells)) if x is not None]
        if cells and caches is not None and caches.cells is not None:
            cells.append(caches.cells)
        self.cell_limit: int | None = min(cells, default=None)

        self.levels: list[Drafter] = []
        self._caches: list[CachedModel] = []  # every model level's cache
        last = len(members) - 1
        if getattr(members[last], "steerer", None) is not None:
            raise ChainError(f"{names[last]} is steered by the model above it; the target has none")
        steered: SteeredLevel | None = None  # the last level wrapped by its steering
        for k, member in enumerate(members):
            if standalone(member):
                member.stats = LevelStats(model=names[k])
                self.levels.append(member)
                continue
            below = members[k - 1] if k else None
            reader = below if standalone(below) and below.reads_host else None  # block-draft heads read this level's hidden rows
            steerer: Steering | None = getattr(below, "steerer", None)  # or the inputs of the layers that steer the level below
            taps = steerer.taps if steerer is not None else ()
            keep_hidden = reader is not None or bool(taps)
            if caches is not None and not any(c.model is member for c in self._caches):  # a model listed twice: its own second cache
                cached = caches.get(member, names[k], width, keep_hidden, taps)
            else:
                cached = CachedModel(member, width, LevelStats(model=names[k]), keep_hidden=keep_hidden, layers=taps)
            self._caches.append(cached)
            if reader is not None:
                reader.attach(cached)
            level: Drafter
            if k == 0 and k < last:
                level = ModelDrafter(cached)
            else:  # a verifier; the target alone (K = 0) verifies an empty draft each round
                # a lenience in the sampling config relaxes the target's test only
                level = VerifierLevel(cached, self.levels[-1] if k else None, widths[k - 1] if k else 0, lenient=k == last)
            if taps:
                assert steered is not None  # the level below carries the steerer, so it was wrapped
                steered.attach(cached)
            own: Steering | None = getattr(member, "steerer", None)
            if own is not None:  # a steered model: its vectors are set before each of its proposals
                assert isinstance(level, (ModelDrafter, VerifierLevel))
                level = steered = own.wrap(level)
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
        keep_logits: bool = False,
        reuse_prompt: bool = False,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after ``prompt``, stopping after an EOS token.

        ``reuse_prompt``: where this is the prompt of the previous generation, every model keeps
        its keys and values and the logits row its prefill gave, and feeds nothing for it: the same
        generation without the prefill's time (``prefill_s`` near zero, ``prefill_tokens`` 0).

        ``keep_logits``: the result's ``target_logits`` holds the target's logits row of every new
        token (``[m, V]``, row t predicts token t from the prompt and the tokens before it), kept
        from its verification passes: what a teacher-forced pass over the output would compute,
        without running one.
        """
        sampling = sampling or SamplingConfig()
        prompt = list(prompt)
        if not prompt:
            raise PromptError("the prompt is empty; give at least one token")
        if max_new_tokens < 1:
            raise ChainError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        # drafts run ahead of the committed text by at most twice the widths (a tree by its depth in
        # positions); all must fit every level
        needed = positions_needed(len(prompt), max_new_tokens, self.widths)
        if self.context_limit is not None and needed > self.context_limit:
            raise PromptError(
                f"the prompt has {len(prompt)} tokens; with {max_new_tokens} new tokens and the drafts it needs {needed} positions, "
                f"more than the models' context of {self.context_limit}: shorten the prompt or lower --max-new-tokens"
            )
        cells = positions_needed(len(prompt), max_new_tokens, self.widths, tree_nodes=True)
        if self.cell_limit is not None and cells > self.cell_limit:
            raise PromptError(
                f"the prompt has {len(prompt)} tokens; with {max_new_tokens} new tokens and the drafts (a tree's every node) it "
                f"needs {cells} cache cells, more than the {self.cell_limit} its caches hold: shorten the prompt, "
                "lower --max-new-tokens or draft a smaller tree"
            )
        for level in self.levels:
            level.stats.reset()
        generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        self.top.kept = [] if keep_logits else None
        for cache in self._caches:
            cache.keep_prompt = reuse_prompt

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
        kept, self.top.kept = self.top.kept, None
        new = len(seq) - len(prompt)
        return GenerationResult(
            sequences=[seq[len(prompt) :]],
            prompt_lengths=[len(prompt)],
            levels=[replace(level.stats) for level in self.levels],  # copies: the next generation resets the counters
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            target_rounds=len(per_round),
            committed=[per_round],
            target_logits=None if kept is None else torch.cat(kept)[:new],  # rows past a cut last round dropped
        )
