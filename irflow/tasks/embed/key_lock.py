"""One encode per embedding-cache key at a time: the key's ``_lock`` file, held with ``fcntl.flock``.

A second process asking for a key that another is encoding waits (saying who holds it, every minute) and then
reads the finished parts instead of encoding them again; the kernel releases a killed holder's lock, and the
waiter resumes from the parts already written (:mod:`irflow.tasks.embed.cache`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from irflow.tasks.core.schema import IrflowError

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 6 * 3600.0
"""How long ``embed_texts`` waits for another process encoding the same key (``IRFLOW_EMBED_LOCK_TIMEOUT``)."""


class EmbeddingLockTimeout(IrflowError):
    """Another process held a cache key's lock for longer than the wait allows."""


@contextlib.contextmanager
def key_lock(key_dir: Path, *, timeout: float | None = None, poll: float = 0.2) -> Iterator[None]:
    """Hold the exclusive lock of one cache key (``key_dir/_lock``), waiting for another holder.

    While it waits it logs who holds the key (pid, host, since when) every minute; after ``timeout``
    seconds (default ``IRFLOW_EMBED_LOCK_TIMEOUT`` or :data:`LOCK_TIMEOUT_S`) it raises
    :class:`EmbeddingLockTimeout` naming the lock file. ``fcntl.flock`` locks belong to the open file:
    threads and processes exclude each other alike, and a killed holder's lock is released.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: parts are still written atomically
        yield
        return
    if timeout is None:
        timeout = float(os.environ.get("IRFLOW_EMBED_LOCK_TIMEOUT", LOCK_TIMEOUT_S))
    path = Path(key_dir) / "_lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        start = time.monotonic()
        next_message = start
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                holder = _lock_holder(path)
                if now - start >= timeout:
                    raise EmbeddingLockTimeout(
                        f"waited {now - start:.0f} s for {holder} to finish encoding {path.parent.name[:12]}… "
                        f"(lock {path}); raise IRFLOW_EMBED_LOCK_TIMEOUT or stop that process"
                    ) from None
                if now >= next_message:
                    log.warning(
                        "waiting for %s, which is encoding the same texts (lock %s, waited %.0f s, timeout %.0f s)",
                        holder,
                        path,
                        now - start,
                        timeout,
                    )
                    next_message = now + 60.0
                time.sleep(poll)
        os.ftruncate(fd, 0)
        holder_info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
        os.pwrite(fd, json.dumps(holder_info).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"process {holder['pid']} on {holder['host']} (since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
