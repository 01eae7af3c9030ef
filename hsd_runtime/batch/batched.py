"""A hierarchy over a batch: b prompts decoded in lockstep, one batched pass per level per step.

Every sequence runs the hierarchy of :mod:`hsd_runtime.decoding.hierarchy` on its own - it drafts its own tokens,
accepts its own number of them at every level, and is rolled back on its own - but every model
pass serves all sequences at once over one ragged KV layout (:mod:`.ragged`). Level 0 drafts T_0
tokens for every sequence (T_0 batched passes; the n-gram lookup runs per sequence). A level
0 < k < K verifies, in one batched pass, a batch from the level below for every sequence that does
not hold its T_k tokens yet; a sequence that does waits as padding until the slowest one is done.
The target verifies one batch per sequence per round, and every sequence commits its own accepted
tokens plus one.

Exactness holds per sequence: a sequence's tokens, its stopping decisions and (sampling) its random
draws depend on its own past only - each sequence draws from its own generator - so each follows
the target's law, and greedy output is the target's own greedy decoding of each prompt alone.
Chains only: a draft tree is not batched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from ..decoding.drafters import Proposal
from ..decoding.hierarchy import Member, check_chain
from ..decoding.ngram import NgramDrafter, ngram_lookup
from ..decoding.results import GenerationResult, LevelStats
from ..decoding.sampling import SamplingConfig, draw, warp
from ..decoding.verify import verify_greedy, verify_sample
from ..models.loading import context_limit, head_rows
from ..terms.errors import ChainError, PromptError
from ..terms.limits import MAX_BATCH
from ..terms.shape import Width, positions_needed
from .ragged import BatchedCache

__all__ = ["BatchedHierarchy"]


@dataclass(frozen=True)
class BatchContext:
    """What each sequence of the batch is asked to continue: ``tokens[i]`` for the rows with
    ``active[i]`` (the others wait this step), how tokens are chosen, one generator per row."""

    tokens: list[list[int]]
    active: list[bool]
    sampling: SamplingConfig
    generators: list[torch.Generator]


def _choose(logits: torch.Tensor, ctx: BatchContext, row: int) -> tuple[int, torch.Tensor | None]:
    """Pick one token of row ``row`` from logits ``[1, V]``; its distribution ``[1, V]`` when sampling."""
    if ctx.sampling.greedy:
        return int(logits[0].argmax()), None
    probs = warp(logits, ctx.sampling)
    return draw(probs[0], ctx.generators[row]), probs


class BatchedModelDrafter:
    """Level 0 backed by a model: ``n`` batched passes draft ``n`` tokens for every active sequence."""

    def __init__(self, cached: BatchedCache) -> None:
        self.cached = cached
        self.stats = cached.stats

    def prefill(self, prompts: Sequence[list[int]]) -> None:
        self.cached.prefill(prompts)

    def propose(self, ctx: BatchContext, n: int) -> list[Proposal | None]:
        seqs = [list(t) if a else None for t, a in zip(ctx.tokens, ctx.active)]
        probs: list[list[torch.Tensor]] = [[] for _ in seqs]
        for _ in range(n):
            rows = self.cached.logits(seqs, [len(s) - 1 if s is not None else 0 for s in seqs])
            t0 = time.perf_counter()
            for i, (seq, logits) in enumerate(zip(seqs, rows)):
                if seq is None or logits is None:
                    continue
                token, p = _choose(logits, ctx, i)
                seq.append(token)
                if p is not None:
                    probs[i].append(p)
            self.stats.draft_s += time.perf_counter() - t0
        return [
            None if seq is None else Proposal(seq[len(ctx.tokens[i]) :], torch.cat(probs[i]) if probs[i] else None)
            for i, seq in enumerate(seqs)
        ]


class BatchedNgram:
    """Level 0 without a model: the n-gram lookup, once per active sequence (it may propose nothing)."""

    def __init__(self, drafter: NgramDrafter) -> None:
        self.n = drafter.n
        self.min_size = drafter.min_size
        self.stats = drafter.stats

    def prefill(self, prompts: Sequence[list[int]]) -> None:
        """Nothing to cache: the lookup reads the context each time."""

    def propose(self, ctx: BatchContext, n: int) -> list[Proposal | None]:
        t0 = time.perf_counter()
        out = [Proposal(ngram_lookup(t, self.n, n, self.min_size)) if a else None for t, a in zip(ctx.tokens, ctx.active)]
        self.stats.forward_passes += 1
        elapsed = time.perf_counter() - t0
        self.stats.time_s += elapsed
        self.stats.forward_s += elapsed
        return out


class BatchedVerifier:
    """A model verifying, in one batched pass, a batch from the level below for every active sequence.

    Args:
        cached: this level's model and ragged cache.
        lower: the level below, or None for a target decoding on its own (K = 0).
        width: how many tokens to ask of ``lower`` per round (T of the level below).
        lenient: verify with the sampling config's lenience (the target only, as :class:`~hsd_runtime.decoding.drafters.VerifierLevel`).
    """

    def __init__(
        self,
        cached: BatchedCache,
        lower: BatchedModelDrafter | BatchedNgram | BatchedVerifier | None,
        width: int,
        lenient: bool = False,
    ) -> None:
        self.cached = cached
        self.stats = cached.stats
        self.lower = lower
        self.width = width
        self.lenient = lenient

    def prefill(self, prompts: Sequence[list[int]]) -> None:
        self.cached.prefill(prompts)
        if self.lower is not None:
            self.lower.prefill(prompts)

    def round(self, ctx: BatchContext) -> list[Proposal | None]:
        """One round for every active sequence: its batch from below verified, its accepted tokens
        plus one returned (in sampling mode with this level's p for each)."""
        if self.lower is not None:
            drafts = self.lower.propose(ctx, self.width)
        else:
            drafts = [Proposal([]) if a else None for a in ctx.active]
        seqs = [None if d is None else ctx.tokens[i] + d.tokens for i, d in enumerate(drafts)]
        rows = self.cached.logits(seqs, [len(t) - 1 for t in ctx.tokens])  # row i: [len(draft) + 1, V]
        t0 = time.perf_counter()
        out: list[Proposal | None] = []
        for i, (draft, logits) in enumerate(zip(drafts, rows)):
            if draft is None or logits is None:
                out.append(None)
                continue
            if ctx.sampling.greedy:
                n, token = verify_greedy(draft.tokens, logits.argmax(-1).tolist())
                probs = None
            else:
                p = warp(logits, ctx.sampling)
                n, token = verify_sample(draft.tokens, draft.probs, p, ctx.generators[i], ctx.sampling.lenience if self.lenient else 1.0)
                probs = p[: n + 1]  # this level's own p for the emitted tokens, never q or the residual
            if self.lower is not None:
                self.lower.stats.proposed += len(draft.tokens)
                self.lower.stats.accepted += n
            out.append(Proposal(draft.tokens[:n] + [token], probs))
        self.stats.verify_s += time.perf_counter() - t0
        return out

    def propose(self, ctx: BatchContext, n: int) -> list[Proposal | None]:
        """Rounds until every active sequence holds ``n`` tokens; exactly ``n`` each.

        A sequence that holds its ``n`` waits (padding) while the others go on: when it stops
        depends on its own past only, so dropping its overshoot keeps it exact.
        """
        held: list[list[int]] = [[] for _ in ctx.tokens]
        probs: list[list[torch.Tensor]] = [[] for _ in ctx.tokens]
        while True:
            need = [a and len(h) < n for a, h in zip(ctx.active, held)]
            if not any(need):
                break
            got = self.round(replace(ctx, tokens=[t + h for t, h in zip(ctx.tokens, held)], active=need))
            for i, g in enumerate(got):
                if g is not None:
                    held[i] += g.tokens
                    if g.probs is not None:
                        probs[i].append(g.probs)
        return [Proposal(held[i][:n], torch.cat(probs[i])[:n] if probs[i] else None) if a else None for i, a in enumerate(ctx.active)]


class BatchedHierarchy:
    """A runnable chain of drafters over a target, for a batch of prompts in lockstep.

    Args:
        members: level 0 first, target last; each an ``nn.Module`` causal LM, or an
            :class:`NgramDrafter` at level 0 only (:func:`~hsd_runtime.decoding.hierarchy.check_chain`).
        widths: T_k for every level below the target, each a number of tokens (no tree).
        names: one label per level for the stats (defaults to the class names).
        logits_width: columns of the shared vocabulary (defaults to the smallest head).
        eos_token_ids: tokens that end a sequence's generation.
    """

    def __init__(
        self,
        members: Sequence[Member],
        widths: Sequence[Width],
        names: Sequence[str] | None = None,
        logits_width: int | None = None,
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        check_chain(members, widths, batched=True)
        chain_widths = [w for w in widths if isinstance(w, int)]  # all of them (checked)
        names = list(names) if names is not None else [type(m).__name__ for m in members]
        models = [m for m in members if isinstance(m, nn.Module)]
        width = logits_width or min(head_rows(m) for m in models)
        self.names = names
        self.widths = chain_widths
        self.eos_token_ids = frozenset(eos_token_ids)
        self.device = next(models[-1].parameters()).device
        limits = [context_limit(m) for m in models]
        self.context_limit: int | None = min((x for x in limits if isinstance(x, int)), default=None)

        levels: list[BatchedModelDrafter | BatchedNgram | BatchedVerifier] = []
        last = len(members) - 1
        for k, member in enumerate(members):
            if isinstance(member, NgramDrafter):
                member.stats = LevelStats(model=names[k])
                levels.append(BatchedNgram(member))
                continue
            assert isinstance(member, nn.Module)  # checked
            cached = BatchedCache(member, width, LevelStats(model=names[k]), 1)
            if k == 0 and k < last:
                levels.append(BatchedModelDrafter(cached))
            else:  # a verifier; the target alone (K = 0) verifies an empty draft each round
                levels.append(BatchedVerifier(cached, levels[-1] if k else None, chain_widths[k - 1] if k else 0, lenient=k == last))
        top = levels[-1]
        assert isinstance(top, BatchedVerifier)  # the last member is a model (checked above)
        self.levels = levels
        self.top = top

    @property
    def depth(self) -> int:
        """K: the number of levels below the target."""
        return len(self.levels) - 1

    def _check(self, prompts: list[list[int]], max_new_tokens: int) -> None:
        if not prompts or len(prompts) > MAX_BATCH:
            raise PromptError(f"a batch holds 1 to {MAX_BATCH} prompts, got {len(prompts)}")
        if any(not p for p in prompts):
            raise PromptError("a prompt is empty; give at least one token")
        if max_new_tokens < 1:
            raise ChainError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        # drafts run ahead of the committed text by at most twice the widths; all must fit every level
        needed = positions_needed(max(len(p) for p in prompts), max_new_tokens, self.widths)
        if self.context_limit is not None and needed > self.context_limit:
            raise PromptError(
                f"the longest prompt has {max(len(p) for p in prompts)} tokens; with {max_new_tokens} new tokens and the drafts it needs "
                f"{needed} positions, more than the models' context of {self.context_limit}: shorten it or lower --max-new-tokens"
            )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        sampling: SamplingConfig | None = None,
        stop_at_eos: bool = True,
        seeds: Sequence[int] | None = None,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after each of ``prompts`` in lockstep.

        A sequence stops after an EOS token (unless not ``stop_at_eos``: every sequence then
        decodes exactly ``max_new_tokens``, as serving benchmarks do) and waits as padding until
        the batch is done. Sequence i draws from its own generator, seeded with ``seeds[i]`` or,
        without ``seeds``, from ``sampling.seed`` and i; a sequence's tokens depend on its prompt
        and its seed only, not on the batch it runs in.
        """
        sampling = sampling or SamplingConfig()
        rows = [list(p) for p in prompts]
        self._check(rows, max_new_tokens)
        if seeds is not None and len(seeds) != len(rows):
            raise PromptError(f"{len(rows)} prompts need {len(rows)} seeds, got {len(seeds)}")
        for level in self.levels:
            level.stats.reset()
        if seeds is None:
            seeder = torch.Generator().manual_seed(sampling.seed)
            seeds = torch.randint(0, 2**62, (len(rows),), generator=seeder).tolist()
        generators = [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]

        t0 = time.perf_counter()
        self.top.prefill(rows)
        t1 = time.perf_counter()
        seqs = [list(p) for p in rows]
        done = [False] * len(rows)
        committed: list[list[int]] = [[] for _ in rows]
        rounds = 0
        while not all(done):
            got = self.top.round(BatchContext(seqs, [not d for d in done], sampling, generators))
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
        return GenerationResult(
            sequences=[s[len(p) :] for s, p in zip(seqs, rows)],
            prompt_lengths=[len(p) for p in rows],
            levels=[replace(level.stats) for level in self.levels],  # copies: the next generation resets the counters
            prefill_s=t1 - t0,
            decode_s=t2 - t1,
            target_rounds=rounds,
            committed=committed,
        )
