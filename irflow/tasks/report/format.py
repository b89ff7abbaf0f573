"""Markdown building blocks of report.md: numbers, p-values, tables and images, one way each."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from irflow.tasks.compare.significance import format_p


def num(x: Any, digits: int = 4) -> str:
    """``x`` with ``digits`` decimals; a value that rounds to zero prints unsigned (never ``-0.0000``)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{_no_negative_zero(x, digits):.{digits}f}"


def signed(x: float, digits: int = 4) -> str:
    """``x`` with its sign (``+0.1075``, ``-0.0274``); a value that rounds to zero prints ``0.0000``, no sign."""
    if not math.isfinite(x):
        return num(x, digits)
    if _no_negative_zero(x, digits) == 0:
        return num(0.0, digits)
    return f"{x:+.{digits}f}"


def _no_negative_zero(x: Any, digits: int) -> Any:
    """0.0 for a number that rounds to zero at ``digits`` decimals (-0.00001 would print ``-0.0000``)."""
    return 0.0 if isinstance(x, float | int) and round(float(x), digits) == 0 else x


def mark(row: Any) -> str:
    return ("▲" if row.delta > 0 else "▼") if row.significant else ""


def cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str) -> list[str]:
    spec = {"l": "---", "r": "---:", "c": ":---:"}
    return [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "|" + "|".join(spec[a] for a in align) + "|",
        *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows),
    ]


def ms(cost: Mapping[str, Any], key: str) -> str:
    value = cost.get(key)
    return f"{value:.1f}" if value is not None else "-"


def img(plot_files: Mapping[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({plot_files[name]})", ""] if name in plot_files else []


__all__ = ["cell", "format_p", "img", "mark", "md_table", "ms", "num", "signed"]
