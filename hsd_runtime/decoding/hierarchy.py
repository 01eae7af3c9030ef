"""The hierarchy executor: models m_0 < ... < m_K, widths T_0..T_{K-1}, one commit per target pass.

Level 0 drafts T_0 tokens; each level 0 < k < K verifies batches of T_{k-1} from the level below
until it holds exactly T_k; the target verifies one batch of T_{K-1} per round and commits what
it accepted plus one token of its own. K = 0 is plain autoregressive decoding of the target.
A model at level 0 may draft a tree instead (T_0 a :class:`TreeShape` such as 3x2x1): level 1
verifies it in one pass and hands up (or commits) the accepted path plus one token.

One executor decodes b >= 1 prompts in lockstep (rows): every row runs the hierarchy on its own -
it drafts its own tokens, accepts its own number of them at every level and draws from its own
generator - while every model pass serves all rows at once. A level 0 < k < K verifies a batch for
every row that does not hold its T_k tokens yet; a row that does waits as padding until the
slowest is done. Exactness holds per row: a row's tokens and its stopping decisions depend on its
own past only, so greedy output is the target's own greedy decoding of each prompt alone. Trees,
block-draft heads and steering decode one prompt at a time.
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
from ..terms.limits import MAX_BATCH, MAX_WIDTH
from ..terms.shape import TreeShape, Width, positions_needed
from .cache import CachedModel, CachePool
from .confidence import Confident
from .drafters import DraftContext, Drafter, ModelDrafter, StandaloneDrafter, SteeredLevel, Steering, VerifierLevel, standalone
from .results import GenerationResult, LevelStats
from .sampling import SamplingConfig

__all__ = ["Hierarchy", "Member", "check_chain"]

# a member of a chain: a torch causal LM, a model of another engine, a level-0 drafter without a
# model (the n-gram lookup, block-draft heads), or a level-0 model that stops on its confidence
Member = nn.Module | EngineModel | StandaloneDrafter | Confident


def _unwrapped(members: Sequence[Member], widths: Sequence[Width]) -> tuple[list[Member], Confident | None]:
    """The chain's members with a :class:`Confident` level 0 unwrapped to its model, and that
    Confident (None: level 0 drafts its width every round); a Confident member anywhere else, or
    drafting a tree, is refused in one line."""
    out = [m.model if isinstance(m, Confident) else m for m in members]
    for k, m in enumerate(members):
        if not isinstance(m, Confident):
            continue
        if k != 0 or k == len(members) - 1:
            raise ChainError(f"level {k} stops its drafts on its confidence (pmin=); only a model at level 0, below the target, drafts so")
        if widths and isinstance(widths[0], TreeShape):
            raise ChainError(f"widths {widths[0]}: a drafter that stops on its confidence (pmin=) drafts chains, not trees")
    first = members[0] if members else None
    return out, first if isinstance(first, Confident) else None


def check_chain(members: Sequence[Member], widths: Sequence[Width]) -> None:
    """Refuse, with one line, a chain the executor cannot run."""
    if not members:
        raise ChainError("a chain needs at least the target model")
    members, _ = _unwrapped(members, widths)
    if len(widths) != len(members) - 1:
        raise ChainError(
            f"a chain of {len(members)} models needs {len(members) - 1} widths (one per level below the target), got {len(widths)}"
        )
    text, trees = ",".join(map(str, widths)), [k for k, w in enumerate(widths) if isinstance(w, TreeShape)]
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


class Hierarchy:
    """A runnable chain of drafters over a target.

    Args:
        members: level 0 first, target last; each an ``nn.Module`` causal LM or a model of another
            engine (a :class:`~hsd_runtime.models.llamacpp.GgufModel`), or at level 0 only
            a drafter of its own (:class:`~hsd_runtime.decoding.drafters.StandaloneDrafter`: the n-gram
            lookup, or block-draft heads whose host is level 1), or a model in a
            :class:`~hsd_runtime.decoding.confidence.Confident` that ends its drafts on its
            confidence (``pmin=``, ``nmin=``). A model below the target may be
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
        members, confident = _unwrapped(members, widths)
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
                level = ModelDrafter(cached, *((confident.p_min, confident.n_min) if confident else ()))
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
        # why this chain decodes one prompt at a time (None: any number of rows); the engines that
        # do refuse more than one row when their caches open
        trees = next((w for w in self.widths if isinstance(w, TreeShape)), None)
        refusals = [m.rows_refusal for m in members if standalone(m) and m.rows_refusal]
        refusals += ["a steered drafter reads its verifier's hidden rows of one prompt" for m in members if getattr(m, "steerer", None)]
        self.one_row: str | None = f"a draft tree ({trees}) is verified for one prompt at a time" if trees else next(iter(refusals), None)

    @property
    def depth(self) -> int:
        """K: the number of levels below the target."""
        return len(self.levels) - 1

    def prepare(self) -> None:
        """Make every model level's passes ready before a timed decode: a verification feeds a
        draft and one token more (a tree: its nodes and one), so passes of up to the widest draft
        plus one (the static engine captures their CUDA graphs now; other engines need nothing)."""
        widest = 1 + max(((w.nodes if isinstance(w, TreeShape) else w) for w in self.widths), default=0)
        for cache in self._caches:
            cache.prepare(widest)

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        sampling: SamplingConfig | None = None,
        keep_logits: bool = False,
        reuse_prompt: bool = False,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after ``prompt``, stopping after an EOS token: one row
        of :meth:`generate_batch`, drawing from a generator seeded with ``sampling.seed``.

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
        return self._decode([prompt], max_new_tokens, sampling, [sampling.seed], True, keep_logits, reuse_prompt)

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        sampling: SamplingConfig | None = None,
        stop_at_eos: bool = True,
        seeds: Sequence[int] | None = None,
        reuse_prompt: bool = False,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after each of ``prompts`` in lockstep, one row each.

        A row stops after an EOS token (unless not ``stop_at_eos``: every row then decodes exactly
        ``max_new_tokens``, as serving benchmarks do) and waits as padding until the batch is done.
        Row i draws from its own generator, seeded with ``seeds[i]`` or, without ``seeds``, from
        ``sampling.seed`` and i; a row's tokens depend on its prompt and its seed only, not on the
        batch it runs in. ``reuse_prompt`` as in :meth:`generate`, for the same prompts.
        """
        sampling = sampling or SamplingConfig()
        rows = [list(p) for p in prompts]
        if not rows or len(rows) > MAX_BATCH:
            raise PromptError(f"a batch holds 1 to {MAX_BATCH} prompts, got {len(rows)}")
        if any(not p for p in rows):
            raise PromptError("a prompt is empty; give at least one token")
        if len(rows) > 1 and self.one_row is not None:
            raise ChainError(f"{self.one_row}: decode these prompts one at a time (batch size 1)")
        if seeds is not None and len(seeds) != len(rows):
            raise PromptError(f"{len(rows)} prompts need {len(rows)} seeds, got {len(seeds)}")
        if seeds is None:
            seeder = torch.Generator().manual_seed(sampling.seed)
            seeds = torch.randint(0, 2**62, (len(rows),), generator=seeder).tolist()
        return self._decode(rows, max_new_tokens, sampling, [int(s) for s in seeds], stop_at_eos, False, reuse_prompt)

    def _check_length(self, rows: list[list[int]], max_new_tokens: int) -> None:
        """Refuse a generation longer than a level's context (or an up-front cache's cells) can hold."""
        if max_new_tokens < 1:
            raise ChainError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        longest = max(len(p) for p in rows)
        which = "the prompt has" if len(rows) == 1 else "the longest prompt has"
        # drafts run ahead of the committed text by at most twice the widths (a tree by its depth in
        # positions); all must fit every level
        needed = positions_needed(longest, max_new_tokens, self.widths)
        if self.context_limit is not None and needed > self.context_limit:
            raise PromptError(
                f"{which} {longest} tokens; with {max_new_tokens} new tokens and the drafts it needs {needed} positions, "
                f"more than the models' context of {self.context_limit}: shorten the prompt or lower --max-new-tokens"
            )
        cells = positions_needed(longest, max_new_tokens, self.widths, tree_nodes=True)
        if self.cell_limit is not None and cells > self.cell_limit:
            raise PromptError(
                f"{which} {longest} tokens; with {max_new_tokens} new tokens and the drafts (a tree's every node) it "
                f"needs {cells} cache cells, more than the {self.cell_limit} its caches hold: shorten the prompt, "
                "lower --max-new-tokens or draft a smaller tree"
            )

    def _decode(
        self,
        rows: list[list[int]],
        max_new_tokens: int,
        sampling: SamplingConfig,
        seeds: list[int],
        stop_at_eos: bool,
        keep_logits: bool,
        reuse_prompt: bool,
    ) -> GenerationResult:
        """The generation loop over rows: one target round for every unfinished row per step."""
        self._check_length(rows, max_new_tokens)
        for level in self.levels:
            level.stats.reset()
        generators = [torch.Generator(device=self.device).manual_seed(s) for s in seeds]
        self.top.kept = [[] for _ in rows] if keep_logits else None
        for cache in self._caches:
            cache.keep_prompt = reuse_prompt

        t0 = time.perf_counter()
        self.top.prefill(rows)
        t1 = time.perf_counter()
        seqs = [list(p) for p in rows]
        done = [False] * len(rows)
        committed: list[list[int]] = [[] for _ in rows]
        rounds = 0
        while not all(done):
            budget = [max(0, max_new_tokens - (len(s) - len(p)) - 1) for s, p in zip(seqs, rows)]
            got = self.top.round(DraftContext(seqs, [not d for d in done], sampling, generators, budget))
            rounds += 1
            for i, proposal in enumerate(got):
                if proposal is None:
                    continue
                made = len(seqs[i]) - len(rows[i])
                tokens = proposal.tokens[: max_new_tokens - made]
                stop = next((k for k, t in enumerate(tokens) if t in self.eos_token_ids), None) if stop_at_eos else None
                if stop is not None:
                    tokens = tokens[: stop + 1]
                seqs[i] += tokens
                committed[i].append(len(tokens))
                done[i] = stop is not None or made + len(tokens) >= max_new_tokens
        t2 = time.perf_counter()
        kept, self.top.kept = self.top.kept, None
        new = len(seqs[0]) - len(rows[0])
        return GenerationResult(
            sequences=[s[len(p) :] for s, p in zip(seqs, rows)],
            prompt_lengths=[len(p) for p in rows],
            levels=[replace(level.stats) for level in self.levels],  # copies: the next generation resets the counters
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            target_rounds=rounds,
            committed=committed,
            target_logits=None if kept is None else torch.cat(kept[0])[:new],  # rows past a cut last round dropped
        )
