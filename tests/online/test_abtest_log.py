"""Reading an A/B log: the three file formats give the same numbers, bad rows fail naming the file, the
row and the field; and the report states a sample-ratio mismatch before anything else."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.abtest import simulate_log

from irflow.tasks.core.schema import InputError
from irflow.tasks.online import abtest_log
from irflow.tasks.online.abtest import analyse, available_metrics, choose_control
from irflow.tasks.online.abtest_log import read_ab_log
from irflow.tasks.online.abtest_report import write_abtest
from irflow.tasks.online.abtest_sequential import sequential


def test_csv_jsonl_and_parquet_read_the_same(tmp_path: Path) -> None:
    log = simulate_log(1, users=200)
    log.to_csv(tmp_path / "log.csv", index=False)
    log.to_json(tmp_path / "log.jsonl", orient="records", lines=True)
    log.to_parquet(tmp_path / "log.parquet")
    results = [analyse(read_ab_log(tmp_path / f"log.{suffix}")) for suffix in ("csv", "jsonl", "parquet")]
    for result in results[1:]:
        for name, values in result["metrics"].items():
            assert {k: pytest.approx(v) for k, v in values.items()} == results[0]["metrics"][name]
    assert set(results[0]["metrics"]) == {
        "ctr",
        "success_rate",
        "abandonment",
        "mrr",
        "satisfied_rate",
        "conversion_rate",
    }
    # a query with a click is a success, one without is abandoned; with 0/1 clicks CTR is the success rate
    ctr = results[0]["metrics"]["ctr"]
    assert results[0]["metrics"]["abandonment"]["control"] == pytest.approx(1 - ctr["control"])
    assert results[0]["metrics"]["success_rate"]["difference"] == pytest.approx(ctr["difference"])


def test_the_simplest_log_and_click_counts(tmp_path: Path) -> None:
    rows = [("u1", "A", "q", "true"), ("u1", "A", "q2", "false"), ("u2", "A", "q", "2"), ("u3", "B", "q", "0")]
    rows += [("u4", "B", "q", "1"), ("u4", "B", "q3", "1")]
    path = tmp_path / "log.csv"
    pd.DataFrame(rows, columns=["visitor", "arm", "query", "clicked"]).to_csv(path, index=False)
    log = read_ab_log(path, unit="visitor")
    assert available_metrics(log) == ["ctr", "success_rate", "abandonment"]
    result = analyse(log, control="B")
    assert (result["control"], result["treatment"]) == ("B", "A")
    ctr, success = result["metrics"]["ctr"], result["metrics"]["success_rate"]
    assert (ctr["treatment"], success["treatment"]) == (pytest.approx(3 / 3), pytest.approx(2 / 3))
    assert result["unavailable"] == {"mrr": "position", "satisfied_rate": "dwell", "conversion_rate": "converted"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop(columns=["clicked"]), "lacks column(s) clicked"),
        (lambda t: t.assign(clicked=t["clicked"].astype(str).replace({"1": "yes"})), "field 'clicked' is 'yes'"),
        (lambda t: t.assign(user_id=t["user_id"].where(t.index != 4, "")), "row 5: field 'user_id'"),
        (lambda t: t.assign(position=t["position"].where(t["clicked"] == 0, None)), "field 'position'"),
        (lambda t: t.assign(dwell=t["dwell"].where(t["clicked"] == 0, -3)), "field 'dwell'"),
        (lambda t: t.assign(converted=2), "field 'converted' is '2'; expected 0 or 1"),
        (lambda t: t.assign(arm=t["arm"].where(t["user_id"] != "u0", "other")), "3 arm(s)"),
    ],
)
def test_bad_logs_fail_naming_the_file_row_and_field(tmp_path: Path, change: object, message: str) -> None:
    path = tmp_path / "bad.csv"
    change(simulate_log(2, users=30)).to_csv(path, index=False)  # type: ignore[operator]
    with pytest.raises(InputError) as err:
        read_ab_log(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_a_unit_in_both_arms_is_refused(tmp_path: Path) -> None:
    log = simulate_log(2, users=30)
    first = log["user_id"].iloc[0]
    other = log.index[(log["user_id"] != first)][0]
    log.loc[other, "user_id"] = first
    log.loc[other, "arm"] = "treatment" if log["arm"].iloc[0] == "control" else "control"
    path = tmp_path / "crossed.csv"
    log.to_csv(path, index=False)
    with pytest.raises(InputError, match=rf"row {other + 1}: user_id '{first}' is in arm .* expected each user_id"):
        read_ab_log(path)


def test_control_choice_and_sequential_needs_a_day(tmp_path: Path) -> None:
    assert choose_control(("B", "Control"), None) == ("Control", "B")
    assert choose_control(("B", "A"), None) == ("B", "A")  # the log's first arm
    with pytest.raises(InputError, match="--control 'C' is not an arm of the log; its arms: B, A"):
        choose_control(("B", "A"), "C")
    path = tmp_path / "log.csv"
    simulate_log(3, users=50).drop(columns=["day"]).to_csv(path, index=False)
    with pytest.raises(InputError, match="needs a 'day' column .* or a 'timestamp' column"):
        sequential(read_ab_log(path), "control", "treatment", ["ctr"])


def test_report_states_a_mismatch_first(tmp_path: Path) -> None:
    path = tmp_path / "skewed.jsonl"
    log = simulate_log(5, users=3000, treatment_share=0.57)
    log.assign(timestamp=pd.to_datetime("2026-11-01") + pd.to_timedelta(log.pop("day"), unit="D")).to_json(
        path, orient="records", lines=True, date_format="iso"
    )
    ab = read_ab_log(path)
    analysis = analyse(ab)
    seq = sequential(ab, analysis["control"], analysis["treatment"], list(analysis["metrics"]))
    assert len(seq["days"]) == 7 and seq["days"][0] == "2026-11-02"
    for name, values in seq["metrics"].items():  # through the last day: the whole log
        assert values["difference"][-1] == pytest.approx(analysis["metrics"][name]["difference"], rel=1e-9)
        assert values["p_value"][-1] == pytest.approx(analysis["metrics"][name]["p_value"], rel=1e-6)
    write_abtest(tmp_path / "out", analysis, seq)
    document = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert document["abtest"]["srm"]["mismatch"] is True
    report = (tmp_path / "out" / "report.md").read_text().splitlines()
    # the verdict first, saying the mismatch makes it untrustworthy, then the mismatch itself
    assert (
        report[2].startswith("**Verdict.** ") and "sample-ratio mismatch" in report[2] and "untrustworthy" in report[2]
    )
    assert report[4].startswith("> **Sample-ratio mismatch") and "untrustworthy" in report[4]
    assert "*Untrustworthy: sample-ratio mismatch" in "\n".join(report)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Sample-ratio mismatch" in page and "Sequential test (mSPRT)" in page


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_a_log_read_in_chunks_gives_exactly_the_numbers_of_one_read(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 97 rows (units spread over many of them) sum to the same units, metrics and sequential test,
    number for number, as one chunk holding the whole log."""
    log = simulate_log(4, users=300)
    path = tmp_path / f"log.{suffix}"
    if suffix == "jsonl":
        log.to_json(path, orient="records", lines=True)
    else:
        getattr(log, f"to_{suffix}")(path, index=False)
    whole = read_ab_log(path, chunk_rows=len(log))
    monkeypatch.setattr(abtest_log, "_SLICE_ROWS", 50)  # the reciprocal ranks summed a few units at a time
    chunked = read_ab_log(path, chunk_rows=97)
    assert chunked.units().equals(whole.units()) and chunked.arms == whole.arms and chunked.days() == whole.days()
    # the reciprocal ranks, summed as pandas sums one read of the whole log (Kahan, in the log's order): the bits
    rr = np.where(log["clicked"] > 0, 1 / pd.to_numeric(log["position"]).fillna(1), 0.0)
    expected = pd.DataFrame({"unit": log["user_id"], "rr": rr, "rr_sq": rr**2}).groupby("unit", sort=False).sum()
    assert np.array_equal(chunked.units()[["rr", "rr_sq"]].to_numpy(), expected.to_numpy())
    assert analyse(chunked) == analyse(whole)
    metrics = list(analyse(whole)["metrics"])
    assert sequential(chunked, "control", "treatment", metrics) == sequential(whole, "control", "treatment", metrics)


def test_errors_in_later_chunks_name_the_files_row(tmp_path: Path) -> None:
    log = simulate_log(2, users=60)
    path = tmp_path / "bad.csv"
    log.assign(clicked=log["clicked"].astype(str).where(log.index != 250, "yes")).to_csv(path, index=False)
    with pytest.raises(InputError, match=r"bad.csv: row 251: field 'clicked' is 'yes'"):
        read_ab_log(path, chunk_rows=100)
    first = log["user_id"].iloc[0]
    crossed = log.copy()
    crossed.loc[300, ["user_id", "arm"]] = [first, "treatment" if log["arm"].iloc[0] == "control" else "control"]
    crossed.to_csv(path, index=False)
    with pytest.raises(InputError, match=rf"row 301: user_id '{first}' is in arm .* on an earlier row"):
        read_ab_log(path, chunk_rows=100)
    mixed = log.assign(day=log["day"].astype(str).where(log.index < 200, "2026-11-26"))
    mixed.to_csv(path, index=False)
    with pytest.raises(InputError, match=r"row 201: field 'day' holds dates here and numbers on earlier rows"):
        read_ab_log(path, chunk_rows=100)
