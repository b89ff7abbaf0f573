"""Atomic writes: write to a temporary file (or folder) beside the target, then rename.

An interrupted run therefore never leaves a half-written file that a later run trusts:
the target either has its old content or the complete new one.

Temporary files and folders made here are named ``.<target>.<host>.<pid>.<random>.<kind>``
(kind ``tmp``, ``part`` or ``old``), so :func:`clean_stale` can tell a live writer's work from
the leftovers of a killed one: a leftover whose owner process is gone (or, for another host,
that is older than :data:`STALE_AFTER_S`) is removed by the next writer in that folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from irflow.tasks.core.schema import WriteError

STALE_AFTER_S = 6 * 3600.0
"""Age after which a temporary entry whose owner cannot be checked (another host) is removed."""

_TEMP_RE = re.compile(
    r"^\.(?P<label>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.(?P<rand>[0-9a-f]{8})\.(?P<kind>tmp|part|old)$"
)


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM})
"""Errors of a write that the user fixes outside irflow (space, quota, a read-only or forbidden place)."""


def write_error(err: OSError, target: Path | str) -> WriteError | None:
    """``err`` as a :class:`WriteError` naming ``target`` when it is a write failure, else None.

    A permission error on a path outside ``target``'s folder (a file being read) is not a write failure."""
    if err.errno not in WRITE_ERRNOS:
        return None
    folder = Path(target).absolute().parent
    culprit = Path(os.fsdecode(err.filename)).absolute() if err.filename else None
    elsewhere = culprit is not None and folder not in (culprit, *culprit.parents)
    if err.errno in (errno.EACCES, errno.EPERM) and elsewhere:
        return None
    what = err.strerror or os.strerror(err.errno or 0)
    if elsewhere:
        what += f" ({culprit})"
    return WriteError(f"could not write {target}: {what}; nothing was written there (what it held before is kept)")


@contextlib.contextmanager
def named_write_errors(target: Path | str) -> Iterator[None]:
    """Turn a write failure (:data:`WRITE_ERRNOS`) in the block into a :class:`WriteError` naming ``target``."""
    try:
        yield
    except OSError as err:
        named = write_error(err, target)
        if named is None:
            raise
        raise named from err


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it onto ``target``."""
    target = Path(target)
    with named_write_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            os.chmod(tmp_path, 0o644)  # mkstemp's 0600 would make a shared cache unreadable to other users
            yield tmp_path
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp_path, target)
        finally:
            tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file for writing; it replaces ``target`` only if the block succeeds."""
    with atomic_path(target) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as pretty, key-sorted JSON, atomically."""
    with atomic_open(target, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")


# ----------------------------------------------------------------------------- owned temporaries


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname())[:63] or "host"


def temp_name(label: str, kind: str = "tmp") -> str:
    """A hidden name for a temporary beside ``label`` that records its owner (host and pid)."""
    return f".{label}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}.{kind}"


def is_temp_name(name: str) -> bool:
    """True for a name made by :func:`temp_name` (a writer's temporary file or folder)."""
    return bool(_TEMP_RE.match(name))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc's field 22; None where unknown)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def this_process() -> dict[str, str]:
    """Who this process is, for a record a later process may find left open: ``host``, ``pid`` and, where
    known, ``started`` (so a pid reused by another process does not pass for this one)."""
    owner = {"host": _host(), "pid": str(os.getpid())}
    started = _start_ticks(os.getpid())
    if started is not None:
        owner["started"] = started
    return owner


def process_gone(host: str | None, pid: str | int | None, started: str | None = None) -> bool:
    """True only when the process named by :func:`this_process`'s fields is known to be gone: it ran on
    this host and no process has its pid (or one has it but started at another time). Another host, a
    missing pid or this very process: False (nothing can be known, or it is alive)."""
    try:
        number = int(str(pid))
    except ValueError:
        return False
    if host != _host() or number == os.getpid() or number <= 0:
        return False
    if not _pid_alive(number):
        return True
    return started is not None and _start_ticks(number) not in (None, started)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale(folder: Path, *, max_age: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporaries in ``folder`` left by dead writers; returns what was removed or restored.

    A temporary of this host is stale when its owner pid is gone (or it is older than ``max_age``,
    against pid reuse); one of another host when it is older than ``max_age``. A stale ``.old``
    folder (a replaced target set aside by a writer killed between its two renames, see
    :func:`replace_dir`) is renamed back when its target is missing, so nothing published is lost.
    """
    if not folder.is_dir():
        return []
    removed = []
    now = time.time()
    for entry in folder.iterdir():
        match = _TEMP_RE.match(entry.name)
        if not match:
            continue
        try:
            age = now - entry.lstat().st_mtime
        except FileNotFoundError:
            continue
        own_host = match["host"] == _host()
        if own_host and int(match["pid"]) == os.getpid():
            continue
        if own_host and _pid_alive(int(match["pid"])) and age <= max_age:
            continue
        if not own_host and age <= max_age:
            continue
        target = folder / match["label"]
        if match["kind"] == "old" and not target.exists():
            with contextlib.suppress(OSError):
                os.rename(entry, target)
                removed.append(entry)
                continue
        _remove(entry)
        removed.append(entry)
    return removed


@contextlib.contextmanager
def temp_dir(parent: Path, label: str) -> Iterator[Path]:
    """A new owned temporary folder in ``parent`` (stale ones there are cleaned first); removed after."""
    with named_write_errors(parent / label):
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale(parent)
        tmp = parent / temp_name(label)
        tmp.mkdir()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- folder publish


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):  # filesystem without exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(new: Path, target: Path, *, remove_old: bool = True) -> Path | None:
    """Put the finished folder ``new`` at ``target``, replacing any folder there; ``new`` is consumed.

    Returns where the old folder went when ``remove_old`` is False (the caller removes it, e.g.
    after releasing a lock: no reader can reach it there), else None.

    Where the kernel can swap two paths (Linux), a reader sees the old folder or the new one,
    never neither. Elsewhere the old folder is first renamed to an owned ``.old`` name, then the new
    one renamed in: between the two renames ``target`` is briefly absent, and a writer killed in
    that window leaves the ``.old`` folder, which :func:`clean_stale` renames back.
    """
    if not target.exists():
        os.rename(new, target)
        return None
    if _exchange(new, target):
        old = new  # now holds the old folder
    else:
        old = target.parent / temp_name(target.name, "old")
        os.rename(target, old)
        os.rename(new, target)
    if not remove_old:
        return old
    _remove(old)
    return None


@contextlib.contextmanager
def publish_dir(target: str | os.PathLike[str], *, replace: bool = False, lock: Path | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success it becomes ``target`` in one rename.

    ``replace=False`` (content-addressed caches): if another process published ``target`` first,
    its folder (built from the same inputs) is kept and this one dropped. ``replace=True``: the new
    folder replaces any existing one (:func:`replace_dir`); callers serialise writers with a lock.
    ``lock``: a :func:`file_lock` path held exclusively for the rename only (readers hold it shared,
    so none is reading the old folder when it moves away; it is removed after the lock is released).
    A failure leaves ``target`` as it was and no temporary folder behind.
    """
    target = Path(target)
    with temp_dir(target.parent, target.name) as tmp:
        build = tmp / "out"
        build.mkdir()
        yield build
        old = None
        with file_lock(lock) if lock else contextlib.nullcontext():
            if replace:
                old = replace_dir(build, target, remove_old=False)
            else:
                try:
                    os.rename(build, target)
                except OSError:
                    if not target.is_dir():
                        raise
        if old is not None:
            _remove(old)  # outside the lock: readers of the new folder need not wait for this


# ----------------------------------------------------------------------------- locks


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock on ``path`` (created if missing): ``shared`` for readers, else exclusive.

    ``fcntl.flock`` locks belong to the open file, so threads and processes alike exclude each
    other, and the kernel releases a killed holder's lock. Without ``fcntl`` (Windows) this is a
    no-op and writers rely on the atomic renames alone.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
