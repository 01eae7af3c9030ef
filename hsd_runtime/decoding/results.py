"""What a run reports: per-level counters and the result of one generation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["GenerationResult", "LevelStats"]


@dataclass
class LevelStats:
    """Counters of one level over one generation.

    ``proposed`` counts the tokens this level handed to the level above and ``accepted`` how many
    of them that level accepted (both 0 for the target). A level drafting trees counts in
    ``proposed`` the nodes it drafted, in ``accepted`` the depth the level above accepted, summed
    over its ``trees``; the level above counts in ``nodes_verified`` the nodes it checked. Forward
    passes and their tokens exclude the prompt's prefill, which is counted apart.

    Where the time went: ``time_s`` is the level's model passes with their cache work (the
    n-gram lookup for ``ngram``); it splits into ``forward_s`` (inside the model, or the lookup) and
    ``cache_s`` (prefix matching, rollback, logits bookkeeping). ``draft_s`` is choosing drafted
    tokens from a level-0 model's logits (argmax or sampling) and ``verify_s`` the verification rule this
    level applies to the batch from below (warping included); neither is part of ``time_s``.
    A steered level counts in ``steers`` the steering vectors it computed (one per proposal) and
    in ``steer_s`` the time of their projection (its passes, steered, are in ``time_s``).
    """

    model: str
    forward_passes: int = 0
    tokens_fed: int = 0
    proposed: int = 0
    accepted: int = 0
    trees: int = 0
    nodes_verified: int = 0
    time_s: float = 0.0
    forward_s: float = 0.0
    cache_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    steers: int = 0
    steer_s: float = 0.0
    prefill_tokens: int = 0
    prefill_s: float = 0.0

    def reset(self) -> None:
        """Zero every counter (a new generation)."""
        vars(self).update(vars(LevelStats(model=self.model)))

    def add_pass(self, fed: int, elapsed: float, forward_s: float) -> None:
        """Count one call of a cached model: a pass of ``fed`` tokens (none: served from the
        cache), ``elapsed`` seconds in all of which ``forward_s`` inside the model."""
        if fed:
            self.forward_passes += 1
            self.tokens_fed += fed
        self.time_s += elapsed
        self.forward_s += forward_s
        self.cache_s += elapsed - forward_s

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens_fed / self.forward_passes if self.forward_passes else 0.0

    @property
    def accepted_depth(self) -> float | None:
        """Mean depth accepted per drafted tree (None when this level drafted no tree)."""
        return self.accepted / self.trees if self.trees else None

    @property
    def acceptance(self) -> float | None:
        """The fraction of proposed tokens the level above accepted (None when none proposed)."""
        return self.accepted / self.proposed if self.proposed else None

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "tokens_per_pass": self.tokens_per_pass,
            "acceptance": self.acceptance,
            "accepted_depth": self.accepted_depth,
        }


@dataclass
class GenerationResult:
    """New tokens of one generation of b >= 1 sequences decoded in lockstep, and where its time went.

    One prompt's generation is b = 1, whose sequence ``tokens``, ``prompt_tokens`` and
    ``committed_per_round`` name; a batch in lockstep returns one row per prompt.
    """

    sequences: list[list[int]]  # [b][new tokens]
    prompt_lengths: list[int]  # [b]
    levels: list[LevelStats]  # summed over the sequences; a batched pass counts once
    prefill_s: float
    decode_s: float
    target_rounds: int  # target verification rounds; each commits, for every active sequence, its accepted tokens + 1
    committed: list[list[int]] = field(default_factory=list)  # [b][rounds the sequence took part in]: tokens committed
    target_logits: torch.Tensor | None = None  # [new tokens, V]: the target's row of each (b = 1, keep_logits)

    @property
    def batch(self) -> int:
        """b: the sequences decoded together."""
        return len(self.sequences)

    @property
    def tokens(self) -> list[int]:
        """The new tokens of a one-sequence generation."""
        if self.batch != 1:
            raise ValueError(f"a batch of {self.batch} sequences has no one token list; read sequences")
        return self.sequences[0]

    @property
    def prompt_tokens(self) -> int:
        """The prompt length of a one-sequence generation (the first sequence's)."""
        return self.prompt_lengths[0]

    @property
    def committed_per_round(self) -> list[int]:
        """Tokens committed each target round of a one-sequence generation."""
        return self.committed[0] if self.committed else []

    @property
    def total_tokens(self) -> int:
        """New tokens over every sequence."""
        return sum(len(t) for t in self.sequences)

    @property
    def ms_per_token(self) -> float:
        """Decode wall time per token of one sequence, prefill excluded: the latency each sequence
        sees (the batch's mean tokens per sequence over the wall time)."""
        return 1000.0 * self.decode_s * self.batch / self.total_tokens if self.total_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of the whole batch (throughput)."""
        return self.total_tokens / self.decode_s if self.decode_s else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens committed per sequence per target round it took part in, bonus included (block efficiency)."""
        rounds = sum(len(c) for c in self.committed)
        return sum(sum(c) for c in self.committed) / rounds if rounds else 0.0

    def to_dict(self) -> dict:
        """The result as ``generate --json`` prints it (a batch: a token list and a prompt length per sequence)."""
        one = self.batch == 1
        return {
            **({} if one else {"batch_size": self.batch}),
            "tokens": self.sequences[0] if one else self.sequences,
            "prompt_tokens": self.prompt_lengths[0] if one else self.prompt_lengths,
            "measured_ms_per_token": self.ms_per_token,
            "tokens_per_s": self.tokens_per_s,
            "prefill_ms": 1000.0 * self.prefill_s,
            "decode_s": self.decode_s,
            "mean_accepted_length": self.mean_accepted_length,
            "target_rounds": self.target_rounds,
            "levels": [lv.to_dict() for lv in self.levels],
        }
