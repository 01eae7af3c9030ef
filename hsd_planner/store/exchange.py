"""Export and import of profiles: a versioned JSON document keyed by natural keys.

Rows refer to each other by spec string, hardware fingerprint and workload content hash, never
by database id, so a document from one machine merges into any database without duplicates.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime.packaged import shareable

from ..errors import StoreError
from .db import SQLITE_HEADER
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

__all__ = ["SCHEMA_VERSION", "ProfileDocument", "export_document", "import_document", "read_document", "write_document"]


def _fields(row: Any, cls: type[BaseModel], **extra: Any) -> dict:
    return {name: getattr(row, name) for name in cls.model_fields if name not in extra} | extra


def export_document(engine: Engine) -> ProfileDocument:
    """Read the whole database into a document."""
    with Session(engine) as s:
        models = {m.id: m.spec for m in s.scalars(select(ModelRow))}
        hardware = {h.id: h for h in s.scalars(select(Hardware))}
        workloads = {w.id: w for w in s.scalars(select(Workload))}
        settings = {x.id: SettingOut(**_fields(x, SettingOut)) for x in s.scalars(select(Setting))}
        ordered = lambda cls: s.scalars(select(cls).order_by(cls.id))  # noqa: E731
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


def write_document(doc: ProfileDocument, path: Path, engine: Engine, force: bool = False) -> None:
    """Write ``doc`` to ``path`` atomically (a temporary file renamed over it).

    Never over an SQLite file (the open database above all: an export holds no solves, plans or
    validations, so it cannot restore one), and over an existing export only with ``force``.
    """
    path = Path(path)
    if path.exists():
        if path.is_dir():
            raise StoreError(f"{path} is a directory; give the export a file name")
        with open(path, "rb") as fh:
            is_sqlite = fh.read(16) == SQLITE_HEADER
        database = engine.url.database
        if is_sqlite or (database and Path(database).resolve() == path.resolve()):
            raise StoreError(f"{path} is an SQLite database; an export never overwrites one (choose a .json file name)")
        if not force:
            raise StoreError(f"{path} exists; pass --force to overwrite it")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise StoreError(f"cannot write {path}: folder {folder} does not exist")
    try:
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=f".{path.name}.", suffix=".tmp", delete=False) as tmp:
            tmp.write(doc.model_dump_json(indent=1))
        shareable(Path(tmp.name))  # temporary files start private; an export is meant to be shared
        os.replace(tmp.name, path)
    except OSError as exc:
        if "tmp" in locals():
            Path(tmp.name).unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_document(path: Path) -> ProfileDocument:
    """Parse and validate an export file; a wrong version or shape is a one-line error."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise StoreError(f"{path} is nested too deeply to be an hsd-plan export") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != SCHEMA_VERSION:
        raise StoreError(f"{path} has profile schema version {version!r}; this hsd-plan reads version {SCHEMA_VERSION}")
    try:
        return ProfileDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise StoreError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}; nothing was imported") from None


def import_document(engine: Engine, doc: ProfileDocument) -> dict[str, int]:
    """Merge ``doc`` into the database in one transaction; return rows added per table."""
    added = {name: 0 for name in ProfileDocument.model_fields if name != "schema_version"}

    def add(table: str, session: Session, cls, key: dict, **values) -> object:
        before = session.scalars(select(cls).filter_by(**key)).first()
        if before is not None:
            return before
        added[table] += 1
        return get_or_create(session, cls, key, **values)

    try:
        _merge(engine, doc, add)
    except KeyError as exc:
        raise StoreError(f"the document refers to {exc.args[0]!r}, which it does not define; nothing was imported") from None
    return added


def _merge(engine: Engine, doc: ProfileDocument, add) -> None:
    with Session(engine) as s, s.begin():
        hw = {
            h.fingerprint: add("hardware", s, Hardware, {"fingerprint": h.fingerprint}, **h.model_dump(exclude={"fingerprint"})).id
            for h in doc.hardware
        }
        models = {m.spec: add("models", s, ModelRow, {"spec": m.spec}, **m.model_dump(exclude={"spec"})).id for m in doc.models}
        wl = {
            w.content_hash: add("workloads", s, Workload, {"content_hash": w.content_hash}, **w.model_dump(exclude={"content_hash"})).id
            for w in doc.workloads
        }
        setting_ids: dict[tuple, int] = {}

        def setting(x: SettingOut) -> int:
            key = tuple(x.model_dump().values())
            if key not in setting_ids:
                setting_ids[key] = get_or_create(s, Setting, x.model_dump()).id
            return setting_ids[key]

        for r in doc.latency:
            key = dict(model_id=models[r.model], hardware_id=hw[r.hardware], dtype=r.dtype, n_tokens=r.n_tokens, context_len=r.context_len)
            add(
                "latency",
                s,
                Latency,
                key,
                median_ms=r.median_ms,
                p10_ms=r.p10_ms,
                p90_ms=r.p90_ms,
                repeats=r.repeats,
                samples_ms=r.samples_ms,
                floor_ms=r.floor_ms,
            )
        for r in doc.continuations:
            key = dict(
                verifier_id=models[r.verifier], workload_id=wl[r.workload], setting_id=setting(r.setting), prompt_index=r.prompt_index
            )
            add("continuations", s, Continuation, key, tokens=r.tokens)
        for r in doc.acceptance_prompts:
            key = dict(
                drafter_id=models[r.drafter],
                verifier_id=models[r.verifier],
                workload_id=wl[r.workload],
                setting_id=setting(r.setting),
                prompt_index=r.prompt_index,
            )
            add(
                "acceptance_prompts",
                s,
                AcceptancePrompt,
                key,
                positions=r.positions,
                alpha_sum=r.alpha_sum,
                run_sum=r.run_sum,
                run_count=r.run_count,
                visit_sum=r.visit_sum,
                visit_count=r.visit_count,
                siblings_sum=r.siblings_sum,
                siblings_count=r.siblings_count,
            )
        for r in doc.acceptance:
            key = dict(
                drafter_id=models[r.drafter], verifier_id=models[r.verifier], workload_id=wl[r.workload], setting_id=setting(r.setting)
            )
            add(
                "acceptance",
                s,
                Acceptance,
                key,
                alpha=r.alpha,
                positions=r.positions,
                prompts=r.prompts,
                run_lengths=r.run_lengths,
                visited=r.visited,
                siblings=r.siblings,
            )
