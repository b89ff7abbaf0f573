"""A stop asked for by a signal: SIGTERM (a scheduler stopping the job, ``kill PID``) unwinds like Ctrl-C.

The ``irflow`` command installs :func:`terminate` as its SIGTERM handler; while a flow runs, Prefect
puts its own in its place (raising its ``TerminationSignal``, a ``BaseException``) and re-sends the
signal once the flow has unwound. Python runs a handler in the main thread only, so work in other
threads (a Prefect task encoding a corpus) would run on to its end and keep the process alive: such
loops call :func:`check_stop` between steps, and a flow body runs in :func:`stop_on_signal`, which
turns any signal's exception passing through it into a stop every thread sees.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_STOP = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C (clean-up runs), exit 143. :func:`stop_requested` stays true,
    because code the exception passes through may wrap it in another exception type."""


def terminate(signum: int, frame: object) -> None:
    """The SIGTERM handler: remember the stop (for every thread) and raise :class:`Terminated` here."""
    _STOP.set()
    raise Terminated()


def stop_requested() -> bool:
    """Whether SIGTERM arrived in this process."""
    return _STOP.is_set()


@contextlib.contextmanager
def stop_on_signal() -> Iterator[None]:
    """A signal's exception leaving the block (one that is no ``Exception``: Ctrl-C, :class:`Terminated`,
    Prefect's ``TerminationSignal``) asks every thread to stop."""
    try:
        yield
    except Exception:
        raise
    except BaseException:
        _STOP.set()
        raise


def check_stop() -> None:
    """Raise :class:`Terminated` in the calling thread once SIGTERM arrived (a long loop calls it per step)."""
    if _STOP.is_set():
        raise Terminated()


__all__ = ["Terminated", "check_stop", "stop_on_signal", "stop_requested", "terminate"]
