"""Training: drafters made for one target, on one data pipeline (sampling :mod:`.sampling`,
the teacher's signal :mod:`.teacher`, corpora on disk :mod:`.corpus`) and one kind of run
(:mod:`.runs`: the run folder, the step loop, checkpoints and resuming). DistillSpec students:
the run's settings (:mod:`.config`), the trainer (:mod:`.distiller`), the student
(:mod:`.student`), the divergences (:mod:`.divergences`) and the report and model card
(:mod:`.card`); block-draft heads for a host model (:mod:`.heads`); the steering of a drafter by
its verifier (:mod:`.steer`).

Imports the runtime, torch, prompts and :mod:`hsd_planner.profiling.acceptance` (a student's
acceptance is measured as ``profile`` measures it); only the CLI and benchmarks import it.
"""

from .card import DistillReport, StepLog, model_card
from .config import DistillConfig
from .distiller import Distiller, running_average
from .divergences import DIVERGENCES, divergence
from .student import build_student, parse_init

__all__ = [
    "DIVERGENCES",
    "DistillConfig",
    "DistillReport",
    "Distiller",
    "StepLog",
    "build_student",
    "divergence",
    "model_card",
    "parse_init",
    "running_average",
]
