"""A result folder whose per_query.parquet is damaged: named errors (file, column, query), never a report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from irflow.tasks.core.schema import InputError
from irflow.tasks.report.write import load_results


def _folder(tmp_path: Path, table: pd.DataFrame) -> Path:
    (tmp_path / "metrics.json").write_text(json.dumps({"systems": {}, "measures": ["nDCG@10"]}), encoding="utf-8")
    table.to_parquet(tmp_path / "per_query.parquet")
    return tmp_path


def _table(values: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": ["bm25"] * len(values),
            "query_id": [f"q{i}" for i in range(len(values))],
            "metric": ["nDCG@10"] * len(values),
            "value": values,
        }
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_per_query_value_names_file_column_and_query(tmp_path, bad):
    folder = _folder(tmp_path, _table([0.5, bad, 0.25]))
    with pytest.raises(InputError, match=r"per_query\.parquet: column 'value' holds (nan|inf) for query 'q1'"):
        load_results(folder)


def test_a_missing_column_or_query_id_is_named(tmp_path):
    with pytest.raises(InputError, match=r"per_query\.parquet: missing column\(s\) value"):
        load_results(_folder(tmp_path, _table([0.5]).drop(columns="value")))
    table = _table([0.5, 0.75])
    table.loc[1, "query_id"] = None
    with pytest.raises(InputError, match=r"per_query\.parquet: column 'query_id' is empty in row 2"):
        load_results(_folder(tmp_path, table))
