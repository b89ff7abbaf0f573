"""End to end on techdocs: ``irflow annotate`` (Prefect flow, MLflow run) with an offline ensemble of local
judges, its agreement with the human grades, BM25 vs dense benchmarked against it, and the outputs
read back by the zbench import. A subset of queries keeps it short (the full figures:
benchmarks/bench_annotate.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from support.cli import irflow

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }


def test_dry_run_prints_calls_and_cost_and_calls_nothing(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "dry"
    done = irflow(
        "annotate",
        "--dataset",
        "techdocs",
        "--system",
        "bm25",
        "--depth",
        "8",
        "--queries",
        "5",
        "--judge",
        "openai(price=0.01):gpt-4o-mini@http://127.0.0.1:9/v1",
        "--judge",
        "system:bm25",
        "--output",
        str(out),
        "--dry-run",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not out.exists(), "a dry run writes nothing"
    pairs = int(re.search(r"(\d+) pairs", done.stdout)[1])  # type: ignore[index]
    row = next(line.split() for line in done.stdout.splitlines() if line.startswith("openai:gpt-4o-mini"))
    assert int(row[1].replace(",", "")) == pairs > 0 and float(row[-1]) > 0  # calls, estimated USD

    bad = irflow(
        "annotate",
        "--dataset",
        "techdocs",
        "--system",
        "bm25",
        "--judge",
        "oracle:x",
        "--dry-run",
        "--output",
        str(out),
        env=env,
    )
    assert bad.returncode == 2 and "unknown judge kind 'oracle'" in bad.stderr


def test_annotate_techdocs_offline_flow_tracks_and_round_trips(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "annotation"
    done = irflow(
        "annotate",
        "--dataset",
        "techdocs",
        "--system",
        "bm25",
        "--depth",
        "10",
        "--queries",
        "12",
        "--judge",
        "model:minilm",
        "--judge",
        "system:bm25",
        "--benchmark",
        "bm25",
        "--output",
        str(out),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    pairs = summary["pairs"]
    documents = summary["candidates"]["documents"]
    assert summary["candidates"]["queries"] == 12 and 100 < documents <= 120  # BM25 may find fewer than 10
    assert summary["votes"]["valid"] == {"model:minilm": pairs, "system:bm25": pairs}
    assert sum(summary["votes"]["missing"].values()) == 0 and summary["bradley_terry"]["converged"]
    assert summary["prompt_version"] == "pairwise-v1"

    # agreement with the human grades, on battles between two differently graded documents
    human = summary["human_grades"]
    assert human["battles"]["ensemble"]["pairs"] >= 50
    assert human["battles"]["system:bm25"]["agreement"] > 0.75 and human["battles"]["ensemble"]["agreement"] > 0.6
    assert human["zelo_vs_grades"]["accuracy"] > 0.7  # the zELO ranking orders graded pairs well above chance
    assert "agreement with human grades, ensemble" in done.stdout

    # BM25 vs dense against the annotation. Dense scores every techdocs document (385 < depth 1000), so
    # MiniLM as a custom reranker of the candidates ranks them exactly as `--benchmark dense:minilm`
    # would, without encoding the whole corpus in a test.
    import asyncio

    from irflow.tasks.annotate import benchmark as bench
    from irflow.tasks.annotate.candidates import Texts
    from irflow.tasks.ingest import import_dataset, load_dataset

    zelo = pd.read_parquet(out / "zelo.parquet")
    techdocs = load_dataset("techdocs")
    dense = asyncio.run(bench.reranker_predictions(bench.ModelReranker("minilm"), zelo, Texts.of(techdocs)))
    results = {
        "bm25": summary["benchmarks"]["bm25"]["vs_zelo"],
        "dense": bench.summarise(bench.benchmark(zelo[["query_id", "doc_id", "score"]], dense)),
    }
    for values in results.values():
        assert set(values) == {"nDCG", "nDCG@5", "nDCG@10", "accuracy", "R@5", "R@10"}
        assert all(0.0 <= v <= 1.0 for v in values.values()) and values["accuracy"] > 0.6
    assert results["bm25"] != results["dense"]

    # the annotated file is zbench AnnotatedQueryDocuments and the import grades it as qrels.trec says
    import_dataset(out / "annotated.jsonl", "zbench", "techdocs-zelo")
    imported = load_dataset("techdocs-zelo").qrels
    trec = pd.read_csv(out / "qrels.trec", sep=" ", names=["query_id", "zero", "doc_id", "relevance"], dtype=str)
    assert set(zip(imported["query_id"], imported["doc_id"], imported["relevance"].astype(int))) == set(
        zip(trec["query_id"], trec["doc_id"], trec["relevance"].astype(int))
    )
    assert len(zelo) == documents and zelo.groupby("query_id")["score"].mean().abs().max() < 1e-9

    # the MLflow run: judges, prompt version, counts, agreement, plots
    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    run = client.search_runs([client.get_experiment_by_name("irflow-annotate").experiment_id])[0]
    assert run.data.params["prompt_version"] == "pairwise-v1"
    assert run.data.params["judges"] == "model:minilm, system:bm25"
    metrics = run.data.metrics
    assert metrics["calls"] == 2 * pairs and metrics["votes_missing"] == 0
    assert 0 < metrics["agreement.model_minilm_system_bm25"] < 1
    assert metrics["human_agreement.ensemble"] == pytest.approx(human["battles"]["ensemble"]["agreement"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert artifacts == {"plots/pair_matrix.png", "plots/score_distribution.png"}
    assert next((tmp_path / "mlflow" / "artifacts").rglob("pair_matrix.png")).is_file()

    # rerunning resumes: no judge is called again
    again = irflow(
        "annotate",
        "--dataset",
        "techdocs",
        "--system",
        "bm25",
        "--depth",
        "10",
        "--queries",
        "12",
        "--judge",
        "model:minilm",
        "--judge",
        "system:bm25",
        "--output",
        str(out),
        "--dry-run",
        env=env,
    )
    assert again.returncode == 0 and "total" in again.stdout
    assert next(line for line in again.stdout.splitlines() if line.startswith("total")).split()[1] == "0"


def test_dry_run_of_an_input_file_stores_no_dataset(env: dict[str, str], tmp_path: Path) -> None:
    """``--input F --dry-run`` reads the file (its candidates give the estimate) but imports nothing."""
    rows = [
        {
            "query": {"id": f"q{i}", "query": f"how to configure replication {i}"},
            "documents": [{"id": f"d{i}-{j}", "content": f"replication setting {j} of cluster {i}"} for j in range(5)],
        }
        for i in range(3)
    ]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "dry"
    done = irflow("annotate", "--input", str(path), "--name", "pool", "--judge",
                  "openai(price=0.01):gpt-4o-mini@http://127.0.0.1:9/v1", "--output", str(out), "--dry-run",
                  env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 queries, 15 documents" in done.stdout  # every candidate: --k means all for --input
    assert not out.exists() and not (Path(env["IRFLOW_CACHE_DIR"]) / "datasets" / "pool").exists()
    assert not list(Path(env["IRFLOW_CACHE_DIR"]).glob("datasets/*pool*"))
