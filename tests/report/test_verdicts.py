"""Every report leads with its verdict and the terminal ends on the same sentence: the RAG verdict (the best
configuration on the headline metric, its difference to the baseline with the interval and Holm), readable
configuration keys, no negative zero; and the demo's judge and human label files that docs/calibration.md uses."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from support.judges import LABELS, judge_and_human_qrels

from irflow.tasks.rag.outputs import describe_configuration, rag_verdict
from irflow.tasks.report.format import num, signed


def test_numbers_never_print_negative_zero() -> None:
    assert [num(-0.0), num(-0.00001), num(-0.00005), num(0.5)] == ["0.0000", "0.0000", "-0.0001", "0.5000"]
    assert [signed(-0.0), signed(-0.00004), signed(0.0), signed(0.1075)] == ["0.0000", "0.0000", "0.0000", "+0.1075"]
    assert f"[{signed(-0.00001)}, {signed(0.10749)}]" == "[0.0000, +0.1075]"
    assert [signed(-0.0274), num(-0.04, 1), num(-0.06, 1), signed(float("nan"))] == ["-0.0274", "0.0", "-0.1", "n/a"]


def _document(means: dict[str, float], **extra: Any) -> dict[str, Any]:
    summary = {c: {"faithfulness": {"mean": m}} for c, m in means.items()}
    configurations = {c: {} for c in means}
    return {
        "measures": ["faithfulness"],
        "baseline": "base",
        "summary": summary,
        "configurations": configurations,
        **extra,
    }


def _comparisons(rows: list[tuple[str, float, float, float, float, bool]]) -> pd.DataFrame:
    columns = ["candidate", "delta", "ci_low", "ci_high", "p_adjusted", "significant"]
    return pd.DataFrame(rows, columns=columns).assign(metric="faithfulness")


def test_the_rag_verdict_names_the_best_its_difference_interval_and_holm() -> None:
    comparisons = _comparisons(
        [("llm", 0.0523, -0.00001, 0.1075, 0.031, True), ("short", -0.02, -0.05, 0.01, 0.2, False)]
    )
    said = rag_verdict(_document({"base": 0.6, "llm": 0.6523, "short": 0.58}), comparisons)
    assert said == (
        "On faithfulness, llm scores highest: 0.6523 vs 0.6000 for the baseline base, +0.0523 (95% CI "
        "[0.0000, +0.1075], Holm-adjusted p = 0.031: significant at α = 0.05)."
    )
    said = rag_verdict(_document({"base": 0.6, "llm": 0.59, "short": 0.58}), comparisons.assign(delta=[-0.01, -0.02]))
    assert said.startswith(
        "On faithfulness, no configuration beats the baseline base (0.6000); the closest, llm, is -0.0100"
    )
    assert rag_verdict(_document({"base": 0.6}), comparisons.iloc[:0]).endswith(
        "nothing to compare: one configuration."
    )
    none = _document({"base": 0.6})
    none["summary"]["base"]["faithfulness"]["mean"] = None
    assert rag_verdict(none, comparisons.iloc[:0]).startswith("No configuration has a value of faithfulness")


def test_the_rag_verdict_quotes_the_calibrated_figures_with_human_verdicts() -> None:
    block = {"estimate": 0.7271, "ci": [0.69, 0.76], "judge_only": 0.6776}
    difference = {"estimate": 0.05, "ci": [-0.00001, 0.1], "conclusion": "no difference"}
    calibrated = {
        "base": {"faithfulness": {**block, "estimate": 0.68}},
        "llm": {"faithfulness": {**block, "difference": difference}},
    }
    document = _document({"base": 0.6, "llm": 0.65}, calibrated=calibrated)
    said = rag_verdict(document, _comparisons([("llm", 0.05, 0.01, 0.09, 0.01, True)]))
    assert said.endswith(
        " Calibrated by human verdicts (PPI++): llm 0.7271 [0.6900, 0.7600] (judge only 0.6776), +0.0500 "
        "[0.0000, +0.1000] against the baseline base: no difference."
    )


def test_a_rag_configuration_is_described_with_readable_keys() -> None:
    identity = {"system": "bm25", "k": 5, "generator_spec": "extractive", "generator_kind": "extractive"}
    assert describe_configuration(identity) == "system: bm25; top k: 5; generator: extractive"
    assert describe_configuration({"answers_file": "a.jsonl", "answers": 20}) == "answers file: a.jsonl; answers: 20"


@pytest.mark.parametrize("name", ["judge", "human"])
def test_the_shipped_demo_labels_are_the_lenient_judge_and_30_human_queries(name: str) -> None:
    """docs/calibration.md's walkthrough imports these files; they are what the tests' helper makes."""
    assert (LABELS / f"{name}.qrels").read_text(encoding="utf-8") == judge_and_human_qrels()[name]
