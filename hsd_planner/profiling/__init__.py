"""Profiling: measuring latency curves and pairwise acceptance into the database.

Owns the measurements themselves (:mod:`.timing`, :mod:`.acceptance`, :mod:`.siblings`: pure
functions of models and tokens), the hardware fingerprint, the resumable profiling run
(:mod:`.runner`, one committed transaction per measurement), the verifiers' continuations it
drafts (:mod:`.continuations`) and its summary. Imports the runtime, :mod:`hsd_planner.store` for
writing rows and :mod:`hsd_planner.plan` for curve interpolation; nothing imports it but the
CLI, validation and training.
"""

from .config import Candidate, ProfileConfig, ProfileOutcome
from .hardware import HardwareInfo, detect_hardware
from .runner import PreparedProfile, prepare_profile, run_profile, workload_context_lens
from .summary import SUMMARY_N, ProfileSummary, profile_summary

__all__ = [
    "SUMMARY_N",
    "Candidate",
    "HardwareInfo",
    "PreparedProfile",
    "ProfileConfig",
    "ProfileOutcome",
    "ProfileSummary",
    "detect_hardware",
    "prepare_profile",
    "profile_summary",
    "run_profile",
    "workload_context_lens",
]
