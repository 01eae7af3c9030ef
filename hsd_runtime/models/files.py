"""Reading the files a user names: regular files of bounded size, checked before they are opened.

A FIFO would block the read forever, a device such as ``/dev/zero`` never ends, a folder or a
symbolic link loop is not a file: each is refused with one line that names the path and what it
is, before anything reads it. The open itself never blocks (``O_NONBLOCK``) and the type is checked
again on the open descriptor, so a file swapped for a FIFO between the check and the open is
refused too. A folder a command will write into (a trainer's ``--out``, a cache) is checked the
same way before any work starts (:func:`check_folder`). Torch-free; the planner's output paths
and database arguments build on this.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ..terms.errors import PathError

__all__ = ["check_folder", "describe_mode", "open_input", "read_input", "staging_folder", "stat_input", "stat_path"]


def describe_mode(mode: int) -> str:
    """What a file of ``st_mode`` is, in words (``a FIFO``, ``a character device``, ...)."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def stat_path(path: Path, what: str, follow: bool = True) -> os.stat_result | None:
    """``os.stat`` (``os.lstat`` unless ``follow``) of ``path``; None when nothing is there.

    Every other failure (a symbolic link loop, a name too long, no permission) is a one-line
    :class:`PathError` naming ``what`` the user typed.
    """
    try:
        return os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(f"{what} {path} is a symbolic link loop") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise PathError(f"{what} {str(path)[:60]}... is too long a path for this system") from None
        if exc.errno == errno.ENOTDIR:
            return None  # a parent is a file: nothing can be there
        raise PathError(f"{what} {path}: {exc.strerror}") from None


def stat_input(path: Path, what: str, max_bytes: int) -> os.stat_result:
    """Check that ``path`` is an existing regular file of at most ``max_bytes``; return its stat."""
    st = stat_path(path, what)
    if st is None:
        raise PathError(f"{what} {path} does not exist")
    if not stat.S_ISREG(st.st_mode):
        raise PathError(f"{what} {path} is {describe_mode(st.st_mode)}, not a regular file")
    if st.st_size > max_bytes:
        raise PathError(f"{what} {path} holds {st.st_size:,} bytes; at most {max_bytes:,} are read")
    return st


def open_input(path: Path, what: str, max_bytes: int) -> BinaryIO:
    """Open ``path`` for reading in binary after :func:`stat_input`; the caller closes it.

    The caller reads at most ``max_bytes`` (a file may grow after the check); :func:`read_input`
    does that for whole-file reads.
    """
    stat_input(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise PathError(f"{what} {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped for something else since the check
        os.close(fd)
        raise PathError(f"{what} {path} is {describe_mode(st.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_input(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, refusing one larger than ``max_bytes``."""
    with open_input(path, what, max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PathError(f"{what} {path} holds more than {max_bytes:,} bytes; at most {max_bytes:,} are read")
    return data


def check_folder(path: Path, what: str, writable: bool = True) -> bool:
    """Check that ``path`` is a folder, or can be made one; return whether it exists already.

    Refused with one line, before anything is written: a regular file, FIFO, device or socket; a
    symbolic link that leads nowhere (making the folder would fail on it) or a loop; a path under
    something that is not a folder; with ``writable``, a folder this process may not write into
    (``os.access``, which sees the mode, read-only mounts and immutable folders), or, for a
    missing path, the nearest existing folder above it.
    """
    st = _folder_stat(path, what)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(f"{what} {path} is {describe_mode(st.st_mode)}, not a folder")
        if writable and not os.access(path, os.W_OK | os.X_OK):
            raise PathError(
                f"{what} {path} is a folder that cannot be written into (its permissions, a read-only mount or an immutable flag)"
            )
        return True
    for above in path.absolute().parents:
        ast = _folder_stat(above, what)
        if ast is None:
            continue  # made with the folder
        if not stat.S_ISDIR(ast.st_mode):
            raise PathError(f"{what} {path} cannot be made: {above} is {describe_mode(ast.st_mode)}, not a folder")
        if writable and not os.access(above, os.W_OK | os.X_OK):
            raise PathError(f"{what} {path} cannot be made: the folder {above} cannot be written into")
        return False
    return False  # nothing above exists: the root itself is missing, which cannot happen


def _folder_stat(path: Path, what: str) -> os.stat_result | None:
    """The stat of what ``path`` leads to; None when nothing is there; a symbolic link that leads
    nowhere is refused (``mkdir`` would fail on the link itself)."""
    own = stat_path(path, what, follow=False)
    if own is None or not stat.S_ISLNK(own.st_mode):
        return own
    target = stat_path(path, what)  # a loop is refused here
    if target is None:
        raise PathError(f"{what} {path} is a symbolic link to {os.readlink(path)}, which does not exist")
    return target


@contextmanager
def staging_folder(parent: Path) -> Iterator[Path]:
    """A new private folder inside ``parent`` (made, with its parents, when missing) to write
    files into before they are renamed into place; removed when the block ends, however it ends
    (what the block renamed out of it stays). Failing to make it raises the ``OSError``."""
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=parent, prefix=".tmp-"))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)
