"""Writing an export to a file: atomically, never through a link, over nothing but a file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from hsd_runtime.packaged import shareable

from ..errors import ExportError
from ..store.db import SQLITE_HEADER

__all__ = ["write_export"]


def write_export(path: Path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it.

    Refused: a symbolic link (even to a file: the write would land elsewhere), a directory, a
    device or FIFO, an SQLite database, and an existing file unless ``force``.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ExportError(f"{path} is a symbolic link; an export is never written through one")
        if stat.S_ISDIR(st.st_mode):
            raise ExportError(f"{path} is a directory; give the export a file name")
        if not stat.S_ISREG(st.st_mode):
            raise ExportError(f"{path} is not a regular file (a device or a FIFO); an export is written to a file")
        with open(path, "rb") as fh:
            if fh.read(16) == SQLITE_HEADER:
                raise ExportError(f"{path} is an SQLite database; an export never overwrites one")
        if not force:
            raise ExportError(f"{path} exists; pass --force to overwrite it")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise ExportError(f"cannot write {path}: folder {folder} does not exist")
    tmp = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=f".{path.name}.", suffix=".tmp", delete=False) as fh:
            tmp = fh.name
            fh.write(text)
        shareable(Path(tmp))  # temporary files start private; the umask decides, as for any file written
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
