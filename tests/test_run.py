"""End to end: the ``irflow`` command on the embedded demo dataset, checked independently."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from irflow.tasks.runs import read_trec

pytrec_eval = pytest.importorskip("pytrec_eval")


def irflow(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "irflow.flows.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[1],
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
    }


def test_datasets_info_techdocs_json(env: dict[str, str]) -> None:
    done = irflow("datasets", "info", "techdocs", "--json", env=env)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["name"] == "techdocs" and info["split"] == "test"
    assert info["documents"] >= 300 and info["queries"] >= 60
    assert set(info["grades"]) == {"0", "1", "2", "3"} and sum(info["grades"].values()) == info["judgements"]
    assert len(info["fingerprint"]) == 64
    assert set(info["document_metadata"]) >= {"doc_type"} and set(info["query_metadata"]) >= {"category", "difficulty"}


def test_run_writes_results_that_trec_eval_confirms(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = irflow(
        "run",
        "--system",
        "bm25",
        "--system",
        "dense:minilm",
        "--metric",
        "nDCG@10",
        "--metric",
        "R@100",
        "--metric",
        "P@10",
        "--latency-runs",
        "1",
        "--output",
        str(out),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[retrieve bm25] Finished in state Completed()" in done.stderr  # log lines name the Prefect run
    assert "DEBUG" not in done.stderr and "HTTP Request" not in done.stderr and "View at" not in done.stderr
    document = json.loads((out / "metrics.json").read_text())
    systems = ["bm25", "dense:sentence-transformers/all-MiniLM-L6-v2"]
    assert list(document["systems"]) == systems
    assert document["dataset"]["name"] == "techdocs" and len(document["dataset"]["fingerprint"]) == 64
    for system in systems:
        assert document["cost"][system]["p95_ms"] > 0 and document["cost"][system]["queries_per_second"] > 0

    per_query = pd.read_parquet(out / "per_query.parquet")
    assert list(per_query.columns) == ["system", "query_id", "metric", "value"]
    n_queries = document["dataset"]["queries"]
    assert len(per_query) == len(systems) * n_queries * 3

    # Recompute every number from the TREC run files with pytrec_eval, independently of irflow's metrics.
    qrels_lines = (
        (Path(__file__).resolve().parents[1] / "irflow/datasets/techdocs/qrels/test.tsv").read_text().splitlines()[1:]
    )
    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_lines:
        q, d, g = line.split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "P.10"})
    names = {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100", "P@10": "P_10"}
    runs = sorted((out / "runs").glob("*.trec"))
    assert len(runs) == 2
    for system in systems:
        from irflow.tasks.systems import as_spec

        run = read_trec(out / "runs" / f"{as_spec(system).slug}.trec")
        as_dict: dict[str, dict[str, float]] = {}
        for q, d, s in zip(run["query_id"], run["doc_id"], run["score"]):
            as_dict.setdefault(q, {})[d] = float(s)
        expected = evaluator.evaluate(as_dict)
        for metric, key in names.items():
            mean = sum(expected.get(q, {}).get(key, 0.0) for q in qrels) / len(qrels)
            assert document["systems"][system][metric] == pytest.approx(mean, abs=1e-9)
            rows = per_query[(per_query["system"] == system) & (per_query["metric"] == metric)]
            got = dict(zip(rows["query_id"], rows["value"]))
            for q in qrels:
                assert got[q] == pytest.approx(expected.get(q, {}).get(key, 0.0), abs=1e-9)
    report = (out / "report.md").read_text()
    assert "techdocs" in report and "`bm25`" in report

    # The run went through Prefect: the temporary server recorded the flow run and every stage in
    # Prefect's database under PREFECT_HOME (what the UI shows once a server runs on it).
    with sqlite3.connect(Path(env["PREFECT_HOME"]) / "prefect.db") as db:
        flow_runs = db.execute(
            "select flow_run.id, flow_run.state_type from flow_run join flow "
            "on flow.id = flow_run.flow_id where flow.name = 'evaluate'"
        ).fetchall()
        assert [state for _, state in flow_runs] == ["COMPLETED"]
        stages = db.execute(
            "select name, state_type from task_run where flow_run_id = ?", (flow_runs[0][0],)
        ).fetchall()
    assert {state for _, state in stages} == {"COMPLETED"}
    names = {name.split("-")[0] if name[-4:-3] == "-" else name for name, _ in stages}  # "ingest-1c0" -> "ingest"
    assert {"ingest", "retrieve bm25", "metrics bm25", "latency bm25", "significance", "report", "track"} <= names


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "--system", "bm26"], "valid system specs"),
        (["run", "--metric", "nDCG@x"], "nDCG"),
        (["run", "--dataset", "nope"], "valid names"),
    ],
)
def test_bad_arguments_fail_fast_with_the_choices(
    env: dict[str, str], tmp_path: Path, args: list[str], expected: str
) -> None:
    done = irflow(*args, "--output", str(tmp_path / "never"), env=env, timeout=120)
    assert done.returncode == 2
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "never").exists()
