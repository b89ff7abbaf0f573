"""The calibration section of report.md, the terminal lines and the MLflow metrics, from calibrate_systems."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.compare.calibration import calibrate_systems
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.report.calibration import calibration_section, calibration_text, check_human
from irflow.tasks.tracking.log import calibrated_metrics


def _document() -> dict:
    """Judge favours b by 0.1 on every query; humans (first 40 of 300 queries) find a and b alike."""
    rng = np.random.default_rng(7)
    queries = [f"q{i:03d}" for i in range(300)]
    a = rng.beta(2, 5, size=300)
    b = np.clip(a + rng.normal(0, 0.05, size=300), 0, 1)

    def long(values: dict[str, np.ndarray], qs: list[str]) -> pd.DataFrame:
        rows = [(s, q, "P@10", float(v)) for s, vs in values.items() for q, v in zip(qs, vs, strict=True)]
        return pd.DataFrame(rows, columns=["system", "query_id", "metric", "value"])

    blocks, notes = calibrate_systems(
        long({"a": a, "b": np.clip(b + 0.1, 0, 1)}, queries), long({"a": a[:40], "b": b[:40]}, queries[:40]), "a"
    )
    return {"baseline": "a", "calibrated": blocks, "calibration": {"human": "H", "half_width": 0.02, "notes": notes}}


def test_the_section_shows_both_means_and_flags_a_changed_conclusion() -> None:
    document = _document()
    text = "\n".join(calibration_section(document))
    b = document["calibrated"]["b"]["P@10"]
    assert "## Calibrated by human labels" in text and "`H` holds human judgements of 40 of its queries" in text
    assert f"| `b` | P@10 | {b['judge_only']:.4f} | {b['estimate']:.4f} [{b['ci'][0]:.4f}, {b['ci'][1]:.4f}] |" in text
    assert "| `b` | P@10 | +0.1" in text and "no difference **(differs)**" in text
    assert "> **Note.** P@10, b against a: the judge alone says better" in text
    assert calibration_section({"systems": {}}) == []
    lines = calibration_text(document).splitlines()
    assert lines[0] == "calibrated by H (PPI++, 95% CI; human-judged queries for ±0.02):"
    assert lines[-1].startswith("note: P@10, b against a")


def test_mlflow_metrics_carry_the_estimate_and_interval() -> None:
    block = _document()["calibrated"]["b"]
    metrics = calibrated_metrics(block)
    assert metrics["calibrated.p_at_10"] == pytest.approx(block["P@10"]["estimate"])
    assert (metrics["calibrated.p_at_10.low"], metrics["calibrated.p_at_10.high"]) == tuple(block["P@10"]["ci"])


def _dataset(name: str, queries: list[str], docs: list[str] | None = None) -> Dataset:
    docs = docs or ["d"] * len(queries)
    qrels = pd.DataFrame({"query_id": queries, "doc_id": docs, "relevance": [1] * len(queries)})
    corpus = pd.DataFrame({"doc_id": ["d"]})
    return Dataset(name, "test", corpus, pd.DataFrame({"query_id": list(dict.fromkeys(queries))}), qrels)


@pytest.mark.parametrize(("human", "shared"), [(["q1", "x"], 1), (["q1", "q2", "q3"], 3)], ids=["one", "all"])
def test_a_human_dataset_that_cannot_calibrate_is_refused(human: list[str], shared: int) -> None:
    with pytest.raises(InputError, match=rf"--human H: judges {shared} of the 3 queries of D; expected"):
        check_human(_dataset("D", ["q1", "q2", "q3"]), _dataset("H", human))
    check_human(_dataset("D", ["q1", "q2", "q3"]), _dataset("H", ["q1", "q2", "q3", "q4"][:2]))  # 2 of 3: fine


def test_unknown_query_and_document_ids_of_a_human_dataset_are_named(caplog: pytest.LogCaptureFixture) -> None:
    judged = _dataset("D", ["q1", "q2", "q3"])
    with pytest.raises(
        InputError, match=r"--human H: none of its 2 query ids is one of the queries of D \(e.g. x, y\)"
    ):
        check_human(judged, _dataset("H", ["x", "y"]))
    with pytest.raises(InputError, match=r"none of its 1 document ids is one of the documents of D \(e.g. gone\)"):
        check_human(judged, _dataset("H", ["q1", "q2"], ["gone", "gone"]))
    with caplog.at_level("WARNING"):
        check_human(judged, _dataset("H", ["q1", "q2", *(f"u{i}" for i in range(7))], ["d", "d", *["e"] * 7]))
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "--human H: 7 of 9 query ids are not among the queries of D, left out: u0, u1, u2, u3, u4, ..." in warned
    assert "--human H: 1 of 2 document ids are not among the documents of D, left out: e" in warned
