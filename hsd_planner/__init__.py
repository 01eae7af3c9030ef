"""hsd_planner: profile drafters, solve for the latency-optimal hierarchy, validate it.

Depends on :mod:`hsd_runtime`, never the reverse. The planner API works without a database and
without torch: build a :class:`Profile` from plain data and call :func:`solve`.

Where things are, one subpackage per stage of the pipeline:

- :mod:`.plan` - latency model, solver, Monte Carlo oracle, the ``Profile`` input (pure);
- :mod:`.prompts` - prompt sets: files, the built-in set, the profiling/validation split;
- :mod:`.profiling` - measuring latency and acceptance, the hardware fingerprint, the run;
- :mod:`.store` - the SQLite schema, migrations, reading profiles back, solves, export/import;
- :mod:`.validation` - running plans, comparing with predictions, plots, the demo;
- :mod:`.training` - drafters trained for a target (DistillSpec students);
- :mod:`.cli` - the ``hsd-plan`` command line, thin wrappers over the above.
"""

from .errors import HSDError, SolverError
from .plan import LatencyCurve, ModelProfile, PairAcceptance, Plan, Profile, Solution, SolveConfig, predict, solve

__all__ = [
    "HSDError",
    "LatencyCurve",
    "ModelProfile",
    "PairAcceptance",
    "Plan",
    "Profile",
    "Solution",
    "SolveConfig",
    "SolverError",
    "predict",
    "solve",
]
