"""Output paths a user names: what may be replaced there, and how a file is written to it.

An output path is absent or a regular file: never a folder, a FIFO, a device or a socket, and a
symbolic link only with ``--force`` (the link itself is then replaced, never the file it points
to). A name typed with a final ``/``, ``.`` or ``..`` names a folder, not a file: refused, as is
an empty name. An existing regular file is replaced only where its command allows it
(``--force``, or a figure of the same format for ``--plot``), and never when SQLite owns it: a
database (by its header, or the command's own ``--db``), or the write-ahead log, shared-memory
index or rollback journal beside one (``DB-wal``, ``DB-shm``, ``DB-journal``), which a process
with the database open reads and rewrites. Every file is written to a temporary file beside the
target and renamed over it, so the target is either whole or untouched. Files read on a user's
word are checked by :mod:`hsd_runtime.models.files` (regular, bounded); database arguments by
:mod:`hsd_planner.store.db`.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from hsd_runtime.models.cache import shareable
from hsd_runtime.models.files import describe_mode, stat_path

from .errors import PathError

__all__ = ["SQLITE_HEADER", "check_output_path", "write_atomic"]

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
# the files SQLite keeps beside database DB while it is open: DB-wal, DB-shm and DB-journal
SQLITE_SIDECARS = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}


def check_output_path(
    text: str | Path,
    what: str,
    force: bool = False,
    replaceable: Callable[[Path], bool] | None = None,
    hint: str = "pass --force",
    database: str | Path | None = None,
) -> Path:
    """The path ``text`` (as the user typed it, for option ``what``) checked as a file to write.

    Refused: an empty name, a name ending in ``/``, ``.`` or ``..``, a folder, FIFO, device or
    socket, a symbolic link or symbolic link loop without ``force``, an SQLite database or a file
    SQLite keeps beside one (``database``: the file the command itself opens, refused even while it
    is empty), an existing regular file unless ``force`` or ``replaceable(path)``, a missing or
    unwritable folder. ``hint`` ends the message for an existing file (how to replace it).
    """
    raw = str(text)
    if not raw.strip():
        raise PathError(f"{what} is empty; give a file name")
    if raw.endswith(("/", os.sep)) or raw.rsplit(os.sep, 1)[-1] in (".", ".."):  # pathlib reads "FILE/." as FILE
        raise PathError(f"{what} {raw!r} ends with '/', '.' or '..', which names a folder; give a file name")
    path = Path(raw).expanduser()
    st = stat_path(path, what, follow=False)
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            stat_path(path, what)  # a loop is refused even with --force
            if not force:
                raise PathError(
                    f"{what} {path} is a symbolic link; pass --force to replace the link (the file it points to is never written)"
                )
        elif not stat.S_ISREG(st.st_mode):
            raise PathError(f"{what} {path} is {describe_mode(st.st_mode)}; give a file name")
        elif _is_database(path) or _same_file(path, database):
            raise PathError(f"{what} {path} is an SQLite database; an output never overwrites one (choose another file name)")
        elif not force and not (replaceable is not None and replaceable(path)):
            raise PathError(f"{what} {path} exists; {hint} to replace it")
    _refuse_sidecar(path, what, database)
    folder = path.absolute().parent
    fst = stat_path(folder, what)
    if fst is None or not stat.S_ISDIR(fst.st_mode):
        raise PathError(f"{what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise PathError(f"{what} {path}: folder {folder} is not writable")
    return path


def _is_database(path: Path) -> bool:
    """Whether the regular file ``path`` starts with SQLite's header (16 bytes read, no more)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_HEADER
    except OSError:
        return False  # unreadable: the write itself will say why


def _same_file(path: Path, other: str | Path | None) -> bool:
    """Whether ``path`` and ``other`` (absent, or a URL: False) name one file."""
    try:
        return other is not None and os.path.samefile(path, other)
    except (OSError, ValueError):
        return False


def _refuse_sidecar(path: Path, what: str, database: str | Path | None) -> None:
    """Refuse ``DB-wal``, ``DB-shm`` or ``DB-journal`` where DB is an SQLite database (or empty,
    as a database is before its first write, or the command's own): replacing one corrupts the
    database for every process that has it open, and SQLite deletes it when the last one closes."""
    for suffix, kind in SQLITE_SIDECARS.items():
        if not path.name.endswith(suffix) or len(path.name) == len(suffix):
            continue
        db = path.with_name(path.name[: -len(suffix)])
        try:
            st = os.stat(db)
        except OSError:
            continue  # nothing there: the name is free
        if _same_file(db, database) or (stat.S_ISREG(st.st_mode) and (st.st_size == 0 or _is_database(db))):
            raise PathError(
                f"{what} {path} is the {kind} of the SQLite database {db}; an output never replaces one (choose another file name)"
            )


def write_atomic(path: Path, what: str, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``.

    A symbolic link at ``path`` is replaced itself (rename never follows it); on any failure the
    temporary file is removed and ``path`` is untouched.
    """
    folder = path.absolute().parent
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:100]}.", suffix=".tmp")
    except OSError as exc:
        raise PathError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        shareable(tmp)  # temporary files start private (0600); what a user writes is theirs to share
        os.replace(tmp, path)
    except OSError as exc:
        raise PathError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
