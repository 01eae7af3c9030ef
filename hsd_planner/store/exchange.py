"""Export and import of profiles: a versioned JSON document keyed by natural keys.

Rows refer to each other by spec string, hardware fingerprint and workload content hash, never
by database id, so a document from one machine merges into any database without duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime.models.files import read_input
from hsd_runtime.terms.json_text import JSONTextError, parse_json

from ..errors import StoreError
from ..limits import MAX_DOCUMENT_BYTES
from ..paths import SQLITE_HEADER, check_output_path, write_atomic
from .document import (
    SCHEMA_VERSION,
    AcceptanceOut,
    AcceptancePromptOut,
    ContinuationOut,
    HardwareOut,
    LatencyOut,
    ModelOut,
    ProfileDocument,
    SettingOut,
    WorkloadOut,
)
from .repo import get_or_create
from .schema import Acceptance, AcceptancePrompt, Continuation, Hardware, Latency, ModelRow, Setting, Workload
from .server import advisory_lock
from .upsert import REGISTRY, insert_missing

__all__ = [
    "SCHEMA_VERSION",
    "ProfileDocument",
    "check_export_path",
    "document_rows",
    "export_document",
    "import_document",
    "read_document",
    "write_document",
]


def _fields(row: Any, cls: type[BaseModel], **extra: Any) -> dict:
    return {name: getattr(row, name) for name in cls.model_fields if name not in extra} | extra


def export_document(db: Engine) -> ProfileDocument:
    """Read the whole database into a document."""
    with Session(db) as s:
        ordered = lambda cls: s.scalars(select(cls).order_by(cls.id))  # noqa: E731  (a server keeps no order of its own)
        models = {m.id: m.spec for m in ordered(ModelRow)}
        hardware = {h.id: h for h in ordered(Hardware)}
        workloads = {w.id: w for w in ordered(Workload)}
        settings = {x.id: SettingOut(**_fields(x, SettingOut)) for x in ordered(Setting)}
        return ProfileDocument(
            hardware=[HardwareOut(**_fields(h, HardwareOut)) for h in hardware.values()],
            models=[ModelOut(**_fields(m, ModelOut)) for m in ordered(ModelRow)],
            workloads=[WorkloadOut(**_fields(w, WorkloadOut)) for w in workloads.values()],
            latency=[
                LatencyOut(**_fields(r, LatencyOut, model=models[r.model_id], hardware=hardware[r.hardware_id].fingerprint))
                for r in ordered(Latency)
            ],
            continuations=[
                ContinuationOut(
                    **_fields(
                        r,
                        ContinuationOut,
                        verifier=models[r.verifier_id],
                        workload=workloads[r.workload_id].content_hash,
                        setting=settings[r.setting_id],
                    )
                )
                for r in ordered(Continuation)
            ],
            acceptance_prompts=[
                AcceptancePromptOut(
                    **_fields(
                        r,
                        AcceptancePromptOut,
                        drafter=models[r.drafter_id],
                        verifier=models[r.verifier_id],
                        workload=workloads[r.workload_id].content_hash,
                        setting=settings[r.setting_id],
                    )
                )
                for r in ordered(AcceptancePrompt)
            ],
            acceptance=[
                AcceptanceOut(
                    **_fields(
                        r,
                        AcceptanceOut,
                        drafter=models[r.drafter_id],
                        verifier=models[r.verifier_id],
                        workload=workloads[r.workload_id].content_hash,
                        setting=settings[r.setting_id],
                    )
                )
                for r in ordered(Acceptance)
            ],
        )


def check_export_path(path: str | Path, database: str | None, force: bool = False) -> Path:
    """The export file ``path`` checked before anything is read or written; return it.

    Never an SQLite file or one SQLite keeps beside it (the ``database`` being exported above
    all: an export holds no solves, plans or validations, so it cannot restore one), an existing
    export only with ``force``, and nothing else :func:`~hsd_planner.paths.check_output_path` refuses.
    """
    return check_output_path(path, "export file", force, database=database)


def write_document(doc: ProfileDocument, path: Path) -> None:
    """Write ``doc`` to ``path`` (checked with :func:`check_export_path`) atomically: a temporary
    file renamed over it, so ``path`` is the whole export or what it was before."""
    write_atomic(path, "export file", lambda tmp: tmp.write_text(doc.model_dump_json(indent=1)))


def read_document(path: Path, what: str = "profile file") -> ProfileDocument:
    """Parse and validate an export file; a wrong version, shape or reference is a one-line error.

    ``what`` names the argument in messages. The file must be a regular file of at most
    MAX_DOCUMENT_BYTES (a FIFO or ``/dev/zero`` is refused before it is read).
    """
    data = read_input(Path(path), what, MAX_DOCUMENT_BYTES)
    if data.startswith(SQLITE_HEADER):
        raise StoreError(f"{what} {path} is an SQLite database, not an exported profile (JSON); pass a database with --db")
    try:
        raw = parse_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise StoreError(f"{what} {path} is not UTF-8 text, so not an exported profile (JSON)") from None
    except JSONTextError as exc:
        raise StoreError(f"{what} {path} {exc}, so it is no hsd-plan export") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if type(version) is not int or version != SCHEMA_VERSION:  # True and 1.0 equal 1 but are not a version
        raise StoreError(f"{path} has profile schema version {version!r}; this hsd-plan reads version {SCHEMA_VERSION}")
    try:
        return ProfileDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        raise StoreError(f"{path}: {where + ': ' if where else ''}{message}; nothing was imported") from None


IMPORT_CHUNK = 2000  # rows per bulk insert, and per progress step


def import_document(db: Engine, doc: ProfileDocument, progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Merge ``doc`` into the database in one transaction; return rows added per table.

    Rows whose natural key the database holds already are skipped; the rest are inserted in bulk
    (a row a profiler stores meanwhile, on another machine, is skipped too: never an error, never
    twice). ``progress(n)`` is called as rows are handled (their total is :func:`document_rows`).
    The document's references are checked when it is validated, so nothing fails halfway; if the
    database does (disk full, a server gone), the transaction rolls back and nothing is kept.
    """
    step = progress or (lambda _n: None)
    added = {name: 0 for name in ProfileDocument.model_fields if name != "schema_version"}
    with Session(db) as s, s.begin():
        advisory_lock(s, REGISTRY)  # creates hardware, model and workload rows, as a profiler's start does

        def merge(table: str, cls: type, rows: list[dict], key: tuple[str, ...]) -> None:
            """Insert the ``rows`` whose ``key`` columns are not stored yet, in chunks."""
            stored = {tuple(r) for r in s.execute(select(*(getattr(cls, k) for k in key)))}
            fresh = [r for r in rows if tuple(r[k] for k in key) not in stored]
            step(len(getattr(doc, table)) - len(fresh))  # skipped (already stored, or repeated in the document)
            for i in range(0, len(fresh), IMPORT_CHUNK):
                added[table] += insert_missing(s, cls, fresh[i : i + IMPORT_CHUNK], key)
                step(len(fresh[i : i + IMPORT_CHUNK]))

        def ids(cls: type, column: str) -> dict:
            return {k: i for k, i in s.execute(select(getattr(cls, column), cls.id))}

        merge("hardware", Hardware, _unique_rows(h.model_dump() for h in doc.hardware), ("fingerprint",))
        merge("models", ModelRow, _unique_rows(m.model_dump() for m in doc.models), ("spec",))
        merge("workloads", Workload, _unique_rows(w.model_dump() for w in doc.workloads), ("content_hash",))
        hw, models, wl = ids(Hardware, "fingerprint"), ids(ModelRow, "spec"), ids(Workload, "content_hash")
        setting_ids: dict[tuple, int] = {}

        def setting(x: SettingOut) -> int:
            key = tuple(x.model_dump().values())
            if key not in setting_ids:
                setting_ids[key] = get_or_create(s, Setting, x.model_dump()).id
            return setting_ids[key]

        def pair(r: Any) -> dict:
            return dict(
                drafter_id=models[r.drafter], verifier_id=models[r.verifier], workload_id=wl[r.workload], setting_id=setting(r.setting)
            )

        merge(
            "latency",
            Latency,
            _unique_rows(
                r.model_dump(exclude={"model", "hardware"}) | dict(model_id=models[r.model], hardware_id=hw[r.hardware])
                for r in doc.latency
            ),
            ("model_id", "hardware_id", "dtype", "n_tokens", "context_len", "batch_size"),
        )
        merge(
            "continuations",
            Continuation,
            _unique_rows(
                r.model_dump(exclude={"verifier", "workload", "setting"})
                | dict(verifier_id=models[r.verifier], workload_id=wl[r.workload], setting_id=setting(r.setting))
                for r in doc.continuations
            ),
            ("verifier_id", "workload_id", "setting_id", "prompt_index"),
        )
        merge(
            "acceptance_prompts",
            AcceptancePrompt,
            _unique_rows(r.model_dump(exclude={"drafter", "verifier", "workload", "setting"}) | pair(r) for r in doc.acceptance_prompts),
            ("drafter_id", "verifier_id", "workload_id", "setting_id", "prompt_index"),
        )
        merge(
            "acceptance",
            Acceptance,
            _unique_rows(r.model_dump(exclude={"drafter", "verifier", "workload", "setting"}) | pair(r) for r in doc.acceptance),
            ("drafter_id", "verifier_id", "workload_id", "setting_id"),
        )
    return added


def document_rows(doc: ProfileDocument) -> int:
    """How many rows ``doc`` holds in all (the total :func:`import_document` reports progress of)."""
    return sum(len(getattr(doc, name)) for name in ProfileDocument.model_fields if name != "schema_version")


def _unique_rows(rows: Iterable[dict]) -> list[dict]:
    """``rows`` without repeats (a document may repeat a row identically; different values are refused on validation)."""
    out: list[dict] = []
    seen: set[str] = set()
    for row in rows:
        marker = json.dumps(row, sort_keys=True, default=str)
        if marker not in seen:
            seen.add(marker)
            out.append(row)
    return out
