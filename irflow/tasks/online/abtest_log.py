"""An online A/B test's log, read and checked row by row, then summed per randomisation unit.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.readers import fail_at_row, integer_column, read_log_table, utc_time_column

SAT_DWELL_S = 30.0
"""A click with at least this dwell is a satisfied click (Fox et al., "Evaluating implicit measures to
improve web search", TOIS 2005; the 30-second threshold of the SAT-click literature)."""

COUNTS = ("queries", "clicks", "clicks_sq", "successes", "abandoned", "rr", "rr_sq", "satisfied", "conversions")
"""Per-unit sums the metrics are ratios of (``*_sq``: sums of squares, for the per-impression variance)."""


@dataclass(frozen=True)
class AbLog:
    """A checked log: one row per query shown, with the per-query values every metric needs.

    ``rows`` has ``unit``, ``arm`` and the per-query values ``clicks``, ``success`` (a click), ``rr``
    (1/position of the first click, 0 without one), ``satisfied`` and ``converted`` (0/1), plus ``day``
    when the log has one. ``has`` names the optional inputs present (``position``, ``dwell``,
    ``converted``, ``day``).
    """

    path: str
    unit: str
    arms: tuple[str, ...]  # in order of first appearance
    rows: pd.DataFrame
    has: frozenset[str]

    def values(self) -> pd.DataFrame:
        """Per query shown: ``unit``, ``arm`` (and ``day``) and the value each sum of :data:`COUNTS` adds up."""
        rows = self.rows
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
        return values.assign(day=rows["day"]) if "day" in self.has else values

    def units(self) -> pd.DataFrame:
        """Per-unit sums (:data:`COUNTS`) with the unit's ``arm``: what every metric is a ratio of."""
        return (
            self.values().drop(columns="day", errors="ignore").groupby(["unit", "arm"], sort=False).sum().reset_index()
        )

    def days(self) -> list[Any]:
        """The log's days in order (the sequential test reads the log through each)."""
        if "day" not in self.has:
            raise InputError(
                "the sequential test reads the log day by day and needs a 'day' column (a date such as "
                "2026-11-26, or a day number) or a 'timestamp' column (ISO 8601); the log has neither",
                path=self.path,
            )
        return sorted(self.rows["day"].unique().tolist())


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


def read_ab_log(path: str | Path, unit: str = "user_id") -> AbLog:
    """Read and check an A/B log (see the module docstring); every unit must be in exactly one arm."""
    path = regular_file(path, "an A/B test log (CSV, TSV, JSONL or Parquet)")
    return check_ab_log(read_log_table(path, "A/B test log"), unit, path)


def check_ab_log(table: pd.DataFrame, unit: str = "user_id", path: str | Path = "log") -> AbLog:
    """Check an A/B log already read as a table (the columns of the file, see the module docstring);
    errors name ``path`` (a file, or the argument that held the table)."""
    path = Path(path)
    needed = [unit, "arm", "query", "clicked"]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise InputError(
            f"the log lacks column(s) {', '.join(missing)}; expected one row per query shown with {unit} (--unit), "
            f"arm, query and clicked (optional: position, dwell, converted, day or timestamp); "
            f"columns found: {', '.join(map(str, table.columns)) or 'none'}",
            path=str(path),
        )
    if table.empty:
        raise InputError("the log has no rows; expected one row per query shown", path=str(path))
    table = table.reset_index(drop=True)
    rows = pd.DataFrame({"unit": _ids(table, unit, path), "arm": _ids(table, "arm", path)})
    _ids(table, "query", path)
    rows["clicks"] = _flags(table["clicked"], "clicked", path, table, None)
    clicked = rows["clicks"] > 0
    rows["success"] = clicked.astype(np.int64)
    has = set()
    rows["rr"] = 0.0
    if "position" in table.columns:
        has.add("position")
        given = table["position"].where(clicked, 1)  # a row without a click needs no position
        empty = _text(given) == ""
        if empty.any():
            fail_at_row(
                empty, "position", "the rank of the first click (an integer from 1) on a row with a click", table, path
            )
        rows["rr"] = np.where(clicked, 1.0 / integer_column(given, "position", path, 1).to_numpy(np.float64), 0.0)
    rows["satisfied"] = 0
    if "dwell" in table.columns:
        has.add("dwell")
        dwell = pd.to_numeric(table["dwell"].where(clicked, 0), errors="coerce")  # "" and None: NaN
        bad = dwell.isna() | (dwell < 0) | ~np.isfinite(dwell.fillna(0))
        if bad.any():
            fail_at_row(
                bad, "dwell", "seconds on the clicked result (a number from 0) on a row with a click", table, path
            )
        rows["satisfied"] = (clicked & (dwell >= SAT_DWELL_S)).astype(np.int64)
    rows["converted"] = 0
    if "converted" in table.columns:
        has.add("converted")
        rows["converted"] = _flags(table["converted"], "converted", path, table, 1)
    if "day" in table.columns or "timestamp" in table.columns:
        has.add("day")
        rows["day"] = _days(table, path)
    first_arm = rows.groupby("unit", sort=False)["arm"].transform("first")
    crossed = rows["arm"] != first_arm
    if crossed.any():
        row = int(np.flatnonzero(crossed.to_numpy())[0])
        raise InputError(
            f"row {row + 1}: {unit} {rows['unit'].iloc[row]!r} is in arm {rows['arm'].iloc[row]!r} here and in arm "
            f"{first_arm.iloc[row]!r} on an earlier row; expected each {unit} in one arm only (the unit randomised)",
            path=str(path),
        )
    arms = tuple(pd.unique(rows["arm"]).tolist())
    if len(arms) != 2:
        raise InputError(
            f"the log has {len(arms)} arm(s) ({', '.join(map(repr, arms))}); "
            "expected exactly two, control and treatment",
            path=str(path),
        )
    return AbLog(str(path), unit, arms, rows, frozenset(has))


__all__ = ["COUNTS", "SAT_DWELL_S", "AbLog", "check_ab_log", "read_ab_log"]
