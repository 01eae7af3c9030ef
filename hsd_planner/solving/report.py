"""The typed report of a solve: its context, its ranked plans, and what the pick rests on."""

from __future__ import annotations

from dataclasses import dataclass

from hsd_runtime.terms.choices import Mode

from ..store.records import RankedPlan

__all__ = ["THIN_PROMPTS", "SolveReport"]

# Fewer profiled prompts than this and the pick's acceptance is a thin sample: on the Qwen family,
# 4 prompts per Spec-Bench category predicted a 1.64x pick that held-out prompts ran at 0.88x,
# with a 90% interval of 1.56-1.82; over 100 random splits of 48 HumanEval problems, the
# intervals from 8 and 16 profiled problems held what 6 held-out ones drafted less often than
# 90%, those from 24 as often (docs/benchmarks/predictions.md)
THIN_PROMPTS = 24


@dataclass(frozen=True)
class SolveReport:
    """What ``hsd-plan solve`` stored: the solve's context and its plans, best first."""

    solve_id: int
    target: str
    workload: str
    hardware: str
    mode: Mode
    temperature: float | None  # None for greedy decoding
    acceptance: str
    context_len: int  # the one named, or the median of the workload's contexts the costs were averaged over
    plans: list[RankedPlan]  # best, top, singles, autoregressive
    # what the pick's acceptance rests on: the fewest prompts and positions over its pairs (None for
    # autoregressive decoding, or a profile file without them)
    sample_prompts: int | None = None
    sample_positions: int | None = None
    lenience: float = 1.0  # below 1: acceptance (and the plans) under lossy verification
    max_new_tokens: int | None = None  # the generation length the plans are ranked for (None: the steady state)
    interval_history: int = 0  # past validated plans whose misses widened the intervals (0: the bootstrap alone)

    @property
    def thin_sample(self) -> bool:
        """The pick's acceptance rests on fewer than THIN_PROMPTS prompts: prompts vary more than so
        few show, and a bootstrap over them gives intervals too narrow to trust."""
        return self.sample_prompts is not None and self.sample_prompts < THIN_PROMPTS

    @property
    def best(self) -> RankedPlan:
        return self.plans[0]

    def to_dict(self) -> dict:
        context = (
            "solve_id",
            "target",
            "workload",
            "hardware",
            "mode",
            "temperature",
            "lenience",
            "acceptance",
            "context_len",
            "max_new_tokens",
            "interval_history",
            "sample_prompts",
            "sample_positions",
            "thin_sample",
        )
        pick = ("chain", "widths", "predicted_ms_per_token", "predicted_mean_accepted_length", "predicted_speedup")
        best = self.best.to_dict()
        return {**{k: getattr(self, k) for k in context}, **{k: best[k] for k in pick}, "plans": [p.to_dict() for p in self.plans]}
