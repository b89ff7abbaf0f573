"""The sequential test's days spilled to a temporary folder: the same numbers, to the bit, as the days held in
memory (the code before the spill), and the folder gone at the end, on an error and when stopped early."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.abtest import simulate_log

from irflow.tasks.core.schema import InputError
from irflow.tasks.online import abtest_days, abtest_sequential
from irflow.tasks.online.abtest import analyse
from irflow.tasks.online.abtest_days import INTS, Day, log_days
from irflow.tasks.online.abtest_log import AbLog, check_ab_log, read_ab_log
from irflow.tasks.online.abtest_sequential import sequential


def _days_in_memory(log: AbLog) -> Iterator[Day]:
    """The days as the code before the spill had them: the whole log grouped per day and unit in memory, each
    day's clicks in the log's order."""
    values = pd.concat(list(log.chunks()))
    for day, rows in values.groupby("day", sort=True):
        summed = rows.groupby("unit")[list(INTS)].sum().reindex(range(len(log.sums)), fill_value=0)
        clicks = rows[rows["rr"] != 0]
        counts = {c: summed[c].to_numpy(np.int64) for c in INTS}
        yield Day(day, counts, clicks["unit"].to_numpy(np.int64), clicks["rr"].to_numpy(np.float64))


def _log(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    """Several units over five days, with clicks, rows repeated (ties: the same unit, day and position) and
    each unit's rows spread over days and chunks."""
    log = simulate_log(9, users=40, days=5)
    log = pd.concat([log, log.iloc[::5]]).sample(frac=1.0, random_state=3).reset_index(drop=True)
    path = tmp_path / "log.csv"
    log.to_csv(path, index=False)
    return log, path


@pytest.fixture
def spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder's parent (``TMPDIR``), to see what is left in it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_tiny_chunks_spilled_give_exactly_the_sequential_test_of_the_days_in_memory(
    tmp_path: Path, spill: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, path = _log(tmp_path)
    written: list[Path] = []
    write = abtest_days._write
    monkeypatch.setattr(abtest_days, "_write", lambda at, arrays: written.append(at) or write(at, arrays))
    tiny = read_ab_log(path, chunk_rows=7)
    metrics = list(analyse(tiny)["metrics"])
    assert {"mrr", "ctr", "satisfied_rate", "conversion_rate"} <= set(metrics)
    spilled = sequential(tiny, "control", "treatment", metrics)
    assert len(written) > len(log) // 7 and not any(spill.iterdir())  # chunk by chunk; the folder is gone
    monkeypatch.setattr(abtest_sequential, "log_days", _days_in_memory)
    assert spilled == sequential(check_ab_log(log), "control", "treatment", metrics)  # float for float
    assert len(spilled["days"]) == 5


def test_the_spill_folder_goes_on_an_error_and_when_stopped_early(
    tmp_path: Path, spill: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, path = _log(tmp_path)
    ab = read_ab_log(path, chunk_rows=50)
    days = log_days(ab)
    assert next(days).day == 1 and any(spill.iterdir())
    days.close()
    assert not any(spill.iterdir())

    def fail(*_: object) -> None:
        raise RuntimeError("stop")

    with monkeypatch.context() as patch:
        patch.setattr(abtest_sequential, "difference_test", fail)
        with pytest.raises(RuntimeError, match="stop"):
            sequential(ab, "control", "treatment", ["ctr"])
    assert not any(spill.iterdir())
    days = log_days(ab)
    next(days)
    (later,) = {p for p in spill.iterdir()}
    with open(sorted(later.iterdir())[-1], "ab") as fh:
        fh.write(b"x")
    with pytest.raises(InputError, match=r"bytes; expected the \d+ written"):
        list(days)
    assert not any(spill.iterdir())
    log.assign(day=log["day"].where(log.index != 100, 6)).to_csv(path, index=False)  # a day the first read lacks
    with pytest.raises(InputError, match="the log changed while read"):
        sequential(ab, "control", "treatment", ["ctr"])
    assert not any(spill.iterdir())
