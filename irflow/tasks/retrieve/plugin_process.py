"""A Python retriever in a process of its own, so that a crash in it cannot take irflow with it.

A ``python:`` plugin is arbitrary code: it may call ``os._exit``, segfault in a C extension or raise
``KeyboardInterrupt``. Run in irflow's process, any of those would end the whole evaluation and lose the
other systems' finished results. :class:`PluginProcess` runs it in a child started with the ``spawn``
context (a fresh interpreter: no copy of irflow's threads, locks or open servers): one child per system
and evaluation, which creates the retriever, indexes the corpus once, answers every batch search and
times the latency stage's single-query calls itself (:class:`~irflow.tasks.retrieve.latency.Timed`), so
the pipe between the processes is not part of the latency.

What the parent sees of a child's death is the system's named failure (:class:`PluginCrashed`):
``system 'python:m:f' crashed in search(): exit code 3`` or ``killed by SIGSEGV``; a
``KeyboardInterrupt`` the plugin raises (Ctrl-C reaches only irflow: the child ignores SIGINT) is
``search() raised KeyboardInterrupt``. Errors the plugin raises as exceptions are named exactly as in
the in-process path (the same code runs in the child and its error travels back).

The child dies with its parent: a thread in it waits on the parent's sentinel (a pipe that closes when
the parent ends, SIGKILL included) and exits at once; a stop (SIGTERM, Ctrl-C) in the parent while it
waits for the child kills the child, and the children still alive when irflow exits are ended.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any

from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.stop import at_forced_exit, check_stop

POLL_S = 0.25
"""Seconds between checks for a stop while the parent waits for its child."""
JOIN_S = 5.0
"""Seconds a child that closed its end of the pipe is given to exit, before its exit code is read."""


class PluginCrashed(IrflowError):
    """A plugin's process died (an exit, a signal) or the plugin raised a ``BaseException`` such as
    ``KeyboardInterrupt``: the system fails, named; the other systems go on."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "its process stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


Handler = Callable[..., Any]
"""What the child does with a request: ``handler(state, op, *args)`` (``state``: a dict kept between requests)."""

_LIVE: weakref.WeakSet[PluginProcess] = weakref.WeakSet()


class PluginProcess:
    """One plugin retriever in a child process: :meth:`ask` sends a request and waits for the answer."""

    def __init__(self, spec: str, handler: Handler) -> None:
        self.spec = spec
        context = multiprocessing.get_context("spawn")
        self.conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=serve, args=(child_conn, handler), name=f"irflow-plugin {spec}", daemon=True
        )
        self.process.start()
        child_conn.close()
        self.lock = threading.Lock()
        self.dead: str | None = None  # why the child cannot answer any more
        _LIVE.add(self)

    def ask(self, op: str, *args: Any, what: str) -> Any:
        """The answer to ``op(*args)`` from the child; its errors raised here, its death as :class:`PluginCrashed`
        naming ``what`` it was doing. Waits in steps, so a stop (SIGTERM) in any thread ends the wait and the child."""
        with self.lock:
            if self.dead:
                raise PluginCrashed(self.dead)
            try:
                self.conn.send((op, args))
                status, value = self._receive()
            except PluginCrashed:
                raise
            except (OSError, EOFError):
                self._crashed(what)
            except BaseException:
                self.close()  # a stop: the child goes with the wait
                raise
        if status == "ok":
            return value
        if status == "error":
            raise value
        self.close()  # the plugin raised KeyboardInterrupt (or another BaseException): its state is unknown
        self.dead = f"system {self.spec!r}: {what} raised {value}"
        raise PluginCrashed(self.dead)

    def _receive(self) -> tuple[str, Any]:
        while True:
            ready = multiprocessing.connection.wait([self.conn, self.process.sentinel], POLL_S)
            if self.conn in ready:
                return self.conn.recv()  # type: ignore[no-any-return,unused-ignore]
            if ready:  # the child is gone and left nothing to read
                raise EOFError
            check_stop()

    def _crashed(self, what: str) -> None:
        self.process.join(JOIN_S)
        self.dead = f"system {self.spec!r} crashed in {what}: {_describe_exit(self.process.exitcode)}"
        self.close()
        raise PluginCrashed(self.dead)

    def close(self) -> None:
        """End the child (closing its pipe ends its loop; a child that does not end is killed)."""
        self.dead = self.dead or f"system {self.spec!r}: its process was closed"
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.process.is_alive():
            self.process.join(0.5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(JOIN_S)
        _LIVE.discard(self)


def close_all() -> None:
    """End every plugin child of this process (at exit, and before a stopped command exits)."""
    for child in list(_LIVE):
        with contextlib.suppress(Exception):
            child.close()


atexit.register(close_all)
at_forced_exit(close_all)


# ---------------------------------------------------------------------------------------------
# the child


def _exit_with_parent() -> None:
    """A daemon thread that ends this process as soon as its parent is gone (the parent's sentinel closes
    when it ends, however it ends)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="irflow-parent-watch", daemon=True).start()


def serve(conn: multiprocessing.connection.Connection, handler: Handler) -> None:
    """The child's loop: ``handler(state, op, *args)`` for one request at a time until the parent closes the
    pipe (``handler`` travels by reference: a module-level function, imported here)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for irflow, which ends this process itself
    _exit_with_parent()
    state: dict[str, Any] = {}
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", handler(state, op, *args))
        except IrflowError as exc:
            reply = ("error", exc)
        except Exception as exc:  # irflow's own code failed: named as the in-process path would name it
            reply = ("error", IrflowError(f"system {state.get('spec', '?')!r}: {type(exc).__name__}: {exc}"))
        except BaseException as exc:  # KeyboardInterrupt, GeneratorExit, ... raised by the plugin
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            reply = ("raised", text)
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError):  # an exception that does not pickle
            status, value = reply
            conn.send((status, IrflowError(str(value)) if isinstance(value, BaseException) else value))
        if reply[0] == "raised":
            return


__all__ = ["PluginCrashed", "PluginProcess", "close_all", "serve"]
