"""Export: a solved plan in the form a serving stack reads, and as a versioned plan document.

- :mod:`.schema` - the plan document (pydantic) and its shipped JSON Schema;
- :mod:`.stacks` - each stack's configuration keys and the version they were read from;
- :mod:`.restrict` - the best plan a stack can express, solved under its restrictions (pure);
- :mod:`.names` - model names as a server knows them (``--model-map``);
- :mod:`.exporter` - a stored plan to any of the above.

Imports :mod:`hsd_planner.plan` and :mod:`hsd_planner.store`; only the CLI imports it.
"""

from .exporter import ExportReport, check_request, export_plan, plan_document
from .names import parse_model_map
from .schema import PLAN_SCHEMA_VERSION, PlanDocument, json_schema
from .stacks import FORMATS, STACKS, stack_for

__all__ = [
    "FORMATS",
    "PLAN_SCHEMA_VERSION",
    "STACKS",
    "ExportReport",
    "PlanDocument",
    "check_request",
    "export_plan",
    "json_schema",
    "parse_model_map",
    "plan_document",
    "stack_for",
]
