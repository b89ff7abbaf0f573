"""An A/B log day by day, for the sequential test, in memory that grows with the units plus one day.

One chunked pass over the log (:meth:`AbLog.chunks`) spills each chunk's share of each day to a file in a
temporary folder: the integer sums of :data:`INTS` per unit (summed within the chunk) and the day's clicks in
the log's order (the unit and the reciprocal rank, so each unit's float total is added up row by row exactly as
before). Then the days are read back one at a time, in order. The folder (under ``TMPDIR``) is removed at the
end, also on an error or when the caller stops early; each file is written under a temporary name and renamed.
On disk it takes about a byte per count and 12 bytes per click.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.atomic import named_write_errors, temp_dir
from irflow.tasks.core.limits import open_regular
from irflow.tasks.core.schema import InputError
from irflow.tasks.online.abtest_log import COUNTS, FLOATS, AbLog

INTS = tuple(c for c in COUNTS if c not in FLOATS)
"""The sums of :data:`COUNTS` that are integers (exact in any order; the floats are added in the log's order)."""


@dataclass(frozen=True)
class Day:
    """One day of the log: ``counts`` the integer sums of :data:`INTS` per unit (rows of :attr:`AbLog.sums`,
    zero for a unit without a query that day); ``clickers`` and ``rr`` the day's clicks in the log's order, the
    clicking unit and its reciprocal rank."""

    day: Any
    counts: dict[str, np.ndarray]
    clickers: np.ndarray
    rr: np.ndarray


@dataclass(frozen=True)
class _Spilled:
    """One spill file: the chunk it came from and its size when written (read back only at that size)."""

    chunk: int
    size: int


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest unsigned type that holds them (most counts fit in a byte)."""
    return values.astype(np.min_scalar_type(int(values.max(initial=0))))


def _write(path: Path, arrays: list[np.ndarray]) -> int:
    """``arrays`` in one file, written under a temporary name and renamed; its size in bytes."""
    part = path.with_name(f".{path.name}.part")
    with named_write_errors(path), open(part, "wb") as fh:
        for array in arrays:
            np.save(fh, array, allow_pickle=False)
    os.replace(part, path)
    return path.stat().st_size


def _read(path: Path, spilled: _Spilled) -> list[np.ndarray]:
    """The arrays of one spill file, after checking it is the file written (a regular file of that size)."""
    with open_regular(path, "a spill file of the sequential test") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size != spilled.size:
            raise InputError(
                f"{size:,} bytes; expected the {spilled.size:,} written (changed while the test ran)", path=str(path)
            )
        return [np.load(fh, allow_pickle=False) for _ in range(4)]


def _file(folder: Path, day: int, chunk: int) -> Path:
    return folder / f"day{day:06d}.chunk{chunk:08d}.npy"


def _spill(log: AbLog, days: list[Any], folder: Path) -> list[list[_Spilled]]:
    """Each chunk's share of each day to its own file in ``folder``; per day, its files in the log's order."""
    day_index = pd.Index(days)
    spilled: list[list[_Spilled]] = [[] for _ in days]
    units = len(log.sums)
    for chunk, values in enumerate(log.chunks()):
        at = day_index.get_indexer(values["day"])
        if (at < 0).any() or (values["unit"] < 0).any():
            raise InputError("a day or unit not in the first read: the log changed while read", path=log.path)
        key = at.astype(np.int64) * units + values["unit"].to_numpy(np.int64)
        summed = values[list(INTS)].groupby(key, sort=True).sum()  # per (day, unit), day by day
        keys = summed.index.to_numpy(np.int64)
        counts, codes = summed.to_numpy(np.int64), keys % units
        clicked = values["rr"].to_numpy() != 0  # adding 0.0 changes no total
        click_days = at[clicked]
        order = np.argsort(click_days, kind="stable")  # each day's clicks in the log's order
        clickers, rr = (
            values["unit"].to_numpy(np.int64)[clicked][order],
            values["rr"].to_numpy(np.float64)[clicked][order],
        )
        click_days = click_days[order]
        for day in np.unique(keys // units):
            rows = slice(*np.searchsorted(keys // units, [day, day + 1]))
            hits = slice(*np.searchsorted(click_days, [day, day + 1]))
            arrays = [_narrow(codes[rows]), _narrow(counts[rows]), _narrow(clickers[hits]), rr[hits]]
            spilled[day].append(_Spilled(chunk, _write(_file(folder, day, chunk), arrays)))
    return spilled


def log_days(log: AbLog) -> Generator[Day, None, None]:
    """The log's days in order (:meth:`AbLog.days`), each :class:`Day` read from the spill of one pass over the
    log; the spill folder goes when the iteration ends or is closed (use :func:`contextlib.closing`)."""
    days = log.days()
    units = len(log.sums)
    with temp_dir(Path(tempfile.gettempdir()), "irflow-abtest-days") as folder:
        for index, (day, files) in enumerate(zip(days, _spill(log, days, folder), strict=True)):
            counts = {c: np.zeros(units, np.int64) for c in INTS}
            clickers, rr = [], []
            for spilled in files:
                path = _file(folder, index, spilled.chunk)
                codes, summed, who, ranks = _read(path, spilled)
                path.unlink()
                for column, values in zip(INTS, summed.T, strict=True):
                    counts[column][codes] += values.astype(np.int64)  # a unit once per chunk: no repeats
                clickers.append(who.astype(np.int64))
                rr.append(ranks)
            yield Day(
                day, counts, np.concatenate(clickers or [np.zeros(0, np.int64)]), np.concatenate(rr or [np.zeros(0)])
            )


__all__ = ["INTS", "Day", "log_days"]
