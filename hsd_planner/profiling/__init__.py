"""Profiling: measuring latency curves and pairwise acceptance into the database (``hsd-plan profile``).

Owns the measurements themselves (:mod:`.timing`, :mod:`.acceptance`, :mod:`.siblings`: pure
functions of models and tokens), the machine's floor (:mod:`.floor`), the hardware and
model-source fingerprints, and the resumable profiling run: what it is asked
(:mod:`.config`), the run (:mod:`.runner`), its interleaved latency sweep (:mod:`.sweep`), the
verifiers' continuations it drafts (:mod:`.continuations`), its acceptance step, prompt by prompt
(:mod:`.pairs`), and its summary (:mod:`.summary`). Each drafter is timed, bound to the level above
it and measured as its kind says (:mod:`hsd_runtime.terms.kinds`).
What it measures becomes a :class:`hsd_planner.plan.Profile` when the store reads it back.
Imports the runtime, :mod:`hsd_planner.store` for every read and write (one transaction per
measurement) and :mod:`hsd_planner.plan`; nothing imports it but the CLI, validation, training
and the demo.
"""

from .config import ProfileConfig, ProfiledModel, ProfileOutcome
from .hardware import detect_hardware
from .runner import PreparedProfile, prepare_profile, run_profile, workload_context_lens
from .summary import SUMMARY_N, ProfileSummary, profile_summary

__all__ = [
    "SUMMARY_N",
    "PreparedProfile",
    "ProfileConfig",
    "ProfileOutcome",
    "ProfileSummary",
    "ProfiledModel",
    "detect_hardware",
    "prepare_profile",
    "profile_summary",
    "run_profile",
    "workload_context_lens",
]
