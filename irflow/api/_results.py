"""What the API's result classes share: equality over their DataFrames, argument checks that name the
argument, and flattening of nested metrics.json blocks into table columns."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.schema import InputError


def same(a: Any, b: Any, *, exact_frames: bool = True) -> bool:
    """Equality that holds for DataFrames, NaN-holding floats, and dataclasses, sequences and mappings of them
    (a dataclass field by field, those with ``compare=False`` left out).

    ``exact_frames``: DataFrames are equal with the same values, index, dtypes and column order
    (``DataFrame.equals``); otherwise with the same values (exactly) whatever their dtypes, index type and
    column order, as a result read back from its folder compares with the one computed.
    """
    if isinstance(a, pd.DataFrame | pd.Series) or isinstance(b, pd.DataFrame | pd.Series):
        if type(a) is not type(b):
            return False
        if exact_frames or not isinstance(a, pd.DataFrame):
            return bool(a.equals(b))
        try:
            pd.testing.assert_frame_equal(
                a,
                b,
                check_dtype=False,
                check_index_type=False,
                check_column_type=False,
                check_like=True,
                check_exact=True,
            )
        except AssertionError:
            return False
        return True
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name), exact_frames=exact_frames)
            for f in dataclasses.fields(a)
            if f.compare
        )
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(same(x, y, exact_frames=exact_frames) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k], exact_frames=exact_frames) for k in a)
    return bool(a == b)


class FrameEquality:
    """Mixin for frozen dataclasses holding DataFrames: ``==`` compares field by field with :func:`same`."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and same(self, other)

    __hash__ = None  # type: ignore[assignment]


def check_probability(name: str, value: Any, suggestion: str) -> float:
    """A number strictly between 0 and 1, or an InputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise InputError(f"{name}={value!r}: expected a number between 0 and 1 ({suggestion})")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """``True`` or ``False``, or an InputError naming ``name``."""
    if not isinstance(value, bool):
        raise InputError(f"{name}={value!r}: expected True or False")
    return value


def check_int(name: str, value: Any, low: int, suggestion: str) -> int:
    """An integer from ``low``, or an InputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{name}={value!r}: expected an integer >= {low} ({suggestion})")
    return int(value)


def flatten(block: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested metrics.json block as flat columns: a pair ``[low, high]`` becomes ``key_low``/``key_high``,
    a nested mapping ``key_sub``."""
    out: dict[str, Any] = {}
    for key, value in block.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}_")
        elif isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
            out[f"{name}_low"], out[f"{name}_high"] = float(value[0]), float(value[1])
        else:
            out[name] = value
    return out


def html_page(title: str, verdict: str, table: pd.DataFrame) -> str:
    """``_repr_html_`` of a result: its title, the verdict and its main table."""
    from html import escape

    return f"<h4>{escape(title)}</h4><p>{escape(verdict)}</p>{table.to_html(float_format=lambda v: f'{v:.4g}')}"


def normalised(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` as metrics.json holds it (tuples as lists): a fresh result equals its loaded copy."""
    return dict(json.loads(json.dumps(document)))


def read_metrics_json(folder: str | Path, what: str) -> dict[str, Any]:
    """A result folder's metrics.json; InputError naming the folder when it is not one of ``what``."""
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        raise InputError(f"path: not a result folder of {what} (metrics.json is missing)", path=str(folder))
    return dict(json.loads(path.read_text(encoding="utf-8")))


def p_text(value: float) -> str:
    """A p-value in three significant digits."""
    return f"{value:.3g}"
