"""A stop asked for by a signal: SIGTERM (a scheduler stopping the job, ``kill PID``) unwinds like Ctrl-C.

The ``irflow`` command installs :func:`terminate` as its SIGTERM handler; while a flow runs, Prefect
puts its own in its place (raising its ``TerminationSignal``, a ``BaseException``) and re-sends the
signal once the flow has unwound. Python runs a handler in the main thread only, so work in other
threads (a Prefect task encoding a corpus) would run on to its end and keep the process alive: such
loops call :func:`check_stop` between steps, and a flow body runs in :func:`stop_on_signal`, which
turns any signal's exception passing through it into a stop every thread sees.

Some work cannot be stopped (a worker thread importing torch, a model loading): Prefect joins its
worker threads before the flow ends. The command therefore arms :func:`exit_on_stop`: once a stop
arrives, the process ends within :data:`EXIT_GRACE_S` seconds, after the :func:`at_forced_exit`
callbacks (MLflow runs still open end KILLED) if the clean unwinding has not ended it by then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

EXIT_GRACE_S = 4.0
"""Seconds a stopped command may take to unwind before it exits without waiting for its threads."""

_STOP = threading.Event()
_EXIT: dict[str, float] = {}  # "grace": seconds, once armed by exit_on_stop
_AT_FORCED_EXIT: list[Callable[[], None]] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C (clean-up runs), exit 143. :func:`stop_requested` stays true,
    because code the exception passes through may wrap it in another exception type."""


def _request_stop(code: int) -> None:
    if _STOP.is_set():
        return
    _STOP.set()
    if "grace" in _EXIT:
        threading.Thread(target=_force_exit, args=(_EXIT["grace"], code), name="irflow-exit", daemon=True).start()


def _force_exit(grace: float, code: int) -> None:
    time.sleep(grace)
    for callback in _AT_FORCED_EXIT:
        with contextlib.suppress(Exception):
            callback()
    with contextlib.suppress(Exception):
        print(f"irflow: terminated ({grace:.0f} s after the stop, not waiting for work still running)", file=sys.stderr)
        sys.stderr.flush()
    os._exit(code)


def exit_on_stop(grace_s: float = EXIT_GRACE_S) -> None:
    """Make this process end at most ``grace_s`` seconds after a stop (the command's choice, not a library's),
    and let no stop be lost where Python cannot raise it (:func:`_signal_in_a_finaliser`)."""
    _EXIT["grace"] = grace_s
    if sys.unraisablehook is not _signal_in_a_finaliser:
        _HOOKS["unraisable"] = sys.unraisablehook
        sys.unraisablehook = _signal_in_a_finaliser


_HOOKS: dict[str, Callable[[Any], Any]] = {}


def _signal_in_a_finaliser(unraisable: Any) -> None:
    """A signal's exception (SIGTERM's ``Terminated`` or Prefect's ``TerminationSignal``, Ctrl-C's
    ``KeyboardInterrupt``) raised while Python ran a finaliser or a callback (``__del__``, a weakref or
    garbage-collector callback: the report stage's plotting runs many) cannot propagate: Python prints it as
    "Exception ignored in ..." with a traceback and goes on, and the stop would be lost (the run went on for
    half a minute). Here the stop is kept instead, quietly: every thread sees it, the forced exit is armed,
    and the signal is delivered again to the main thread, where it unwinds the command at the next step."""
    exc = unraisable.exc_value
    if not isinstance(exc, BaseException) or isinstance(exc, (Exception, SystemExit, GeneratorExit)):
        _HOOKS.get("unraisable", sys.__unraisablehook__)(unraisable)
        return
    interrupted = isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Terminated)
    _request_stop(130 if interrupted else 143)
    import _thread

    def again() -> None:  # from another thread: the main thread takes it at its next step, out of the finaliser
        time.sleep(0.05)
        with contextlib.suppress(Exception):
            _thread.interrupt_main(signal.SIGINT if interrupted else signal.SIGTERM)

    threading.Thread(target=again, name="irflow-signal-again", daemon=True).start()


def at_forced_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` (errors ignored) before a stopped process exits without waiting for its threads."""
    _AT_FORCED_EXIT.append(callback)


def terminate(signum: int, frame: object) -> None:
    """The SIGTERM handler: remember the stop (for every thread) and raise :class:`Terminated` here."""
    _request_stop(128 + signum)
    raise Terminated()


def stop_requested() -> bool:
    """Whether a stop (SIGTERM, or Ctrl-C through :func:`stop_on_signal`) arrived in this process."""
    return _STOP.is_set()


@contextlib.contextmanager
def stop_on_signal() -> Iterator[None]:
    """A signal's exception leaving the block (Ctrl-C, :class:`Terminated`, Prefect's ``TerminationSignal``:
    a ``BaseException`` that is neither an ``Exception`` nor ``SystemExit``) asks every thread to stop."""
    try:
        yield
    except (Exception, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Terminated)
        _request_stop(130 if interrupted else 143)
        raise


def check_stop() -> None:
    """Raise :class:`Terminated` in the calling thread once a stop arrived (a long loop calls it per step)."""
    if _STOP.is_set():
        raise Terminated()


__all__ = [
    "EXIT_GRACE_S",
    "Terminated",
    "at_forced_exit",
    "check_stop",
    "exit_on_stop",
    "stop_on_signal",
    "stop_requested",
    "terminate",
]
