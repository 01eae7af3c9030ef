"""The machines of a shared database: naming one hardware row among those many machines stored.

A team's database holds the latency of every machine that profiled into it, each under its
hardware fingerprint. ``solve --hardware`` picks one by its row id (``3`` or ``#3``, as
``profiles show`` lists them), its fingerprint (or an unambiguous prefix of it), or its device
name (``AMD EPYC 7B13``; several rows of one name are all candidates, the newest profile wins).
"""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from .schema import Hardware

__all__ = ["MIN_PREFIX", "hardware_ids", "resolve_hardware"]

MIN_PREFIX = 4  # the shortest fingerprint prefix taken for a fingerprint


def hardware_ids(db: Engine) -> dict[str, int]:
    """Row id of every hardware fingerprint (what ``profiles show`` numbers machines by)."""
    with Session(db) as s:
        return dict(s.execute(select(Hardware.fingerprint, Hardware.id).order_by(Hardware.id)).tuples().all())


def resolve_hardware(db: Engine, name: str) -> list[str]:
    """The fingerprints ``name`` designates: a row id, a fingerprint or a prefix of one, a device name.

    Refuses a name that matches nothing, or a prefix of several fingerprints, listing the machines.
    """
    with Session(db) as s:
        rows = s.scalars(select(Hardware).order_by(Hardware.id)).all()
    text = name.strip()
    exact = [r.fingerprint for r in rows if r.fingerprint == text]
    if exact:
        return exact
    number = text.removeprefix("#")
    if number.isdigit() and (by_id := [r.fingerprint for r in rows if r.id == int(number)]):
        return by_id
    by_name = [r.fingerprint for r in rows if r.device_name.casefold() == text.casefold()]
    if by_name:
        return by_name
    by_prefix = [r.fingerprint for r in rows if len(text) >= MIN_PREFIX and r.fingerprint.startswith(text)]
    if len(by_prefix) == 1:
        return by_prefix
    listed = ", ".join(
        f"#{r.id} {r.fingerprint} ({r.device_name})" for r in (rows if not by_prefix else [r for r in rows if r.fingerprint in by_prefix])
    )
    if by_prefix:
        raise StoreError(f"--hardware {name!r} is the start of several fingerprints: {listed}; give more of it, or the id")
    raise StoreError(
        f"no hardware {name!r} in the database (profiled: {listed or 'none'}); give an id, a fingerprint or a device name "
        "as hsd-plan profiles show lists them"
    )
