"""hsd_planner: profile drafters, solve for the latency-optimal hierarchy, validate it.

Depends on :mod:`hsd_runtime`, never the reverse. The planner API works without a database and
without torch: build a :class:`Profile` from plain data and call :func:`solve`.

Where things are, one room per concept (subpackages for the stages of the pipeline):

- :mod:`.plan` - the planner's input (``Profile``), the latency model, the solver, the Monte
  Carlo oracle, and ``Plan`` with its label and JSON widths (pure: no torch, no database);
- :mod:`.prompts` - prompt sets: files, the built-in set, the profiling/validation split;
- :mod:`.profiling` - measuring latency and acceptance (``hsd-plan profile``), the hardware
  fingerprint, the resumable run;
- :mod:`.stats` - pooling per-prompt acceptance, the bootstrap and its 90% intervals (pure);
- :mod:`.solving` - solving on the stored profile (``hsd-plan solve``) and its report;
- :mod:`.validation` - running solved plans on held-out prompts, comparing with the prediction,
  calibration, the figure (``hsd-plan validate``);
- :mod:`.store` - the database: every SQL statement, behind named functions with typed records;
- :mod:`.export` - plans in the form serving stacks read (``hsd-plan export``);
- :mod:`.training` - drafters trained for a target (DistillSpec students, ``hsd-plan distill``);
- :mod:`.cli` - the ``hsd-plan`` command line, thin wrappers over the above;
- :mod:`.generate` - one hierarchy on one prompt, checked against greedy decoding (``hsd-plan generate``);
- :mod:`.demo` - the whole workflow on a model family (``hsd-plan demo``);
- :mod:`.choices`, :mod:`.limits` - the closed sets of values and the bounds of numbers;
  :mod:`.errors` the one error hierarchy; :mod:`.paths` output files.

Words used one way throughout: a *profile* is the planner's input data, :class:`Profile`;
*profiling* measures one into the database; the store *reads* one back
(:func:`hsd_planner.store.profiles.load_profile`). A *plan* is a hierarchy with its prediction,
:class:`Plan`; a solve stores it as a :class:`~hsd_planner.store.records.RankedPlan` (id, kind,
interval), export reads it back with its solve and profile as a
:class:`~hsd_planner.store.plans.SolvedPlan`, and validation measures it into a
:class:`~hsd_planner.validation.PlanResult`.
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
