"""The model cache on disk: its folders, the locks its entries are filled under, how an entry is
written, and how a refused command takes back what it wrote there.

A cache may be shared by a team, so any name in it may hold what someone else put there (a
symbolic link to their own file, a FIFO). Nothing here writes to a name it did not just make:
every entry (an assembled GGUF, converted weights, a tokenizer, a quantized or pruned copy)
is written by :func:`write_entry` inside a new private folder beside it (``mkdtemp``: a name of
its own, made exclusively, mode 0700, so no other writer's name and nothing planted is followed
or overwritten), then renamed into place whole. A lock file is opened without following a link
and without blocking, and used only when it is a regular file.

A command refused after it wrote to the cache (a late check, a copy llama.cpp cannot load, a
prompt past the context) takes back what it made there (:func:`taken_back_on_refusal`): the
entries, lock files and folders this process created, so the cache is as it was.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..terms.errors import PathError
from .files import describe_mode, staging_folder

__all__ = ["cache_dir", "cache_folder", "cache_lock", "shareable", "taken_back_on_refusal", "write_entry"]

# What the running command made in the cache, oldest first, while one is recorded: (path, kind),
# kind "folder" (removed only where empty), "lock" (a lock file) or "entry" (a file or folder).
_made: list[tuple[Path, str]] | None = None


def cache_dir() -> Path:
    """The cache root: ``$HSD_PLAN_CACHE``, else ``~/.cache/hsd-plan``."""
    root = os.environ.get("HSD_PLAN_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "hsd-plan"


def _record(path: Path, kind: str) -> None:
    if _made is not None:
        _made.append((path, kind))


def cache_folder(folder: Path) -> Path:
    """Create the cache folder ``folder`` (and its parents) if needed; refuse, before any long
    conversion, a cache that cannot hold it (``$HSD_PLAN_CACHE`` naming a regular file, say)."""
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)][::-1]  # topmost first
    try:
        for path in missing:
            try:
                path.mkdir()
                _record(path, "folder")
            except FileExistsError:  # made by another process meanwhile
                pass
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
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
    the second already waits on), unless the command that made it is refused
    (:func:`taken_back_on_refusal`). The caller checks again, under the lock, whether the entry
    was finished meanwhile.
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
            _record(path, "lock")
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
    _record(out, "entry")


@contextmanager
def taken_back_on_refusal() -> Iterator[None]:
    """Run a command; where it raises an ``Exception`` (a refusal; not Ctrl-C, which keeps what
    was finished for the next run), remove what it made in the cache: its entries, its lock files
    and the folders it created that are empty then, newest first."""
    global _made
    outer, _made = _made, []
    mine = _made
    try:
        yield
    except Exception:
        _take_back(mine)
        mine.clear()
        raise
    finally:
        _made = outer
        if outer is not None:
            outer.extend(mine)


def _take_back(made: list[tuple[Path, str]]) -> None:
    """Remove ``made``, newest first; what is gone already or no longer removable is left.

    Another process that found one of these entries finished meanwhile keeps reading the files
    it opened (an unlinked file stays readable); one that waited on a removed lock file fills
    the entry again under it, at a name of its own, so nothing is ever half-written.
    """
    for path, kind in reversed(made):
        try:
            if kind == "folder":
                path.rmdir()  # only when empty: another process may be filling it
            elif kind == "entry" and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            pass
