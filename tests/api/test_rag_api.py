"""``irflow.evaluate_rag`` (``irflow.api.rag``) in this process: the numbers ``irflow rag`` writes, the same
folder saved, loaded back equal, bad arguments named, and neither Prefect nor MLflow imported by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from support.cli import irflow

from irflow.api.rag import RagEvaluation, evaluate_rag
from irflow.tasks.core.schema import InputError
from irflow.tasks.rag.id_based import ID_METRICS

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ["bm25", "bm25:k1=0.1,b=0.1"]


def _answers(tmp_path: Path) -> list[Path]:
    """Two answers files over techdocs' first queries: one cites the judged documents, one the unjudged."""
    from irflow.tasks.ingest import load_dataset

    data = load_dataset("techdocs")
    docs = data.corpus["doc_id"].astype(str).tolist()
    good, poor = [], []
    for i, (q, rows) in enumerate(data.qrels.groupby("query_id")):
        if i >= 20:
            break
        relevant = rows.sort_values("relevance", ascending=False)["doc_id"].astype(str).tolist()
        others = [d for d in docs if d not in set(relevant)][i : i + 3]
        good.append(
            {"query_id": str(q), "answer": "yes", "contexts": [{"doc_id": d} for d in relevant[:2] + others[:1]]}
        )
        poor.append(
            {"query_id": str(q), "answer": "no", "contexts": [{"doc_id": d} for d in others[:2] + relevant[:1]]}
        )
    paths = []
    for name, rows in (("good", good), ("poor", poor)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    return paths


def test_answers_files_evaluate_save_and_load_back_equal(tmp_path: Path) -> None:
    good, poor = _answers(tmp_path)
    result = evaluate_rag("techdocs", answers=[good, poor])
    assert result.configurations == ("good", "poor") and result.baseline == "good"
    assert list(result.means.columns) == list(ID_METRICS) and list(result.means.index) == ["good", "poor"]
    assert result.means.loc["good", "id_based_context_recall"] > result.means.loc["poor", "id_based_context_recall"]
    assert list(result.per_sample.columns) == ["system", "query_id", "metric", "value"]
    assert set(result.comparisons["candidate"]) == {"poor"} and result.failures.empty and result.calibrated is None
    assert result.verdict.startswith("On id_based_context_precision, no configuration beats the baseline good")
    saved = result.save(tmp_path / "out")
    report = (saved / "report.md").read_text().splitlines()
    assert report[2] == "**Verdict.** " + result.verdict  # the report leads with the API's sentence
    assert "the closest, poor, is -0." in result.verdict and "Holm-adjusted p = " in result.verdict
    assert "- `good`: answers file: " in report[4] and "-0.0000" not in "\n".join(report)
    files = sorted(p.name for p in saved.iterdir())
    assert files == sorted(
        [
            "answers.jsonl",
            "failures.csv",
            "metrics.json",
            "per_query.parquet",
            "report.html",
            "report.md",
            "significance.csv",
        ]
    )
    loaded = RagEvaluation.load(saved)
    assert loaded == result
    again = loaded.save(tmp_path / "again")
    assert (again / "report.md").read_text() == (saved / "report.md").read_text()
    assert "<table" in result._repr_html_()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({}, "evaluate_rag takes answers"),
        ({"systems": ["bm25"]}, "system needs generator"),
        ({"systems": "bm25", "generator": "extractive"}, "systems="),
        ({"systems": ["bm25"], "generator": "extractive", "depth": 0}, "depth expects"),
        ({"systems": ["bm25"], "generator": "nonsense"}, "generator"),
        ({"systems": ["bm25"], "generator": "extractive", "metrics": ["nDCG@10"]}, "metric: unknown RAG metric"),
        ({"systems": ["bm25"], "generator": "extractive", "metrics": ["faithfulness"]}, "needs judge"),
        ({"systems": ["bm25"], "generator": "extractive", "baseline": "dense:minilm"}, "baseline"),
        ({"answers": ["no/such.jsonl"]}, "answers: no such file"),
        ({"systems": ["bm25"], "generator": "extractive", "seed": -1}, "seed"),
        ({"dataset": "no-such-dataset", "systems": ["bm25"], "generator": "extractive"}, "no-such-dataset"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict[str, object], named: str) -> None:
    arguments: dict[str, object] = {"dataset": "techdocs", **kwargs}
    with pytest.raises(InputError, match=named):
        evaluate_rag(**arguments)  # type: ignore[arg-type]


def test_a_default_call_imports_neither_prefect_nor_mlflow(tmp_path: Path) -> None:
    code = """
import sys
from irflow.api.rag import evaluate_rag
evaluate_rag("techdocs", systems=["bm25"], generator="extractive")
print(sorted(m for m in ("prefect", "mlflow") if m in sys.modules))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IRFLOW_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.e2e
def test_the_numbers_equal_what_irflow_rag_writes(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = ["rag", "--dataset", "techdocs", *(a for s in SYSTEMS for a in ("--system", s)), "--generator", "extractive"]
    done = irflow(*args, "--no-track", "--output", str(out), env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    mine = evaluate_rag("techdocs", systems=SYSTEMS, generator="extractive")
    written = json.loads((out / "metrics.json").read_text())
    for config, block in written["summary"].items():
        for metric, row in block.items():
            assert mine.means.loc[config, metric] == pytest.approx(row["mean"], rel=1e-12, abs=1e-12)
            assert mine.summary.set_index(["configuration", "metric"]).loc[(config, metric), "ci_low"] == (
                pytest.approx(row["ci_low"], rel=1e-12, abs=1e-12)
            )
    cli = RagEvaluation.load(out)
    pd.testing.assert_frame_equal(cli.per_sample, mine.per_sample, rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(cli.comparisons, mine.comparisons, rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(cli.means, mine.means, rtol=1e-12, atol=1e-12)
    saved = mine.save(tmp_path / "api")
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in out.iterdir())
    assert (saved / "answers.jsonl").read_text() == (out / "answers.jsonl").read_text()


def test_configurations_are_named_by_label_with_the_spec_a_column_away() -> None:
    dense = "dense:sentence-transformers/all-MiniLM-L6-v2"
    hybrid = f"hybrid:bm25+{dense}"
    row = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 80, "failed": 0}
    document = {
        "kind": "rag",
        "dataset": {"name": "techdocs", "split": "test"},
        "measures": ["id_based_context_recall"],
        "configurations": {dense: {"k": 5}, hybrid: {"k": 5}},
        "summary": {dense: {"id_based_context_recall": row}, hybrid: {"id_based_context_recall": {**row, "mean": 0.7}}},
        "baseline": dense,
    }
    per_sample = pd.DataFrame(
        {
            "system": [dense, hybrid],
            "query_id": ["q1", "q1"],
            "metric": ["id_based_context_recall"] * 2,
            "value": [0.5, 0.7],
        }
    )
    comparisons = pd.DataFrame(
        {
            "metric": ["id_based_context_recall"],
            "candidate": [hybrid],
            "delta": [0.2],
            "ci_low": [0.1],
            "ci_high": [0.3],
            "p_adjusted": [0.01],
            "significant": [True],
        }
    )
    failures = pd.DataFrame(columns=["system", "query_id", "metric", "error"])
    result = RagEvaluation._build(document, per_sample, comparisons, failures)
    short = "hybrid:bm25+dense:all-MiniLM-L6-v2"
    assert result.configurations == ("dense:all-MiniLM-L6-v2", short) and result.baseline == "dense:all-MiniLM-L6-v2"
    assert list(result.means.index) == ["dense:all-MiniLM-L6-v2", short]
    assert result.summary.set_index("configuration").loc[short, "spec"] == hybrid
    assert list(result.per_sample["system"]) == ["dense:all-MiniLM-L6-v2", short]
    assert result.verdict == (
        f"On id_based_context_recall, {short} scores highest: 0.7000 vs 0.5000 for the baseline "
        "dense:all-MiniLM-L6-v2, +0.2000 (95% CI [+0.1000, +0.3000], Holm-adjusted p = 0.01: significant at α = 0.05)."
    )
