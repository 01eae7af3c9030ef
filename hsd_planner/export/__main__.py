"""``python -m hsd_planner.export [FILE]``: write the plan document's JSON Schema (default: the
file shipped beside :mod:`.schema`); run it after changing :class:`.schema.PlanDocument`."""

import json
import sys
from pathlib import Path

from ..paths import write_atomic
from .schema import PLAN_SCHEMA_FILE, json_schema

target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name(PLAN_SCHEMA_FILE)
text = json.dumps(json_schema(), indent=2) + "\n"
write_atomic(target, "plan schema", lambda tmp: tmp.write_text(text))  # whole or untouched, as every output
