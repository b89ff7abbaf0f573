"""An online A/B test's log, read and checked row by row, then summed per randomisation unit.

The log is read in chunks of rows, only the columns below, and each chunk is summed per unit before the
next is read, so memory grows with the units (users), not the rows (a 5M-row log: see
``benchmarks/bench_abtest_memory.py``).

The log has one row per query shown (a result page served to a user), in a CSV, TSV, JSONL or Parquet
file:

* the unit column (``--unit``, e.g. ``user_id``): what was randomised; each unit is in one arm only;
* ``arm``: the arm's name (two arms; the names are read from the log);
* ``query``: the query text (or id);
* ``clicked``: the clicks on that page, ``0``/``1`` (or ``true``/``false``), or a count;
* optional ``position``: the rank (1-based) of the first click on the page, needed for ``mrr``;
  ignored on rows without a click;
* optional ``dwell``: seconds spent on the clicked result, for ``satisfied_rate``;
* optional ``converted``: ``0``/``1`` (or ``true``/``false``), for ``conversion_rate``;
* optional ``day`` (a date or a day number) or ``timestamp`` (ISO 8601; its UTC date is the day): needed
  only for the sequential test, which reads the log day by day.

A value that does not fit fails naming the file, the row and the field (the CLI exits 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.readers import LOG_CHUNK_ROWS, fail_at_row, integer_column, iter_log_table, utc_time_column

SAT_DWELL_S = 30.0
"""A click with at least this dwell is a satisfied click (Fox et al., "Evaluating implicit measures to
improve web search", TOIS 2005; the 30-second threshold of the SAT-click literature)."""

COUNTS = ("queries", "clicks", "clicks_sq", "successes", "abandoned", "rr", "rr_sq", "satisfied", "conversions")
"""Per-unit sums the metrics are ratios of (``*_sq``: sums of squares, for the per-impression variance)."""


@dataclass(frozen=True)
class AbLog:
    """A checked log, summed per unit: what every metric needs.

    ``sums`` has one row per unit: ``unit``, ``arm`` and the sums of :data:`COUNTS` over the unit's queries,
    units in order of first appearance. ``has`` names the optional inputs present (``position``, ``dwell``,
    ``converted``, ``day``); ``day_values`` are the log's days. The sequential test reads the log again
    (:meth:`chunks`).
    """

    path: str
    unit: str
    arms: tuple[str, ...]  # in order of first appearance
    sums: pd.DataFrame
    has: frozenset[str]
    day_values: tuple[Any, ...] = ()
    chunk_rows: int = LOG_CHUNK_ROWS
    table: pd.DataFrame | None = field(default=None, repr=False, compare=False)  # a log given as a DataFrame

    def units(self) -> pd.DataFrame:
        """Per-unit sums (:data:`COUNTS`) with the unit's ``arm``: what every metric is a ratio of."""
        return self.sums

    def days(self) -> list[Any]:
        """The log's days in order (the sequential test reads the log through each)."""
        if "day" not in self.has:
            raise InputError(
                "the sequential test reads the log day by day and needs a 'day' column (a date such as "
                "2026-11-26, or a day number) or a 'timestamp' column (ISO 8601); the log has neither",
                path=self.path,
            )
        return sorted(self.day_values)

    def chunks(self) -> Iterator[pd.DataFrame]:
        """The log read again, checked, a chunk at a time (the sequential test's pass): per query shown, in the
        log's order, ``unit`` (its row in :attr:`sums`), ``day`` and the value each sum of :data:`COUNTS` adds."""
        self.days()
        units = pd.Index(self.sums["unit"])
        if self.table is not None:
            chunks = _checked([str(c) for c in self.table.columns], [self.table], self.unit, Path(self.path))
        else:
            chunks = _checked_chunks(Path(self.path), self.unit, self.chunk_rows)
        for rows, _ in chunks:
            yield _values(rows).drop(columns=["arm"]).assign(unit=units.get_indexer(rows["unit"]))


_SLICE_ROWS = 1 << 20
"""Rows summed at once at the end of :class:`_Sums` (the units' reciprocal ranks, a slice of units at a time)."""

FLOATS = ("rr", "rr_sq")
"""The sums of :data:`COUNTS` that are not integers: each unit's are added up in one pass over its rows."""


class _Sums:
    """Per-unit sums over the chunks, units in order of first appearance: integer counts exactly as they come.
    The reciprocal ranks (a log with ``position``) are kept a row at a time, as the unit's code and the click's
    position (8 bytes a row), and summed per unit at the end by pandas' own groupby sum over the whole log: a
    float sum carried from chunk to chunk differs from one read's in its last bit now and then, and the
    numbers must not change with the chunk size."""

    def __init__(self, positions: bool) -> None:
        self.units = pd.Index([], dtype=object)
        self.arm = np.empty(0, dtype=object)
        self.ints = {c: np.zeros(0, np.int64) for c in COUNTS if c not in FLOATS}
        self.positions = positions
        self.codes: list[np.ndarray] = []
        self.ranks: list[np.ndarray] = []  # position of the first click, 0 without one

    def arm_of(self) -> pd.Series:
        return pd.Series(self.arm, index=self.units)

    def add(self, values: pd.DataFrame, ranks: np.ndarray) -> None:
        """Add a chunk's per-query values (``unit``, ``arm`` and :data:`COUNTS`, checked: one arm per unit) and
        its rows' click positions."""
        units = values["unit"]
        codes = self.units.get_indexer(units)
        new = codes < 0
        if new.any():
            fresh = values.loc[new].drop_duplicates("unit")
            self.units = self.units.append(pd.Index(fresh["unit"].to_numpy(dtype=object)))
            self.arm = np.concatenate([self.arm, fresh["arm"].to_numpy(dtype=object)])
            self.ints = {c: np.concatenate([v, np.zeros(len(fresh), np.int64)]) for c, v in self.ints.items()}
            codes = self.units.get_indexer(units)
        for column, total in self.ints.items():
            np.add.at(total, codes, values[column].to_numpy(np.int64))
        if self.positions:
            self.codes.append(codes.astype(np.int32))
            self.ranks.append(ranks.astype(np.int32) if ranks.max(initial=0) < 2**31 else ranks)

    def frame(self) -> pd.DataFrame:
        columns: dict[str, Any] = {"unit": self.units.to_numpy(dtype=object), "arm": self.arm}
        for column in COUNTS:
            columns[column] = np.zeros(len(self.units)) if column in FLOATS else self.ints[column]
        if self.positions:
            codes, ranks = np.concatenate(self.codes), np.concatenate(self.ranks)
            self.codes, self.ranks = [], []
            step = max(1, len(self.units) * _SLICE_ROWS // max(len(codes), 1))  # units of ~_SLICE_ROWS rows
            for first in range(0, len(self.units), step):  # a unit's rows all in one slice, in the log's order
                mask = (codes >= first) & (codes < first + step)
                at = ranks[mask]
                rr = np.where(at > 0, 1.0 / np.maximum(at, 1).astype(np.float64), 0.0)  # as _per_query has it
                for column, value in (("rr", rr), ("rr_sq", rr**2)):
                    sums = pd.Series(value).groupby(codes[mask]).sum()
                    columns[column][sums.index.to_numpy()] = sums.to_numpy()
        return pd.DataFrame(columns)


def _values(rows: pd.DataFrame) -> pd.DataFrame:
    """Per query shown: ``unit``, ``arm`` (and ``day``) and the value each sum of :data:`COUNTS` adds up."""
    values = pd.DataFrame(
        {
            "unit": rows["unit"],
            "arm": rows["arm"],
            "queries": 1,
            "clicks": rows["clicks"],
            "clicks_sq": rows["clicks"] ** 2,
            "successes": rows["success"],
            "abandoned": 1 - rows["success"],
            "rr": rows["rr"],
            "rr_sq": rows["rr"] ** 2,
            "satisfied": rows["satisfied"],
            "conversions": rows["converted"],
        }
    )
    return values.assign(day=rows["day"]) if "day" in rows.columns else values


def _text(column: pd.Series) -> pd.Series:
    """A column as stripped text, a missing value as ``""`` (vectorised: logs have millions of rows)."""
    return column.astype("string").str.strip().fillna("")


def _flags(column: pd.Series, name: str, path: Path, table: pd.DataFrame, maximum: int | None) -> pd.Series:
    """``true``/``false`` or integers from 0 (to ``maximum``) as int64; anything else fails at its row."""
    if pd.api.types.is_bool_dtype(column):
        return column.astype(np.int64)
    if not pd.api.types.is_numeric_dtype(column):
        column = _text(column).str.lower().replace({"true": "1", "false": "0"})
    numbers = pd.to_numeric(column, errors="coerce")
    expected = "0 or 1 (or true/false)" if maximum == 1 else "true/false or a count of clicks from 0"
    bad = numbers.isna() | (numbers != numbers.round()) | (numbers < 0)
    if maximum is not None:
        bad |= numbers > maximum
    if bad.any():
        fail_at_row(bad, name, expected, table, path)
    return integer_column(numbers, name, path, 0)


def _ids(table: pd.DataFrame, name: str, path: Path) -> pd.Series:
    values = _text(table[name]).astype(object)
    if (values == "").any():
        fail_at_row(values == "", name, "a non-empty value", table, path)
    return values


def _days(table: pd.DataFrame, path: Path) -> pd.Series:
    """The ``day`` column (a date or a day number) or the UTC date of ``timestamp``."""
    name = "day" if "day" in table.columns else "timestamp"
    column = table[name]
    if name == "day":
        numbers = pd.to_numeric(column, errors="coerce")
        if numbers.notna().all() and (numbers == numbers.round()).all():
            return numbers.astype(np.int64)
    parsed = utc_time_column(table, name, path, "a date (2026-11-26), a day number or an ISO 8601 time")
    return parsed.dt.strftime("%Y-%m-%d")


_OPTIONAL = ("position", "dwell", "converted", "day", "timestamp")


def _checked_chunks(path: Path, unit: str, chunk_rows: int) -> Iterator[tuple[pd.DataFrame, list[str]]]:
    """The log's rows a chunk at a time, checked, as per-query values (``unit``, ``arm``, ``clicks``,
    ``success``, ``rr``, ``satisfied``, ``converted``, and ``day`` when the log has days), with the log's
    column names. Row numbers in errors are the file's."""
    wanted = {unit, "arm", "query", "clicked", *_OPTIONAL}
    columns, chunks = iter_log_table(path, "A/B test log", wanted.__contains__, chunk_rows)
    return _checked(columns, chunks, unit, path)


def _checked(
    columns: list[str], chunks: Iterable[pd.DataFrame], unit: str, path: Path
) -> Iterator[tuple[pd.DataFrame, list[str]]]:
    needed = [unit, "arm", "query", "clicked"]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise InputError(
            f"the log lacks column(s) {', '.join(missing)}; expected one row per query shown with {unit} (--unit), "
            f"arm, query and clicked (optional: position, dwell, converted, day or timestamp); "
            f"columns found: {', '.join(map(str, columns)) or 'none'}",
            path=str(path),
        )
    for table in chunks:
        yield _per_query(table, unit, path), columns


def _per_query(table: pd.DataFrame, unit: str, path: Path) -> pd.DataFrame:
    """One chunk's rows checked and turned into per-query values (see :func:`_checked_chunks`)."""
    rows = pd.DataFrame({"unit": _ids(table, unit, path), "arm": _ids(table, "arm", path)})
    _ids(table, "query", path)
    rows["clicks"] = _flags(table["clicked"], "clicked", path, table, None)
    clicked = rows["clicks"] > 0
    rows["success"] = clicked.astype(np.int64)
    rows["rr"] = 0.0
    if "position" in table.columns:
        given = table["position"].where(clicked, 1)  # a row without a click needs no position
        empty = _text(given) == ""
        if empty.any():
            fail_at_row(
                empty, "position", "the rank of the first click (an integer from 1) on a row with a click", table, path
            )
        ranks = integer_column(given, "position", path, 1).to_numpy(np.int64)
        rows["rank"] = np.where(clicked, ranks, 0)
        rows["rr"] = np.where(clicked, 1.0 / ranks.astype(np.float64), 0.0)
    rows["satisfied"] = 0
    if "dwell" in table.columns:
        dwell = pd.to_numeric(table["dwell"].where(clicked, 0), errors="coerce")  # "" and None: NaN
        bad = dwell.isna() | (dwell < 0) | ~np.isfinite(dwell.fillna(0))
        if bad.any():
            fail_at_row(
                bad, "dwell", "seconds on the clicked result (a number from 0) on a row with a click", table, path
            )
        rows["satisfied"] = (clicked & (dwell >= SAT_DWELL_S)).astype(np.int64)
    rows["converted"] = 0
    if "converted" in table.columns:
        rows["converted"] = _flags(table["converted"], "converted", path, table, 1)
    if "day" in table.columns or "timestamp" in table.columns:
        rows["day"] = _days(table, path)
    return rows


def _one_arm(rows: pd.DataFrame, arm_of: pd.Series, unit: str, path: Path) -> None:
    """Fails at the first row whose unit was in another arm on an earlier row (of this chunk or before it)."""
    first_arm = rows.groupby("unit", sort=False)["arm"].transform("first")
    if len(arm_of):
        earlier = rows["unit"].map(arm_of)
        first_arm = earlier.where(earlier.notna(), first_arm)
    crossed = rows["arm"] != first_arm
    if crossed.any():
        at = int(np.flatnonzero(crossed.to_numpy())[0])
        raise InputError(
            f"row {int(rows.index[at]) + 1}: {unit} {rows['unit'].iloc[at]!r} is in arm {rows['arm'].iloc[at]!r} "
            f"here and in arm {first_arm.iloc[at]!r} on an earlier row; expected each {unit} in one arm only "
            "(the unit randomised)",
            path=str(path),
        )


def read_ab_log(path: str | Path, unit: str = "user_id", chunk_rows: int = LOG_CHUNK_ROWS) -> AbLog:
    """Read and check an A/B log (see the module docstring), ``chunk_rows`` rows at a time; every unit must be
    in exactly one arm."""
    path = Path(path)
    regular_file(path, "an A/B test log (CSV, TSV, JSONL or Parquet)")
    return _summed(_checked_chunks(path, unit, chunk_rows), unit, path, chunk_rows)


def check_ab_log(table: pd.DataFrame, unit: str = "user_id", path: str | Path = "log") -> AbLog:
    """An A/B log already read as a table (the columns of the file, see the module docstring), checked and summed
    as :func:`read_ab_log` does a file; errors name ``path`` (the argument that held the table) and its row."""
    table = table.reset_index(drop=True)
    columns = [str(c) for c in table.columns]
    summed = _summed(_checked(columns, [table], unit, Path(path)), unit, Path(path), max(len(table), 1))
    return replace(summed, table=table)


def _summed(chunks: Iterable[tuple[pd.DataFrame, list[str]]], unit: str, path: Path, chunk_rows: int) -> AbLog:
    """The checked chunks of a log summed per unit (:class:`AbLog`)."""
    sums: _Sums | None = None
    arms: dict[str, None] = {}
    days: set[Any] = set()
    day_kind = ""
    columns: list[str] = []
    count = 0
    for rows, columns in chunks:
        count += len(rows)
        sums = sums or _Sums("position" in columns)
        _one_arm(rows, sums.arm_of(), unit, path)
        arms.update(dict.fromkeys(pd.unique(rows["arm"]).tolist()))
        if "day" in rows.columns:
            kind = "numbers" if pd.api.types.is_integer_dtype(rows["day"]) else "dates"
            if day_kind and kind != day_kind:
                name = "day" if "day" in columns else "timestamp"
                raise InputError(
                    f"row {int(rows.index[0]) + 1}: field {name!r} holds {kind} here and {day_kind} on earlier rows; "
                    "expected a date (2026-11-26), a day number or an ISO 8601 time, the same kind on every row",
                    path=str(path),
                )
            day_kind = kind
            days.update(pd.unique(rows["day"]).tolist())
        sums.add(_values(rows), rows["rank"].to_numpy() if "rank" in rows.columns else np.zeros(0, np.int64))
    if sums is None or not count:
        raise InputError("the log has no rows; expected one row per query shown", path=str(path))
    has: set[str] = {c for c in ("position", "dwell", "converted") if c in columns}
    if "day" in columns or "timestamp" in columns:
        has.add("day")
    if len(arms) != 2:
        raise InputError(
            f"the log has {len(arms)} arm(s) ({', '.join(map(repr, arms))}); "
            "expected exactly two, control and treatment",
            path=str(path),
        )
    return AbLog(str(path), unit, tuple(arms), sums.frame(), frozenset(has), tuple(days), chunk_rows)


__all__ = ["COUNTS", "SAT_DWELL_S", "AbLog", "read_ab_log"]
