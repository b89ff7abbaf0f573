"""Progress of long stages (download, ingest, encode, index, annotate) on a terminal.

One line on stderr, redrawn at most every half second: what is done out of the total, the rate
(units per second since the first update, counting only the units this process worked on, not
those read from a cache) and the time left at that rate::

    encode corpus  1,024/5,183 docs (20%)  87.3 docs/s  ETA 0:00:47

Work served whole from a cache draws nothing: the line starts at the first unit worked on. Quiet unless
the stream is a terminal, so Prefect workers, CI logs and redirected output get
nothing, and inside Dask workers; ``IRFLOW_PROGRESS=1`` forces it on and ``0`` off.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

MIN_INTERVAL_S = 0.5


def enabled(stream: Any) -> bool:
    """Whether to draw progress on ``stream``: ``IRFLOW_PROGRESS`` if set, else whether it is a terminal."""
    forced = os.environ.get("IRFLOW_PROGRESS", "").strip().lower()
    if forced in ("0", "false", "no", "off"):
        return False
    if forced in ("1", "true", "yes", "on"):
        return True
    if _in_dask_worker():  # workers share their parent's terminal: many bars would overwrite each other
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed stream
        return False


def _in_dask_worker() -> bool:
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:  # "No worker found"
        return False
    return True


def plural(noun: str) -> str:
    """``query`` -> ``queries``, ``document`` -> ``documents``: a stage's name in a progress line."""
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    return noun + "s"


def format_duration(seconds: float | None) -> str:
    """``H:MM:SS`` (``?`` when unknown)."""
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _amount(value: float, scale: float) -> str:
    return f"{value:,.0f}" if scale == 1 else f"{value / scale:,.1f}"


def format_line(stage: str, done: int, total: int | None, rate: float | None, unit: str, scale: float = 1.0) -> str:
    """The progress line: ``stage done/total unit (pct)  rate unit/s  ETA H:MM:SS``.

    ``rate`` is in raw units per second (``scale`` divides amounts and rate for display: bytes shown
    as MB with ``scale=1e6``); the ETA is the units left at that rate.
    """
    if total:
        head = f"{stage}  {_amount(done, scale)}/{_amount(total, scale)} {unit} ({100 * done / total:.0f}%)"
    else:
        head = f"{stage}  {_amount(done, scale)} {unit}"
    if not rate:
        return f"{head}  ? {unit}/s" + ("  ETA ?" if total else "")
    speed = f"{rate / scale:,.1f} {unit}/s"
    if not total:
        return f"{head}  {speed}"
    return f"{head}  {speed}  ETA {format_duration(max(0, total - done) / rate)}"


class Progress:
    """Counts the done units of one stage and, on a terminal, shows rate and ETA.

    ``advance(n)`` after each piece of work; ``advance(n, worked=False)`` for units that cost nothing
    (read from a cache): they count as done but not in the rate, and draw nothing until some unit is
    worked on (a stage served whole from the cache shows no line). Use as a context manager, or call
    ``close()``, to end the line.
    """

    def __init__(
        self,
        stage: str,
        total: int | None = None,
        *,
        unit: str = "docs",
        scale: float = 1.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stage, self.total, self.unit, self.scale = stage, total, unit, scale
        self.stream = stream if stream is not None else sys.stderr
        self.active = enabled(self.stream)
        self.clock = clock
        self.done = 0
        self.worked = 0
        self._first: tuple[float, int] | None = None  # (time, worked units) at the first update
        self._drawn_at: float | None = None

    @property
    def rate(self) -> float | None:
        """Worked units per second since the first update (None before two): what came before it, a model
        loading or a connection opening, is not part of the rate."""
        if self._first is None:
            return None
        elapsed, units = self.clock() - self._first[0], self.worked - self._first[1]
        return units / elapsed if units > 0 and elapsed > 0 else None

    def line(self) -> str:
        return format_line(self.stage, self.done, self.total, self.rate, self.unit, self.scale)

    def advance(self, n: int, *, worked: bool = True) -> None:
        self.done += n
        if worked:
            self.worked += n
        if self._first is None:
            self._first = (self.clock(), self.worked)
        if not self.active or not self.worked:  # nothing worked on yet: cached units draw no line
            return
        now = self.clock()
        if self._drawn_at is None or now - self._drawn_at >= MIN_INTERVAL_S or self.done == self.total:
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._drawn_at = now
        self.stream.write(f"\r{self.line()}\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.active and self._drawn_at is not None:
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
        self.active = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
