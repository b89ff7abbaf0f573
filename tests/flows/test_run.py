"""End to end: the ``irflow`` command on the embedded demo dataset, checked independently."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.cli import irflow
from support.prefect_home import seeded_home
from support.stores import read_only_database

from irflow.tasks.core.output_folder import check_output, publish
from irflow.tasks.core.runs import read_trec
from irflow.tasks.tracking.log import redact

pytrec_eval = pytest.importorskip("pytrec_eval")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(seeded_home(tmp_path / "prefect")),
        "HF_HUB_OFFLINE": "1",
    }


@pytest.mark.e2e
def test_datasets_info_techdocs_json(env: dict[str, str]) -> None:
    done = irflow("datasets", "info", "techdocs", "--json", env=env)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["name"] == "techdocs" and info["split"] == "test"
    assert info["documents"] >= 300 and info["queries"] >= 60
    assert set(info["grades"]) == {"0", "1", "2", "3"} and sum(info["grades"].values()) == info["judgements"]
    assert len(info["fingerprint"]) == 64
    assert set(info["document_metadata"]) >= {"doc_type"} and set(info["query_metadata"]) >= {"category", "difficulty"}


@pytest.mark.e2e
def test_run_writes_results_that_trec_eval_confirms(
    temporary_prefect_server: None, env: dict[str, str], tmp_path: Path
) -> None:
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
    assert "Finished in state" not in done.stderr  # Prefect's run states with -v only (tests/cli/test_quiet_cli.py)
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
        (Path(__file__).resolve().parents[2] / "irflow/datasets/techdocs/qrels/test.tsv").read_text().splitlines()[1:]
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
        from irflow.tasks.systems.specs import as_spec

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

    # The library computes the same numbers in this process, without Prefect, and reads the folder back.
    from irflow import Evaluation, evaluate

    library = evaluate("techdocs", ["bm25", "dense:minilm"], metrics=list(names))
    stored = Evaluation.load(out)
    for system, label in zip(systems, library.systems):
        for metric in names:
            assert library.means.loc[label, metric] == pytest.approx(document["systems"][system][metric], abs=1e-12)
    for table in ("means", "per_query", "comparisons"):
        pd.testing.assert_frame_equal(getattr(library, table), getattr(stored, table), check_exact=True)
    assert library.verdict == stored.verdict and stored.verdict in done.stdout.replace("\n  ", " ")

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


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "--system", "bm26"], "--system: system spec 'bm26': unknown system kind 'bm26'"),
        (["run", "--system", "bm26"], "(did you mean 'bm25'?); `irflow run --help` lists the system specs"),
        (["run", "--metric", "nDCG@x"], "--metric: "),
        (["run", "--dataset", "techdoc"], "--dataset: unknown dataset 'techdoc' (did you mean 'techdocs'?)"),
        (["run", "--depth", "0"], "--depth: expected an integer between 1 and 1000"),
        (["run", "--depth", "5000"], "--depth: expected an integer between 1 and 1000"),
        (["run", "--latency-runs", "-1"], "--latency-runs: expected an integer >= 0"),
        (["run", "--split", "nope"], "--split: techdocs has no split 'nope'; available: test"),
    ],
)
def test_bad_arguments_fail_fast_with_the_choices(
    env: dict[str, str], tmp_path: Path, args: list[str], expected: str
) -> None:
    done = irflow(*args, "--system", "bm25", "--output", str(tmp_path / "never"), env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "never").exists()
    assert not (Path(env["IRFLOW_CACHE_DIR"]) / "datasets").exists()  # nothing was ingested


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["a file", "under a file", "a folder of other files", "read-only folder"])
def test_an_output_that_cannot_take_results_fails_before_any_work(
    env: dict[str, str], tmp_path: Path, case: str
) -> None:
    if case == "read-only folder" and os.geteuid() == 0:
        pytest.skip("root writes whatever the permission bits say (the check's real write covers root's cases)")
    (tmp_path / "file").write_text("keep me")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "locked").mkdir()
    output, expected = {
        "a file": (tmp_path / "file", "expected a folder for the results, found a file"),
        "under a file": (tmp_path / "file" / "out", f"expected a folder, but {tmp_path / 'file'} is a file"),
        "a folder of other files": (tmp_path / "mine", "the folder holds files that are not irflow results"),
        "read-only folder": (tmp_path / "locked" / "out", "cannot be written"),
    }[case]
    (tmp_path / "locked").chmod(0o555)
    try:
        done = irflow("run", "--system", "bm25", "--output", str(output), env=env, timeout=120)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--output {str(output)!r}" in done.stderr and expected in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "file").read_text() == (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    assert not any((tmp_path / "locked").iterdir())
    assert not (Path(env["IRFLOW_CACHE_DIR"]) / "datasets").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["read-only database", "folder", "web server"])
def test_a_tracking_store_that_cannot_be_written_fails_before_any_work(
    env: dict[str, str], tmp_path: Path, case: str, serve_dir: Any
) -> None:
    if case == "read-only database":
        read_only_database(tmp_path / "mlflow.db")
        uri, expected = f"sqlite:///{tmp_path / 'mlflow.db'}", "attempt to write a readonly database"
    elif case == "folder":
        (tmp_path / "store").mkdir()
        uri, expected = f"sqlite:///{tmp_path / 'store'}", "is a folder, not a database file"
    else:
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "index.html").write_text("<html>not MLflow</html>")
        base, _ = serve_dir(tmp_path / "site")
        uri = base.replace("http://", "http://alice:s3cret@")
        expected = "does not answer like an MLflow tracking server"
    env = {**env, "MLFLOW_TRACKING_URI": uri}
    done = irflow("run", "--system", "bm25", "--output", str(tmp_path / "never"), env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert expected in done.stderr and "Traceback" not in done.stderr and "s3cret" not in done.stderr
    assert redact(uri) in done.stderr
    assert not (tmp_path / "never").exists() and not (Path(env["IRFLOW_CACHE_DIR"]) / "datasets").exists()


def test_results_are_published_whole(tmp_path: Path) -> None:
    """A result folder is replaced in one step: a failure while writing leaves the earlier results."""
    target = tmp_path / "results"
    with publish(target) as build:
        (build / "metrics.json").write_text("first")
    with pytest.raises(RuntimeError), publish(target) as build:
        (build / "metrics.json").write_text("second, half-written")
        raise RuntimeError("killed while writing the report")
    assert [p.name for p in tmp_path.iterdir()] == ["results"]  # no temporary folder left
    assert (target / "metrics.json").read_text() == "first"
    check_output(target)  # earlier results may be replaced
    with publish(target) as build:
        (build / "report.md").write_text("second")
    assert sorted(p.name for p in target.iterdir()) == ["report.md"]  # whole: no stale file of the first
