"""Tracking and orchestration on the demo dataset: MLflow runs, cached re-runs, Dask, nightly regressions, suites.

The flows run in this process against Prefect's ephemeral server (one per test session); every
test logs to its own SQLite MLflow store (tests/conftest.py). Dense work is shared through one
module-wide embedding cache so the module encodes techdocs once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.cli import irflow, irflow_process
from support.stores import read_only_database

from irflow.tasks.compare import regression
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.experiment import Experiment, load_experiment, suite_table, validate_experiment
from irflow.tasks.tracking.log import (
    TrackingError,
    artifact_root,
    check_tracking,
    git_commit,
    mlflow_key,
    redact,
    system_params,
    tracking_uri,
)

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ["bm25", "dense:minilm", "hybrid:bm25+dense:minilm"]
METRICS = ["nDCG@10", "R@100"]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


# ---------------------------------------------------------------------------------------------
# pure parts


def test_names_keys_and_uris(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (
        mlflow_key("delta", "dense:sentence-transformers/all-MiniLM-L6-v2", "ndcg_at_10")
        == "delta.dense_sentence-transformers_all-MiniLM-L6-v2.ndcg_at_10"
    )
    assert len(mlflow_key("x" * 400)) <= 250
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)  # the default store lives in the working directory, wherever irflow is installed
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlruns' / 'mlflow.db'}"
    assert artifact_root(tracking_uri()) == tmp_path.resolve() / "mlruns" / "artifacts"
    assert artifact_root("http://127.0.0.1:5000") is None
    assert redact("https://alice:s3cret@mlflow.example.com:8443/x") == "https://alice:***@mlflow.example.com:8443/x"


def test_git_commit_is_read_from_the_git_folder(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / ".git" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git" / "packed-refs").write_text(f"# pack-refs\n{sha} refs/heads/main\n")
    assert git_commit(tmp_path) == sha
    (tmp_path / ".git" / "refs" / "heads" / "main").write_text(sha[::-1] + "\n")
    assert git_commit(tmp_path) == sha[::-1]
    assert git_commit(tmp_path / "nowhere") is None


def test_system_params_name_every_model_index_and_bm25_parameter() -> None:
    params = system_params(
        "hybrid(k=30):bm25:k1=1.2,b=0.75+dense(index=hnsw,M=16):minilm",
        info={
            "system": "x",
            "members": {
                f"dense(index=hnsw,M=16):{MINILM}": {
                    "system": f"dense(index=hnsw,M=16):{MINILM}",
                    "index_M": 16,
                    "index_efSearch": 64,
                    "model_identity": "sha256:abc",
                }
            },
        },
        label="fused",
    )
    assert params["system.label"] == "fused" and params["system.kind"] == "hybrid"
    assert (params["bm25.k1"], params["bm25.b"], params["bm25.method"]) == (1.2, 0.75, "lucene")
    assert params["model.name"] == MINILM and params["model.identity"] == "sha256:abc"
    assert (params["index.type"], params["index.M"], params["index.efSearch"]) == ("hnsw", "16", 64)
    assert params["hybrid.k"] == 30
    rerank = system_params("rerank(top=20):minilm@dense:minilm")
    assert rerank["rerank.top"] == 20 and rerank["rerank.model_identity"].startswith(("sha256:", "hf:"))


def test_an_unreachable_tracking_server_fails_naming_its_uri() -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(TrackingError, match=uri.replace(".", r"\.")):
        check_tracking(uri, timeout=2)


def test_experiment_file_labels_cutoffs_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: n\ndatasets: [techdocs]\nsystems: {lex: bm25, dense: dense:minilm}\n"
        "metrics: [nDCG, P@5, Rprec]\ncutoffs: [10, 100]\nbaseline: dense\nseed: 7\n"
    )
    exp = load_experiment(path)
    assert exp.measures() == ["nDCG@10", "nDCG@100", "P@5", "Rprec"]
    assert exp.labelled() == {"lex": "bm25", "dense": f"dense:{MINILM}"}
    assert exp.specs() == [f"dense:{MINILM}", "bm25"] and exp.labels()["bm25"] == "lex"
    degraded = exp.model_copy(update={"systems": {"lex": "bm25", "dense": "dense(max_seq_length=16):minilm"}})
    assert degraded.config_id() == exp.config_id()  # a label keeps its history across spec changes
    assert exp.model_copy(update={"name": "other"}).config_id() != exp.config_id()
    validate_experiment(exp)

    path.write_text("datasets: [techdocs]\nsytems: [bm25]\n")
    with pytest.raises(InputError, match=r"exp\.yaml.*sytems"):
        load_experiment(path)
    for bad, expected in (
        (dict(datasets=["nope"]), "valid names"),
        (dict(systems=["bm26"]), "valid system specs"),
        (dict(systems=["dense:nosuchmodel"]), "not an alias"),
    ):
        with pytest.raises((UnknownNameError, InputError), match=expected):
            validate_experiment(Experiment(**bad))


def test_regressions_need_a_large_and_significant_drop() -> None:
    queries = [f"q{i}" for i in range(40)]

    def table(values: list[float], system: str = "dense") -> pd.DataFrame:
        return pd.DataFrame(
            {"dataset": "d", "system": system, "query_id": queries, "metric": "nDCG@10", "value": values}
        )

    before = table([0.5 + 0.01 * (i % 7) for i in range(40)])
    worse = table([v - 0.2 for v in before["value"]])
    slightly = table([v - 0.005 for v in before["value"]])
    assert len(regression.regressions(regression.paired_changes(before, before), 0.01, 0.05)) == 0
    assert len(regression.regressions(regression.paired_changes(before, slightly), 0.01, 0.05)) == 0  # below threshold
    flagged = regression.regressions(regression.paired_changes(before, worse), 0.01, 0.05)
    assert flagged.iloc[0]["delta"] == pytest.approx(-0.2) and flagged.iloc[0]["p_adjusted"] < 0.05
    causes = regression.likely_causes(
        {"dataset.fingerprint": "a" * 64, "model.identity": "hf:m@1"},
        {"dataset.fingerprint": "b" * 64, "model.identity": "hf:m@2"},
        dataset="d",
        system="dense",
    )
    assert causes == [
        f"dataset d changed (fingerprint {'a' * 12} -> {'b' * 12})",
        "model of dense changed (hf:m@1 -> hf:m@2)",
    ]
    assert "likely cause: model of dense" in regression.describe(flagged.iloc[0].to_dict(), causes[1:])


def test_suite_table_means_over_datasets() -> None:
    documents = {
        "a": {"systems": {"bm25": {"nDCG@10": 0.4}, "dense": {"nDCG@10": 0.6}}},
        "b": {"systems": {"bm25": {"nDCG@10": 0.2}}},
    }
    table = suite_table(documents, "nDCG@10", {"bm25": "lex"})
    assert table.loc["lex", "mean"] == pytest.approx(0.3) and table.loc["lex", "datasets"] == 2
    assert table.loc["dense", "mean"] == pytest.approx(0.6) and table.loc["dense", "datasets"] == 1


# ---------------------------------------------------------------------------------------------
# flows, in this process


@dataclass
class Shared:
    root: Path
    cache: Path
    uri: str
    states: list[Any]

    def documents(self) -> list[dict[str, Any]]:
        return [s.result().to_dict() for s in self.states]

    def use(self, monkeypatch: pytest.MonkeyPatch, mlflow: bool = False) -> None:
        monkeypatch.setenv("IRFLOW_CACHE_DIR", str(self.cache))
        if mlflow:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", self.uri)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """techdocs evaluated twice with the default runner, into one cache and one MLflow store."""
    from irflow.flows.evaluate import evaluate_flow

    root = tmp_path_factory.mktemp("evaluate")
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IRFLOW_CACHE_DIR", str(root / "cache"))
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        states = [
            evaluate_flow(
                systems=SYSTEMS, metrics=METRICS, latency_runs=0, output=str(root / f"run{i}"), return_state=True
            )
            for i in (1, 2)
        ]
    yield Shared(root, root / "cache", uri, states)


def _runs(uri: str, filter_string: str = "", experiment: str = "irflow") -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=filter_string,
        output_format="list",
        order_by=["attributes.start_time ASC"],
    )


def _artifacts(uri: str, run_id: str, path: str | None = None) -> set[str]:
    from mlflow.tracking import MlflowClient

    return {f.path for f in MlflowClient(uri).list_artifacts(run_id, path)}


def _task_states(flow_run_id: Any) -> list[tuple[str, str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return sorted((r.name, r.state.name) for r in runs)


@pytest.mark.e2e
def test_evaluation_is_tracked_as_a_parent_run_with_a_child_per_system(shared: Shared) -> None:
    from prefect.client.orchestration import get_client

    state = shared.states[0]
    document = state.result().to_dict()
    flow_run_id = str(state.state_details.flow_run_id)
    parent = _runs(shared.uri, f"tags.`irflow.kind` = 'evaluation' and tags.`prefect.flow_run_id` = '{flow_run_id}'")
    assert [r.info.run_id for r in parent] == [document["mlflow"]["run_id"]]
    parent = parent[0]
    children = _runs(shared.uri, f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(r.data.tags["irflow.system"] for r in children) == sorted(document["systems"])

    p = parent.data.params
    assert p["dataset.name"] == "techdocs" and p["dataset.split"] == "test"
    assert p["dataset.fingerprint"] == document["dataset"]["fingerprint"]
    assert p["depth"] == "100" and p["seed.significance"] == "0" and p["irflow.version"]
    assert p["git.commit"] == (git_commit() or "unknown")
    dense, label = f"dense:{MINILM}", "dense:all-MiniLM-L6-v2"  # metric keys name systems by label
    assert parent.data.metrics[f"delta.{mlflow_key(label)}.ndcg_at_10"] == pytest.approx(
        document["systems"][dense]["nDCG@10"] - document["systems"]["bm25"]["nDCG@10"]
    )
    assert 0 < parent.data.metrics[f"p.{mlflow_key(label)}.ndcg_at_10"] <= 1
    assert {"metrics.json", "per_query.parquet", "report.md", "significance.csv", "runs"} <= _artifacts(
        shared.uri, parent.info.run_id
    )
    assert any(a.endswith(".trec") for a in _artifacts(shared.uri, parent.info.run_id, "runs"))

    by_system = {r.data.tags["irflow.system"]: r for r in children}
    child = by_system[dense]
    assert child.info.run_name == child.data.tags["irflow.label"] == "dense:all-MiniLM-L6-v2"  # the label
    assert child.data.tags["irflow.spec"] == child.data.params["system.spec"] == dense  # the spec, one tag away
    assert child.data.params["model.name"] == MINILM
    assert child.data.params["model.identity"].startswith(("sha256:", "hf:"))
    assert (
        child.data.params["index.type"] == "flat"
        and child.data.params["dataset.fingerprint"] == p["dataset.fingerprint"]
    )
    assert child.data.metrics["ndcg_at_10"] == pytest.approx(document["systems"][dense]["nDCG@10"], abs=1e-12)
    assert child.data.metrics["r_at_100"] == pytest.approx(document["systems"][dense]["R@100"], abs=1e-12)
    assert child.data.metrics["documents_per_second"] > 0  # measured by this run's embed stage
    assert child.data.metrics["load_seconds"] > 0  # which loaded MiniLM before its first batch
    assert by_system["bm25"].data.params["bm25.k1"] == "0.9"
    assert _artifacts(shared.uri, child.info.run_id) == {"per_query.parquet", "run.trec"}
    assert child.data.tags["prefect.flow_run_id"] == flow_run_id

    with get_client(sync_client=True) as client:  # and back: the flow run names its MLflow run
        assert f"mlflow-run:{parent.info.run_id}" in client.read_flow_run(flow_run_id).tags
        assert any(
            parent.info.run_id in (a.data or "")
            for a in client.read_artifacts()
            if a.key == "mlflow-run" and str(a.flow_run_id) == flow_run_id
        )


@pytest.mark.e2e
def test_rerunning_an_unchanged_evaluation_encodes_nothing(shared: Shared) -> None:
    first, second = shared.documents()
    assert first["systems"] == second["systems"]
    tables = [pd.read_parquet(shared.root / f"run{i}" / "per_query.parquet") for i in (1, 2)]
    pd.testing.assert_frame_equal(*tables)
    states = [dict(_task_states(s.state_details.flow_run_id)) for s in shared.states]
    embed = f"embed {MINILM}"
    assert states[0][embed] == "Completed" and states[1][embed] == "Cached"
    runs = {r.info.run_id: r.data.metrics for r in _runs(shared.uri, "tags.`irflow.kind` = 'evaluation'")}
    assert runs[first["mlflow"]["run_id"]]["documents_encoded"] > 0
    assert runs[second["mlflow"]["run_id"]]["documents_encoded"] == 0
    assert runs[second["mlflow"]["run_id"]]["texts_encoded"] == 0  # no query vectors either


def _write_dataset(folder: Path, documents: int, queries: int = 12) -> Path:
    """A synthetic jsonl dataset: documents about 12 topics, a query per topic judging its documents."""
    topics = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
    ]
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for i in range(documents):
            fh.write(
                json.dumps(
                    {"doc_id": f"d{i}", "title": "", "text": f"{topics[i % 12]} note {i} on {topics[i * 7 % 12]}"}
                )
                + "\n"
            )
    with open(folder / "queries.jsonl", "w") as fh:
        for q in range(queries):
            fh.write(json.dumps({"query_id": f"q{q}", "text": f"notes about {topics[q]}"}) + "\n")
    with open(folder / "qrels.jsonl", "w") as fh:
        for i in range(documents):
            if i % 12 < queries and i % 5 == 0:
                fh.write(json.dumps({"query_id": f"q{i % 12}", "doc_id": f"d{i}", "relevance": 1 + i % 2}) + "\n")
    return folder


@pytest.mark.e2e
def test_dask_runner_gives_the_same_results_and_reports_to_the_one_prefect_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``irflow -v run --task-runner dask`` as typed (a new process) on a corpus of two embedding chunks,
    nothing cached (the cluster's workers encode, one shard each): the numbers and per-query table the library
    computes in this process; the flow and the workers' task runs all report to the one Prefect server (no
    temporary server per worker), and even their Prefect lines come in irflow's log format."""
    import irflow
    from irflow.tasks.embed.cache import CHUNK_SIZE
    from irflow.tasks.ingest import import_dataset

    big = _write_dataset(tmp_path / "big", CHUNK_SIZE + 200)  # two chunks: two shards on two workers
    systems = ["bm25", "dense(max_seq_length=8):minilm", "hybrid:bm25+dense(max_seq_length=8):minilm"]

    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path / "default-cache"))
    import_dataset(big, "jsonl", "synthetic-big")
    expected = irflow.evaluate("synthetic-big", systems, metrics=METRICS, output=tmp_path / "big-default")

    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path / "dask-cache"))  # nothing cached: workers do it all
    import_dataset(big, "jsonl", "synthetic-big")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    done = irflow_process(
        *("-v", "run", "--task-runner", "dask", "--dataset", "synthetic-big", "--latency-runs", "0", "--no-track"),
        *(a for system in systems for a in ("--system", system)),
        *(a for metric in METRICS for a in ("--metric", metric)),
        *("--output", str(tmp_path / "big-dask")),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "big-dask" / "metrics.json").read_text())
    assert document["systems"] == expected.to_dict()["systems"]
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "big-dask" / "per_query.parquet"),
        pd.read_parquet(tmp_path / "big-default" / "per_query.parquet"),
    )
    shards = re.findall(r"\[embed \S+ chunks \[(\d+)\]\] Finished in state Completed\(\)", done.stderr)
    assert sorted(shards) == ["0", "1"], done.stderr[-3000:]  # one task run per chunk, on the cluster's workers

    assert "Starting temporary server" not in done.stderr
    apis = set(re.findall(r"(http://127\.0\.0\.1:\d+)/api/", done.stderr))
    assert apis == {os.environ["PREFECT_API_URL"].removesuffix("/api")}, apis  # the session's, nobody's own
    assert "INFO prefect.task_runs: [retrieve bm25] Finished in state Completed()" in done.stderr  # from a worker
    assert not re.search(r"^\d\d:\d\d:\d\d\.\d{3} \| ", done.stderr, re.M)  # no line in Prefect's own format


@pytest.mark.e2e
def test_nightly_flags_a_degraded_system_and_not_an_unchanged_rerun(
    shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefect.client.orchestration import get_client

    from irflow.cli.compare import cmd_compare
    from irflow.flows.suite import RegressionError, nightly_flow

    shared.use(monkeypatch)  # minilm vectors of techdocs are cached there
    uri = os.environ["MLFLOW_TRACKING_URI"]
    good = Experiment(
        name="nightly-test",
        datasets=["techdocs"],
        systems={"bm25": "bm25", "dense": "dense:minilm"},
        metrics=["nDCG@10", "R@100"],
        mlflow_experiment="nightly",
    )
    degraded = good.model_copy(update={"systems": {"bm25": "bm25", "dense": "dense(max_seq_length=16):minilm"}})

    first = nightly_flow(experiment=good, output=str(tmp_path / "n1"))
    assert first["previous_run_id"] is None
    state = nightly_flow(experiment=degraded, output=str(tmp_path / "n2"), return_state=True)
    assert state.is_failed()
    with pytest.raises(RegressionError) as caught:
        state.result()
    message = str(caught.value)
    assert "dense: nDCG@10 dropped" in message and "delta -0." in message and "p=" in message
    assert "likely cause: system dense changed" in message and "max_seq_length=16" in message
    assert "bm25:" not in message.split("regressed:")[1].split("(MLflow")[0]  # bm25 did not change
    third = nightly_flow(experiment=good, output=str(tmp_path / "n3"))
    assert (
        third["previous_run_id"] == first["mlflow_run_id"] and third["regressions"] == 0 and third["comparisons"] == 4
    )

    nightly = {r.info.run_id: r for r in _runs(uri, "tags.`irflow.kind` = 'nightly'", "nightly")}
    failed = next(r for r in nightly.values() if r.info.status == "FAILED")
    assert (
        failed.data.tags["irflow.regression"] == "true" and "nDCG@10" in failed.data.tags["irflow.regression_message"]
    )
    assert failed.data.metrics["regressions"] == 2
    assert failed.data.metrics[mlflow_key("regression", "delta", "techdocs", "dense", "ndcg_at_10")] < -0.01
    assert "nightly.md" in _artifacts(uri, failed.info.run_id)
    assert nightly[third["mlflow_run_id"]].data.tags["irflow.regression"] == "false"
    with get_client(sync_client=True) as client:
        markdown = [
            a
            for a in client.read_artifacts()
            if a.key == "nightly-comparison" and str(a.flow_run_id) == str(state.state_details.flow_run_id)
        ]
    assert markdown and "regression(s)" in markdown[0].data and "dense" in markdown[0].data

    capsys.readouterr()
    args = argparse.Namespace(
        runs=[first["mlflow_run_id"], failed.info.run_id],
        experiment="nightly",
        last=2,
        kind="evaluation",
        metric=["nDCG@10"],
        alpha=0.05,
        correction="holm",
        family="all",
        permutations=1000,
        seed=0,
    )
    assert cmd_compare(args) == 0
    printed = capsys.readouterr().out
    assert "techdocs" in printed and "dense" in printed and "-0." in printed and "*" in printed
    assert "holm-corrected over all 2 comparison(s) in this table" in printed  # the family is said


@pytest.mark.e2e
def test_a_failing_system_does_not_lose_the_others_in_a_suite(
    shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from irflow.flows.evaluate import SystemsFailed
    from irflow.flows.suite import suite_flow
    from irflow.tasks.ingest import import_dataset

    shared.use(monkeypatch)
    import_dataset(_write_dataset(tmp_path / "mini", 60), "jsonl", "mini")
    broken = "dense(index=ivf,nlist=5000):minilm"  # valid spec; fails when the index trains on too few vectors
    exp = Experiment(
        name="suite-test",
        datasets=["techdocs", "mini"],
        systems=["bm25", "bm25:k1=1.2,b=0.75", broken],
        metrics=["nDCG@10"],
    )
    state = suite_flow(experiment=exp, output=str(tmp_path / "suite"), return_state=True)
    assert state.is_failed()
    with pytest.raises(SystemsFailed, match="nlist"):
        state.result()
    suite = json.loads((tmp_path / "suite" / "suite.json").read_text())
    table = suite["tables"]["nDCG@10"]
    assert table["bm25"]["datasets"] == 2 and table["bm25:k1=1.2,b=0.75"]["datasets"] == 2
    assert table["bm25"]["mean"] == pytest.approx((table["bm25"]["techdocs"] + table["bm25"]["mini"]) / 2)
    assert len(suite["failed"]) == 2 and all("nlist" in e for e in suite["failed"].values())
    assert "| `bm25` |" in (tmp_path / "suite" / "suite.md").read_text()

    uri = os.environ["MLFLOW_TRACKING_URI"]
    systems = _runs(uri, "tags.`irflow.kind` = 'system'")
    status = {(r.data.tags["irflow.dataset"], r.data.tags["irflow.system"]): r.info.status for r in systems}
    assert status[("mini", "bm25")] == status[("techdocs", "bm25:k1=1.2,b=0.75")] == "FINISHED"
    assert sum(s == "FINISHED" for s in status.values()) == 4 and sum(s == "FAILED" for s in status.values()) == 2
    failed = next(r for r in systems if r.info.status == "FAILED")
    assert "nlist" in failed.data.tags["irflow.error"] and failed.data.params["index.type"] == "ivf"
    parent = _runs(uri, "tags.`irflow.kind` = 'suite'")
    assert len(parent) == 1 and parent[0].info.status == "FAILED"
    assert parent[0].data.metrics["mean.bm25.ndcg_at_10"] == pytest.approx(table["bm25"]["mean"])


@pytest.mark.e2e
@pytest.mark.parametrize(
    "kwargs, error, expected",
    [
        (dict(dataset="techdoc"), InputError, "--dataset: unknown dataset 'techdoc' \\(did you mean 'techdocs'\\?\\)"),
        (dict(systems=["bm26"]), InputError, "--system: .*\\(did you mean 'bm25'\\?\\)"),
        (dict(systems=["dense:nosuchmodel"]), InputError, "unknown model 'nosuchmodel'.*minilm"),
        (dict(metrics=["nDCG@x"]), Exception, "nDCG"),
    ],
)
def test_bad_input_fails_before_any_stage(
    kwargs: dict[str, Any], error: type[Exception], expected: str, tmp_path: Path, _isolated_cache: Path
) -> None:
    from irflow.flows.evaluate import evaluate_flow

    with pytest.raises(error, match=expected):
        evaluate_flow(**{"systems": ["bm25"], "output": str(tmp_path / "out"), **kwargs})
    assert not (tmp_path / "out").exists() and not any(_isolated_cache.iterdir())
    assert not _runs(os.environ["MLFLOW_TRACKING_URI"])


@pytest.mark.e2e
def test_an_unreachable_tracking_server_stops_the_flow_before_ingest(
    tmp_path: Path, _isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from irflow.cli.orchestration import configure_run
    from irflow.flows.evaluate import evaluate_flow
    from irflow.flows.suite import suite_flow

    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(TrackingError, match=f"{uri}.*unreachable"):
        evaluate_flow(systems=["bm25"], output=str(tmp_path / "out"))
    with pytest.raises(TrackingError, match=uri):
        suite_flow(experiment=Experiment(systems=["bm25"]), output=str(tmp_path / "suite"))
    with pytest.raises(TrackingError, match=uri):
        configure_run(
            argparse.Namespace(no_track=False, task_runner="default", scheduler=None, experiment="x", seed=0), []
        )
    assert not (tmp_path / "out").exists() and not any(_isolated_cache.iterdir())
    flow, extra = configure_run(
        argparse.Namespace(no_track=True, task_runner="dask", scheduler=None, experiment="x", seed=3), []
    )
    assert extra["seed"] == 3 and not extra["tracking"].enabled
    assert type(flow.task_runner).__name__ == "DaskTaskRunner"


@pytest.mark.e2e
def test_irflow_run_logs_an_evaluation_with_latency_to_mlflow(tmp_path: Path) -> None:
    """The command line, as a user runs it: BM25 only (the dense DAG is covered above)."""
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    done = irflow(
        *("run", "--system", "bm25", "--system", "bm25:k1=1.2,b=0.75", "--metric", "nDCG@10", "--metric", "R@100"),
        *("--latency-runs", "1", "--output", str(tmp_path / "out")),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    uri = os.environ["MLFLOW_TRACKING_URI"]
    (parent,) = _runs(uri, "tags.`irflow.kind` = 'evaluation'")
    children = _runs(uri, f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in children) == ["bm25", "bm25:k1=1.2,b=0.75"]
    for child in children:
        assert child.data.metrics["p95_ms"] >= child.data.metrics["p50_ms"] > 0
        assert child.data.metrics["queries_per_second"] > 0 and "ndcg_at_10" in child.data.metrics
        assert child.data.params["system.spec"] == child.info.run_name
    assert "report.md" in _artifacts(uri, parent.info.run_id)
    assert parent.data.tags["prefect.flow_name"] == "evaluate" and parent.data.tags["prefect.flow_run_id"]
    assert "prefect.flow_run_url" not in parent.data.tags  # the temporary Prefect server has no UI to link to
    named = json.loads((tmp_path / "out" / "metrics.json").read_text())["mlflow"]  # metrics.json names its run
    assert (named["run_id"], named["experiment_id"]) == (parent.info.run_id, parent.info.experiment_id)
    assert set(named["systems"]) == {"bm25", "bm25:k1=1.2,b=0.75"}


@pytest.mark.e2e
def test_irflow_nightly_compares_with_the_last_tracked_one_and_no_track_logs_nothing(tmp_path: Path) -> None:
    """``irflow suite`` and ``irflow nightly CONFIG`` as a user types them: an untracked suite opens no MLflow
    run; the second nightly compares with the first (the verdict is its Prefect flow run's final message); an
    untracked nightly compares its result folders with the last tracked nightly run (read, not written)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    config = tmp_path / "cli-nightly.yaml"
    config.write_text(
        "name: cli-nightly\ndatasets: [techdocs]\nsystems: [bm25]\nmetrics: [nDCG@10, R@100]\n"
        "latency_runs: 0\nmlflow_experiment: cli-nightly\n"
    )
    env, uri = dict(os.environ), os.environ["MLFLOW_TRACKING_URI"]
    suite = irflow("suite", str(config), "--no-track", "--json", "--output", str(tmp_path / "s"), env=env)
    assert suite.returncode == 0, suite.stderr[-3000:]
    assert json.loads(suite.stdout)["mlflow_run_id"] is None
    assert json.loads((tmp_path / "s" / "suite.json").read_text())["mlflow_run_id"] is None
    verdicts = []
    for attempt in range(2):
        done = irflow("nightly", str(config), "--output", str(tmp_path / f"out{attempt}"), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "suite.md" in done.stdout and (tmp_path / f"out{attempt}" / "suite.md").is_file()
        verdicts.append(done.stdout.strip().splitlines()[-1])
    assert "no earlier successful nightly run" in verdicts[0]
    assert "no regression — 2 comparison(s) with run" in verdicts[1]
    with get_client(sync_client=True) as client:  # the verdict is the final state's message
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["nightly"])))
    messages = {r.state.message for r in runs if r.state is not None}
    assert set(verdicts) <= messages, (verdicts, messages)
    first, second = sorted(_runs(uri, "tags.`irflow.kind` = 'nightly'", "cli-nightly"), key=lambda r: r.info.start_time)
    assert first.info.status == second.info.status == "FINISHED"
    assert second.data.tags["irflow.regression"] == "false" and second.data.metrics["regressions"] == 0
    assert second.data.tags["irflow.previous_run"] == first.info.run_id and "irflow.previous_run" not in first.data.tags

    quiet = irflow("nightly", str(config), "--no-track", "--output", str(tmp_path / "out2"), env=env)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "MLflow: not tracked" in quiet.stdout
    assert f"no regression — 2 comparison(s) with run {second.info.run_id}" in quiet.stdout.splitlines()[-1]
    assert len(pd.read_csv(tmp_path / "out2" / "changes.csv")) == 2
    kinds = sorted(r.data.tags["irflow.kind"] for r in _runs(uri, "", "cli-nightly"))
    assert kinds == ["evaluation", "evaluation", "nightly", "nightly", "system", "system"]  # the tracked two alone


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["output is a file", "dataset folder of other files", "read-only store"])
def test_irflow_suite_checks_its_output_and_store_before_any_stage(
    case: str, tmp_path: Path, _isolated_cache: Path
) -> None:
    config = tmp_path / "suite.yaml"
    config.write_text("name: checked\ndatasets: [techdocs]\nsystems: [bm25]\nmetrics: [nDCG@10]\n")
    output, env = tmp_path / "out", {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    if case == "output is a file":
        output.write_text("keep me")
        expected = "expected a folder for the results, found a file"
    elif case == "dataset folder of other files":
        (output / "techdocs").mkdir(parents=True)
        (output / "techdocs" / "notes.txt").write_text("keep me")
        expected = "--output (dataset techdocs)"
    else:
        read_only_database(tmp_path / "mlflow.db")
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
        expected = "attempt to write a readonly database"
    done = irflow("suite", str(config), "--output", str(output), env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert {p.name for p in _isolated_cache.iterdir()} <= {"logs"}  # nothing ingested (irflow.log may be written)
    assert not _runs(os.environ["MLFLOW_TRACKING_URI"], "", "checked")
    kept = output if output.is_file() else output / "techdocs" / "notes.txt"
    assert case == "read-only store" or kept.read_text() == "keep me"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_cli_pieces_parse_into_the_flow_options() -> None:
    from irflow.cli.compare import cmd_compare
    from irflow.cli.orchestration import add_orchestration_parsers, add_run_options, cmd_suite

    parser = argparse.ArgumentParser(prog="irflow")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_options(sub.add_parser("run"))
    add_orchestration_parsers(sub)
    args = parser.parse_args(
        [
            "run",
            "--task-runner",
            "dask",
            "--scheduler",
            "tcp://10.0.0.5:8786",
            "--experiment",
            "e",
            "--no-track",
            "--seed",
            "4",
        ]
    )
    assert (args.task_runner, args.scheduler, args.experiment, args.no_track, args.seed) == (
        "dask",
        "tcp://10.0.0.5:8786",
        "e",
        True,
        4,
    )
    assert parser.parse_args(["compare", "a", "b", "--metric", "nDCG@10"]).func is cmd_compare
    assert parser.parse_args(["compare", "--last", "5", "--kind", "nightly"]).last == 5
    nightly = parser.parse_args(["nightly", "deployments/nightly.yaml", "--task-runner", "dask"])
    assert nightly.func is cmd_suite and nightly.command == "nightly"
    validate_experiment(load_experiment(ROOT / "irflow" / "deployments" / "nightly.yaml"))
