"""Output paths a user names: what may be replaced there, and how a file is written to it.

An output path is absent or a regular file: never a folder, a FIFO, a device or a socket, and a
symbolic link only with ``--force`` (the link itself is then replaced, never the file it points
to). A name typed with a trailing ``/`` names a folder, not a file. An existing regular file is
replaced only where its command allows it (``--force``, or a figure of the same format for
``--plot``). Every file is written to a temporary file beside the target and renamed over it, so
the target is either whole or untouched. Files read on a user's word are checked by
:mod:`hsd_runtime.files` (regular, bounded); database arguments by :mod:`hsd_planner.store.db`.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from hsd_runtime.files import describe_mode, stat_path
from hsd_runtime.packaged import shareable

from .errors import PathError

__all__ = ["check_output_path", "write_atomic"]


def check_output_path(
    text: str | Path, what: str, force: bool = False, replaceable: Callable[[Path], bool] | None = None, hint: str = "pass --force"
) -> Path:
    """The path ``text`` (as the user typed it, for option ``what``) checked as a file to write.

    Refused: an empty name, a name ending in ``/``, a folder, FIFO, device or socket, a symbolic
    link or symbolic link loop without ``force``, an existing regular file unless ``force`` or
    ``replaceable(path)``, a missing or unwritable folder. ``hint`` ends the message for an
    existing file (how to replace it).
    """
    raw = str(text)
    if not raw.strip():
        raise PathError(f"{what} is empty; give a file name")
    if raw.endswith(("/", os.sep)):
        raise PathError(f"{what} {raw!r} ends with '/', which names a folder; give a file name")
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
        elif not force and not (replaceable is not None and replaceable(path)):
            raise PathError(f"{what} {path} exists; {hint} to replace it")
    folder = path.absolute().parent
    fst = stat_path(folder, what)
    if fst is None or not stat.S_ISDIR(fst.st_mode):
        raise PathError(f"{what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise PathError(f"{what} {path}: folder {folder} is not writable")
    return path


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
