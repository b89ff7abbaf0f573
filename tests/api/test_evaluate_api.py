"""``irflow.evaluate`` and ``irflow.Evaluation``: the library, in this process, checked against ``irflow run``'s
result folder, against pytrec_eval on real runs, and on its own typed surface (save/load, LaTeX, errors)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import irflow
from irflow.api.evaluation import COMPARISON_COLUMNS

pytrec_eval = pytest.importorskip("pytrec_eval")

TWO = ["bm25", "bm25:k1=1.2,b=0.75"]
METRICS = ["nDCG@10", "P@10", "RR@10", "AP@100", "R@100"]
PYTREC = {"nDCG@10": "ndcg_cut_10", "P@10": "P_10", "AP@100": "map_cut_100", "R@100": "recall_100"}


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> irflow.Evaluation:
    """BM25 and a tuned BM25 on the demo dataset, computed in this process (a module's cache of its own)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return irflow.evaluate("techdocs", TWO, metrics=METRICS)


def as_dict(run: pd.DataFrame) -> dict[str, dict[str, float]]:
    return {q: dict(zip(g["doc_id"], g["score"].astype(float))) for q, g in run.groupby("query_id")}


def test_import_is_light_and_exports_the_api() -> None:
    code = (
        "import sys, irflow; heavy = [m for m in ('pandas', 'prefect', 'mlflow', 'torch') if m in sys.modules];"
        "print(heavy, sorted(irflow.__all__))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.startswith("[] ")
    for name in ("evaluate", "Evaluation", "load_dataset", "InputError", "Dataset"):
        assert f"'{name}'" in done.stdout


def test_a_default_call_starts_no_prefect_and_no_mlflow(tmp_path: Path) -> None:
    code = (
        "import sys, irflow; ev = irflow.evaluate('techdocs', ['bm25'], metrics=['nDCG@10']);"
        "print(round(float(ev.means.loc['bm25', 'nDCG@10']), 6), 'prefect' in sys.modules, 'mlflow' in sys.modules)"
    )
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    score, prefect, mlflow = done.stdout.split()
    assert 0 < float(score) < 1 and prefect == "False" and mlflow == "False"


def test_typed_tables(two: irflow.Evaluation) -> None:
    assert list(two.systems) == ["bm25", "bm25:k1=1.2,b=0.75"] and two.baseline == "bm25"
    assert list(two.means.columns) == METRICS and list(two.means.index) == list(two.systems)
    assert list(two.per_query.columns) == ["system", "query_id", "metric", "value"]
    assert set(two.per_query["system"]) == set(two.systems)
    means = two.per_query.groupby(["system", "metric"])["value"].mean()
    for system in two.systems:
        for metric in METRICS:
            assert means[(system, metric)] == pytest.approx(two.means.loc[system, metric], abs=1e-12)
    assert list(two.comparisons.columns[: len(COMPARISON_COLUMNS)]) == list(COMPARISON_COLUMNS)
    assert set(two.comparisons["metric"]) == set(METRICS) and set(two.comparisons["baseline"]) == {"bm25"}
    row = two.comparisons.set_index("metric").loc["nDCG@10"]
    assert row["delta"] == pytest.approx(two.means.iloc[1]["nDCG@10"] - two.means.iloc[0]["nDCG@10"], abs=1e-12)
    assert row["ci_low"] <= row["delta"] <= row["ci_high"] and 0 <= row["p_value"] <= row["p_adjusted"] <= 1
    assert row["wins"] + row["ties"] + row["losses"] == 80
    assert set(two.runs) == set(two.systems) and list(two.runs["bm25"].columns) == [
        "query_id",
        "doc_id",
        "score",
        "rank",
    ]
    assert two.verdict.startswith("No system beats the baseline bm25 on nDCG@10")
    assert two.coverage is not None and set(two.coverage.judged) == set(two.systems)
    assert two.failed == {} and two.calibrated is None


def test_in_memory_runs_equal_pytrec_eval(two: irflow.Evaluation) -> None:
    qrels = irflow.load_dataset("techdocs").qrels
    qrels_dict = {q: dict(zip(g["doc_id"], g["relevance"].astype(int))) for q, g in qrels.groupby("query_id")}
    runs = {
        "as dict": as_dict(two.runs["bm25"]),
        "as frame": two.runs["bm25:k1=1.2,b=0.75"][["query_id", "doc_id", "score"]],
    }
    ev = irflow.evaluate(qrels=qrels_dict, systems=runs, metrics=METRICS)
    assert list(ev.systems) == ["as dict", "as frame"] and ev.systems["as dict"] == 'memory:"as dict"'
    evaluator = pytrec_eval.RelevanceEvaluator(qrels_dict, set(PYTREC.values()) | {"recip_rank"})
    for label, run in runs.items():
        expected = evaluator.evaluate(run if isinstance(run, dict) else as_dict(run))
        assert len(expected) == 80  # every judged query answered: trec_eval -c and pytrec_eval agree
        got = ev.per_query[ev.per_query["system"] == label].pivot(index="query_id", columns="metric", values="value")
        for ours, theirs in PYTREC.items():
            for q, values in expected.items():
                assert got.loc[q, ours] == pytest.approx(values[theirs], abs=1e-12), (label, ours, q)
    # the same numbers as the systems that made the runs
    assert ev.means.loc["as dict"].to_numpy() == pytest.approx(two.means.loc["bm25"].to_numpy(), abs=1e-12)


def test_a_callable_is_a_system_and_a_failing_one_loses_nothing(two: irflow.Evaluation) -> None:
    run = as_dict(two.runs["bm25"])

    def search(queries: list[dict[str, str]], k: int) -> list[list[tuple[str, float]]]:
        return [sorted(run[q["query_id"]].items(), key=lambda h: -h[1])[:k] for q in queries]

    def broken(queries: list[dict[str, str]], k: int) -> list[list[str]]:
        raise RuntimeError("index not built")

    ev = irflow.evaluate("techdocs", {"bm25": "bm25", "mine": search, "broken": broken}, metrics=METRICS)
    assert ev.means.loc["mine"].to_numpy() == pytest.approx(ev.means.loc["bm25"].to_numpy(), abs=1e-12)
    assert list(ev.failed) == ["broken"] and "index not built" in ev.failed["broken"]
    assert "broken" not in ev.means.index


def test_save_then_load_is_equal_and_writes_the_folder_irflow_run_writes(
    two: irflow.Evaluation, tmp_path: Path
) -> None:
    folder = two.save(tmp_path / "out")
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {"metrics.json", "per_query.parquet", "significance.csv", "report.md", "report.html"} <= names
    assert {"runs/bm25.trec"} <= names and any(n.startswith("plots/") for n in names)
    document = json.loads((folder / "metrics.json").read_text())
    assert document["schema_version"] == 2 and set(document["systems"]) == set(TWO)
    back = irflow.Evaluation.load(folder)
    assert back == two
    assert back.verdict == two.verdict and back.comparisons["p_value"].tolist() == two.comparisons["p_value"].tolist()
    changed = back.means.copy()
    changed.iloc[0, 0] += 1e-9
    assert back != type(back)(**{**back.__dict__, "means": changed})


def test_in_memory_results_round_trip(tmp_path: Path) -> None:
    qrels = pd.DataFrame({"query_id": ["q1", "q1", "q2"], "doc_id": ["a", "b", "c"], "relevance": [2, 0, 1]})
    runs = {"first try": {"q1": {"a": 2.0, "b": 1.0}, "q2": {"c": 0.5, "d": 0.7}}, "b": {"q1": {"b": 3.0, "a": 1.0}}}
    ev = irflow.evaluate(qrels=qrels, systems=runs, metrics=["nDCG@10", "RR@10"])
    assert ev.means.loc["b", "RR@10"] == pytest.approx(0.25)  # q1: 1/2, q2 unanswered: 0 (trec_eval -c)
    assert ev.means.loc["first try", "RR@10"] == pytest.approx(0.75)
    assert irflow.Evaluation.load(ev.save(tmp_path / "mem")) == ev


def test_tables_for_papers_and_notebooks(two: irflow.Evaluation) -> None:
    latex = two.to_latex(caption="BM25 & friends_1")
    assert "\\toprule" in latex and "\\bottomrule" in latex and "BM25 \\& friends\\_1" in latex
    best = two.means["RR@10"].idxmax()
    line = next(row for row in latex.splitlines() if row.startswith(best.replace("_", "\\_") + " &"))
    assert f"\\textbf{{{two.means.loc[best, 'RR@10']:.4f}}}" in line
    assert two.to_markdown().splitlines()[0] == "| system | " + " | ".join(METRICS) + " |"
    page = two._repr_html_()
    assert two.verdict.split(":")[0] in page and "<table" in page


def test_significant_differences_are_marked() -> None:
    qrels = {f"q{i}": {"good": 1} for i in range(30)}
    good = {f"q{i}": {"good": 2.0, "bad": 1.0} for i in range(30)}
    bad = {f"q{i}": {"bad": 2.0, "good": 1.0} for i in range(30)}
    ev = irflow.evaluate(qrels=qrels, systems={"bad_run": bad, "good run": good}, metrics=["RR@10"])
    row = ev.comparisons.iloc[0]
    assert row["system"] == "good run" and row["significant"] and row["delta"] == pytest.approx(0.5)
    assert ev.verdict.startswith("good run is best on RR@10")
    assert "1.0000*" in ev.to_markdown() and "$^{\\dagger}$" in ev.to_latex() and "bad\\_run" in ev.to_latex()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "techdoc"}, "dataset: unknown dataset 'techdoc' (did you mean 'techdocs'?)"),
        ({"systems": ["bm52"]}, "(did you mean 'bm25'?)"),
        ({"metrics": ["nDCG@10", "nDGC@10"]}, "metrics:"),
        ({"depth": 0}, "depth: expected an integer between 1 and 1000"),
        ({"latency_runs": -1}, "latency_runs: expected an integer >= 0"),
        ({"split": "tset"}, "split: techdocs has no split 'tset' (did you mean 'test'?)"),
        ({"systems": [{"q": {"d": 1.0}}]}, "needs a label: pass a mapping"),
        ({"systems": {"x": {"q": {"d": math.nan}}}}, "is not a finite number"),
        ({"systems": {"x": 42}}, "expected a run"),
        ({"systems": []}, "systems: no system given"),
        ({"baseline": "bm53"}, "baseline:"),
        ({"human": "techdcs"}, "human: unknown dataset"),
    ],
)
def test_bad_arguments_are_named_before_anything_loads(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(irflow.InputError) as caught:
        irflow.evaluate(**{"dataset": "techdocs", "systems": ["bm25"], **kwargs})  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError) and message in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qrels": {"q": {"d": 1.5}}, "systems": {"x": {"q": {"d": 1.0}}}}, "expected an integer grade"),
        ({"qrels": {"q": {"d": 1}}, "systems": ["bm25"]}, "searches a corpus, and only judgements were given"),
        ({"qrels": {"q": {"d": 1}}, "systems": {"f": lambda q, k: []}}, "a callable searches queries by their text"),
        ({"qrels": {"q": {"d": 1}}, "dataset": "techdocs"}, "qrels: give judgements with in-memory runs"),
        ({"qrels": {}, "systems": {"x": {"q": {"d": 1.0}}}}, "qrels: no judgements"),
    ],
)
def test_bad_in_memory_input_is_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(irflow.InputError, match="") as caught:
        irflow.evaluate(**kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_track_logs_to_mlflow_as_irflow_run_does(tmp_path: Path) -> None:
    ev = irflow.evaluate("techdocs", TWO, metrics=["nDCG@10"], track=True, output=tmp_path / "tracked")
    assert ev.tracking is not None and ev.tracking.run_id
    document = json.loads((tmp_path / "tracked" / "metrics.json").read_text())
    assert document["mlflow"]["run_id"] == ev.tracking.run_id
    from irflow.tasks.tracking.log import Tracker

    tracker = Tracker("irflow")
    children = tracker.search(f"tags.mlflow.parentRunId = '{ev.tracking.run_id}'")
    assert sorted(r.data.tags.get("mlflow.runName") for r in children) == sorted(ev.systems)
