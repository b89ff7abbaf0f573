"""Calibrating the judge of RAG answers by human verdicts: the file's checks, PPI++ equal to ppi_py on the
same per-answer arrays (failed judgements left out, not 0), agreement equal to scipy and krippendorff."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.core.schema import InputError
from irflow.tasks.rag.calibrate import agreement_lines, answer_agreement, calibrate_answers, read_human_verdicts
from irflow.tasks.report.calibration import calibration_section, calibration_text

ppi = pytest.importorskip("ppi_py")
krippendorff = pytest.importorskip("krippendorff")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verdicts_read_from_jsonl_and_csv(tmp_path: Path) -> None:
    rows = [
        {"query_id": "q1", "metric": "faithfulness", "value": 0.5},
        {"query_id": 2, "metric": "context_recall", "value": 1},
    ]
    from_jsonl = read_human_verdicts(write_jsonl(tmp_path / "h.jsonl", rows))
    (tmp_path / "h.csv").write_text("query_id,metric,value,system\nq1,faithfulness,0.5,\n2,context_recall,1,\n")
    from_csv = read_human_verdicts(tmp_path / "h.csv")
    for table in (from_jsonl, from_csv):
        assert table["query_id"].tolist() == ["q1", "2"] and table["value"].tolist() == [0.5, 1.0]
        assert table["system"].isna().all()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"query_id": "q", "metric": "faithfulness", "value": 1.5},
            "h.jsonl:2: field 'value' is 1.5; expected a number from 0 to 1",
        ),
        ({"query_id": "q", "metric": "faithfulness", "value": "yes"}, "h.jsonl:2: field 'value' is 'yes'"),
        (
            {"query_id": "q", "metric": "ndcg@10", "value": 1},
            "h.jsonl:2: field 'metric' is 'ndcg@10'; expected one of faithfulness",
        ),
        ({"metric": "faithfulness", "value": 1}, "h.jsonl:2: missing required field 'query_id'"),
        (
            {"query_id": "q0", "metric": "faithfulness", "value": 0},
            "h.jsonl:2: a second verdict on faithfulness of query 'q0' (the first is on line 1)",
        ),
    ],
)
def test_bad_verdicts_fail_naming_file_and_line(tmp_path: Path, row: dict, message: str) -> None:
    path = write_jsonl(tmp_path / "h.jsonl", [{"query_id": "q0", "metric": "faithfulness", "value": 1}, row])
    with pytest.raises(InputError) as err:
        read_human_verdicts(path)
    assert message in str(err.value)


def test_a_csv_without_the_value_column_fails_on_its_header(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("query_id,metric\nq1,faithfulness\n")
    with pytest.raises(InputError, match=r"h.csv:1: the header lacks value"):
        read_human_verdicts(tmp_path / "h.csv")


def simulate(seed: int, n_queries: int = 80, n_human: int = 25) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two systems' judge scores (lenient by ~0.15, noisy) on every answer, some judgements failed, and
    human verdicts on the first ``n_human`` queries."""
    rng = np.random.default_rng(seed)
    judged, human = [], []
    for system, level in (("bm25", 0.55), ("hybrid", 0.65)):
        truth = np.clip(rng.normal(level, 0.2, n_queries), 0, 1)
        judge = np.clip(truth + 0.15 + rng.normal(0, 0.1, n_queries), 0, 1)
        for i in range(n_queries):
            failed = (i * 7 + len(system)) % 13 == 0
            judged.append((system, f"q{i}", "faithfulness", None if failed else judge[i]))
            if i < n_human:
                human.append((system, f"q{i}", "faithfulness", truth[i]))
    columns = ["system", "query_id", "metric", "value"]
    return pd.DataFrame(judged, columns=columns), pd.DataFrame(human, columns=columns)


def arrays(judged: pd.DataFrame, human: pd.DataFrame, system: str) -> tuple[np.ndarray, ...]:
    """Independently: labelled = human-judged answers the judge scored; unlabelled = the judge's others."""
    j = judged[judged["system"] == system].set_index("query_id")["value"].dropna()
    h = human[human["system"] == system].set_index("query_id")["value"]
    labelled = [q for q in j.index if q in h.index]
    rest = [q for q in j.index if q not in h.index]
    return h[labelled].to_numpy(float), j[labelled].to_numpy(float), j[rest].to_numpy(float)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibrated_means_and_differences_equal_ppi_py(seed: int) -> None:
    judged, human = simulate(seed)
    out = calibrate_answers(judged, human, baseline="bm25")
    for system in ("bm25", "hybrid"):
        y, yhat, rest = arrays(judged, human, system)
        block = out["calibrated"][system]["faithfulness"]
        assert block["estimate"] == pytest.approx(
            float(ppi.ppi_mean_pointestimate(y, yhat, rest, lam=None)[0]), abs=1e-6
        )
        low, high = ppi.ppi_mean_ci(y, yhat, rest, alpha=0.05, lam=None)
        assert block["ci"] == pytest.approx([float(low[0]), float(high[0])], abs=1e-6)
        assert block["n_human"] == y.size and block["n_judge_only"] == rest.size
        assert block["labels_needed"] is None or block["labels_needed"] >= 2
    both = judged.pivot(index="query_id", columns="system", values="value").dropna()
    labels = human.pivot(index="query_id", columns="system", values="value")
    labelled = [q for q in both.index if q in labels.index]
    d_y = (labels.loc[labelled, "hybrid"] - labels.loc[labelled, "bm25"]).to_numpy()
    d_hat = (both.loc[labelled, "hybrid"] - both.loc[labelled, "bm25"]).to_numpy()
    rest = both.drop(index=labelled)
    d_rest = (rest["hybrid"] - rest["bm25"]).to_numpy()
    diff = out["calibrated"]["hybrid"]["faithfulness"]["difference"]
    assert diff["estimate"] == pytest.approx(
        float(ppi.ppi_mean_pointestimate(d_y, d_hat, d_rest, lam=None)[0]), abs=1e-6
    )
    low, high = ppi.ppi_mean_ci(d_y, d_hat, d_rest, alpha=0.05, lam=None)
    assert diff["ci"] == pytest.approx([float(low[0]), float(high[0])], abs=1e-6)
    failed = judged["value"].isna() & judged["query_id"].isin(human["query_id"])
    counts = out["calibration"]["counts"]
    assert counts["judge_failed"] == int(failed.sum()) > 0  # human verdicts on failed judgements: unused
    assert counts["paired"] == len(human) - int(failed.sum())


def test_the_judge_bias_is_corrected() -> None:
    judged, human = simulate(5, n_queries=400, n_human=120)
    out = calibrate_answers(judged, human)
    agreement = out["calibration"]["agreement"]["bm25"]["faithfulness"]
    assert agreement["bias"] > 0.1  # the judge is lenient ...
    block = out["calibrated"]["bm25"]["faithfulness"]
    truth = human[human["system"] == "bm25"]["value"].mean()
    assert block["judge_only"] - truth > 0.1 and abs(block["estimate"] - truth) < 0.05  # ... and corrected


def test_agreement_equals_scipy_and_krippendorff() -> None:
    rng = np.random.default_rng(3)
    human = pd.Series(rng.uniform(0, 1, 40))
    judge = pd.Series(np.clip(human + rng.normal(0.1, 0.15, 40), 0, 1))
    figures = answer_agreement(judge, human)
    assert figures["r"] == pytest.approx(np.corrcoef(judge, human)[0, 1])
    assert figures["rho"] == pytest.approx(np.corrcoef(judge.rank(), human.rank())[0, 1])
    expected = krippendorff.alpha(reliability_data=np.vstack([human, judge]), level_of_measurement="interval")
    assert figures["alpha_interval"] == pytest.approx(expected)
    assert figures["bias"] == pytest.approx(judge.mean() - human.mean())
    assert figures["mae"] == pytest.approx((judge - human).abs().mean())
    constant = answer_agreement(pd.Series([1.0, 1.0, 1.0]), pd.Series([1.0, 0.0, 1.0]))
    assert constant["r"] is None and constant["rho"] is None and constant["bias"] == pytest.approx(1 / 3)


def test_verdicts_without_a_system_need_a_single_system_run() -> None:
    judged, human = simulate(1)
    unnamed = human.assign(system=None)
    with pytest.raises(InputError, match="name no system, but the run has 2"):
        calibrate_answers(judged, unnamed)
    one = judged[judged["system"] == "bm25"]
    out = calibrate_answers(one, unnamed[human["system"] == "bm25"])
    assert set(out["calibrated"]) == {"bm25"}


def test_too_few_labels_is_a_note_not_a_crash() -> None:
    judged, human = simulate(2)
    out = calibrate_answers(judged, human.head(1))
    assert "bm25" not in out["calibrated"] and any("not calibrated" in note for note in out["calibration"]["notes"])
    stray = pd.DataFrame([("dense", "q1", "faithfulness", 0.5)], columns=human.columns)
    out = calibrate_answers(judged, pd.concat([human, stray]))
    assert out["calibration"]["counts"]["unknown"] == 1
    assert out["calibration"]["counts"]["unknown_examples"] == ["dense/q1"]


def test_the_result_renders_as_a_calibrated_run_does() -> None:
    judged, human = simulate(5)
    out = calibrate_answers(judged, human, baseline="bm25", source="verdicts.jsonl")
    text = calibration_text(out)
    assert text.startswith("calibrated by verdicts.jsonl") and "hybrid faithfulness: judge only" in text
    section = "\n".join(calibration_section({**out, "baseline": "bm25"}))
    assert "## Calibrated by human labels" in section and "against the baseline `bm25`" in section
    lines = agreement_lines(out["calibration"])
    assert lines[0].startswith("judge vs human, bm25 faithfulness on 23 answers: bias +0.1")
    assert lines[-1] == "4 human verdicts unused: the judge failed on those answers"
