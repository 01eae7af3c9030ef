"""What a run reports: per-level counters and the result of one generation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    """New tokens of one generation and where its time went."""

    tokens: list[int]
    prompt_tokens: int
    levels: list[LevelStats]
    prefill_s: float
    decode_s: float
    target_rounds: int  # target verification rounds; each commits accepted tokens + 1
    committed_per_round: list[int] = field(default_factory=list)

    @property
    def ms_per_token(self) -> float:
        """Decode wall time per generated token, prefill excluded."""
        return 1000.0 * self.decode_s / len(self.tokens) if self.tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens committed per target verification round, bonus included (block efficiency)."""
        return len(self.tokens) / self.target_rounds if self.target_rounds else 0.0

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "measured_ms_per_token": self.ms_per_token,
            "tokens_per_s": self.tokens_per_s,
            "prefill_ms": 1000.0 * self.prefill_s,
            "decode_s": self.decode_s,
            "mean_accepted_length": self.mean_accepted_length,
            "target_rounds": self.target_rounds,
            "levels": [lv.to_dict() for lv in self.levels],
        }
