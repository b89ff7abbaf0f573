"""Run a helper server that dies with the command that started it.

``python -m irflow.tasks.core.child PID MODULE ARGS...``.

A command's temporary servers (the Prefect API) must not outlive it, even when it is killed with
SIGKILL and runs no clean-up. The child therefore watches its parent: a daemon thread polls
``os.getppid()``; once it is no longer ``PID`` (the parent died and the child was re-parented), it
sends SIGTERM to its own process group (the child is started in a session of its own, so that group
is the server and anything it started) and, should a graceful shutdown hang, exits hard after
:data:`GRACE_S`. Polling works on every POSIX system, unlike Linux's parent-death signal, which
fires when the parent's *thread* that forked the child ends. Then ``MODULE`` runs as ``__main__``
with ``ARGS``, as ``python -m MODULE ARGS...`` would.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

POLL_S = 0.25
GRACE_S = 10.0


def watch_parent(parent: int, poll_s: float = POLL_S) -> threading.Thread:
    """Start the daemon thread that ends this process group once ``parent`` is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.killpg(os.getpgrp(), signal.SIGTERM)
        time.sleep(GRACE_S)
        os._exit(1)

    thread = threading.Thread(target=watch, name="irflow-parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str]) -> None:
    parent, module, *args = argv
    watch_parent(int(parent))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
