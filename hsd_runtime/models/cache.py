"""The model cache on disk: its folders, the locks its entries are filled under, and how an entry
is written.

A cache may be shared by a team, so any name in it may hold what someone else put there (a
symbolic link to their own file, a FIFO). Nothing here writes to a name it did not just make:
every entry (an assembled GGUF, converted weights, a tokenizer, a quantized or pruned copy)
is written by :func:`write_entry` inside a new private folder beside it (``mkdtemp``: a name of
its own, made exclusively, mode 0700, so no other writer's name and nothing planted is followed
or overwritten), then renamed into place whole. A lock file is opened without following a link
and without blocking, and used only when it is a regular file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..terms.errors import PathError
from .files import describe_mode, staging_folder

__all__ = ["cache_dir", "cache_folder", "cache_lock", "shareable", "write_entry"]


def cache_dir() -> Path:
    """The cache root: ``$HSD_PLAN_CACHE``, else ``~/.cache/hsd-plan``."""
    root = os.environ.get("HSD_PLAN_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "hsd-plan"


def cache_folder(folder: Path) -> Path:
    """Create the cache folder ``folder`` (and its parents) if needed; refuse, before any long
    conversion, a cache that cannot hold it (``$HSD_PLAN_CACHE`` naming a regular file, say)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(
            f"the model cache {cache_dir()} cannot hold {folder}: {exc.strerror}; point HSD_PLAN_CACHE at a writable folder"
        ) from None
    if not os.access(folder, os.W_OK):
        raise PathError(f"the model cache folder {folder} is not writable; point HSD_PLAN_CACHE at a writable folder")
    return folder


@contextmanager
def cache_lock(entry: Path) -> Iterator[None]:
    """Hold the exclusive lock of the cache entry ``entry`` while it is filled.

    The lock is ``flock`` on ``.NAME.lock`` beside the entry; it is released when the process
    ends however it ends, and the file stays (removing it would let a third process lock a file
    the second already waits on). The caller checks again, under the lock, whether the entry was
    finished meanwhile.
    """
    cache_folder(entry.parent)
    fd = _open_lock(entry)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _open_lock(entry: Path) -> int:
    """The descriptor of ``entry``'s lock file, made where missing. Never a symbolic link followed
    (``O_NOFOLLOW``) or an open that blocks (``O_NONBLOCK``: a FIFO would wait for a writer); a lock
    file that is not a regular file is refused in one line, as is one that cannot be made."""
    path = entry.parent / f".{entry.name}.lock"
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(f"the model cache's lock file {path} is a symbolic link, not a regular file; remove it") from None
        raise _cannot_hold(entry, exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PathError(f"the model cache's lock file {path} is {describe_mode(mode)}, not a regular file; remove it")
    return fd


def _cannot_hold(entry: Path, exc: OSError) -> PathError:
    """The one line for a cache folder that cannot hold ``entry`` (full, read-only, not ours)."""
    return PathError(
        f"the model cache folder {entry.parent} cannot hold {entry.name}: {exc.strerror or exc}; free space there or point HSD_PLAN_CACHE elsewhere"
    )


def shareable(path: Path) -> None:
    """Give a cache entry the permissions the umask allows (temporary files start private, 0600
    or 0700), so that a cache shared by a team works for every member."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)


def write_entry(out: Path, write: Callable[[Path], object]) -> None:
    """Make the cache entry ``out`` (a file or a folder): ``write(path)`` writes it at ``path``, a
    name in a new private folder beside ``out`` that nothing else can have made or planted; what
    it wrote is given the mode the umask allows and renamed to ``out``. The private folder is
    removed however this ends: ``out`` is whole or untouched. A failed write (a full disk, a
    folder not ours) is one line naming the cache folder; other errors of ``write`` pass."""
    try:
        with staging_folder(out.parent) as stage:
            made = stage / out.name
            write(made)
            shareable(made)
            os.replace(made, out)  # a link planted at ``out`` is replaced itself, never followed
    except OSError as exc:
        raise _cannot_hold(out, exc) from None
