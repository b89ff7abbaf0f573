"""Run identity: readable run names, one result folder per run, a ``latest`` link, no silent overwrite."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from support.cli import irflow

from irflow.tasks.core import run_identity
from irflow.tasks.core.schema import InputError

WHEN = dt.datetime(2026, 11, 24, 7, 8, 12, tzinfo=dt.UTC)


def test_run_names_say_dataset_time_and_systems() -> None:
    specs = ["bm25", "dense:sentence-transformers/all-MiniLM-L6-v2", "hybrid:bm25+dense:minilm"]
    name = run_identity.run_name("techdocs", specs, WHEN)
    assert name == "techdocs_20261124-070812_bm25_all-MiniLM-L6-v2_hybrid-bm25+minilm"
    many = run_identity.run_name("beir/scifact", [f"dense:m{i}" for i in range(6)], WHEN)
    assert many == "beir_scifact_20261124-070812_m0_m1_m2_+3"


def test_the_command_line_and_the_prefect_form_name_a_run_alike() -> None:
    from irflow.flows.evaluate import evaluation_name
    from irflow.tasks.systems.specs import as_spec

    typed = ["bm25", "dense:minilm", "hybrid:bm25+dense:minilm"]  # as a person fills in the form
    canonical = [str(as_spec(s)) for s in typed]  # as the command line passes them
    names = [evaluation_name("techdocs", systems) for systems in (typed, canonical)]
    start = len("techdocs_20261124-070812")  # the time may differ by a second
    assert names[0][start:] == names[1][start:] == "_bm25_all-MiniLM-L6-v2_hybrid-bm25+all-MiniLM-L6-v2"
    assert all(c.isalnum() or c in "_-+.=," for c in run_identity.run_name("x", ["http:https://h/x?q=1 y"], WHEN))


def test_default_folders_are_claimed_once_and_latest_follows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = run_identity.claim_default_output("beir/scifact", "run")
    second = run_identity.claim_default_output("beir/scifact", "run")  # same second: a new folder, never shared
    assert (first.name, second.name) == ("run", "run-2") and first.parent == Path("results/beir_scifact")
    assert run_identity.is_default_output("beir/scifact", second) and not run_identity.is_default_output("x", second)
    (first / "metrics.json").write_text("{}")
    link = run_identity.point_latest(first)
    assert (link / "metrics.json").is_file() and os.readlink(link) == "run"  # relative: the tree can move
    run_identity.point_latest(second)
    assert os.readlink(link) == "run-2" and sorted(p.name for p in first.parent.iterdir()) == ["latest", "run", "run-2"]


def test_each_kind_of_result_has_its_own_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    evaluation = run_identity.claim_default_output("techdocs", "run")
    rag = run_identity.claim_default_output("techdocs", "rag-run", "rag")
    interleave = run_identity.claim_default_output("techdocs", "il", "interleave")
    logs = run_identity.claim_default_output(None, "il", "interleave")
    assert [evaluation.parent, rag.parent, interleave.parent, logs.parent] == [
        Path("results/techdocs"),
        Path("results/techdocs/rag"),
        Path("results/techdocs/interleave"),
        Path("results/interleave"),
    ]
    assert run_identity.default_root(None, "abtest") == Path("results/abtest")
    assert run_identity.is_default_output("techdocs", rag, "rag")
    assert not run_identity.is_default_output("techdocs", rag)
    for folder in (evaluation, rag, interleave, logs):
        run_identity.point_latest(folder)
    # a RAG run after an evaluation leaves results/<dataset>/latest on the evaluation
    assert Path("results/techdocs/latest").resolve() == evaluation.resolve()
    assert Path("results/techdocs/rag/latest").resolve() == rag.resolve()
    assert Path("results/techdocs/interleave/latest").resolve() == interleave.resolve()
    assert Path("results/interleave/latest").resolve() == logs.resolve()
    with pytest.raises(ValueError, match="kind 'nope'"):
        run_identity.default_root("techdocs", "nope")


def test_an_explicit_output_with_another_runs_results_needs_overwrite(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(InputError, match=r"another run's results.*--overwrite"):
        run_identity.check_explicit_output(tmp_path, overwrite=False)
    assert run_identity.check_explicit_output(tmp_path, overwrite=True) == tmp_path
    assert run_identity.check_explicit_output(tmp_path / "new", overwrite=False) == tmp_path / "new"


BM25_VARIANTS = ("--system", "bm25", "--system", "bm25:k1=1.2,b=0.75", "--system", "bm25:k1=2.0,b=0.3")


def _irflow(cwd: Path, *args: str, systems: tuple[str, ...] = ("--system", "bm25")) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(cwd / "cache"),
        "PREFECT_HOME": str(cwd / "prefect"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
    }
    return irflow("run", *systems, "--latency-runs", "0", *args, env=env, cwd=cwd)


@pytest.mark.e2e
def test_two_runs_keep_both_folders_and_name_their_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two default runs of the demo dataset keep two folders; metrics.json and the last line name the
    MLflow run and the Prefect flow run; irflow compare takes folders and run names, says its family
    and agrees with report.md's per-metric family; an explicit --output of another run is refused,
    and with --overwrite replaced whole, so none of the old run's files reach the new MLflow run."""
    import mlflow
    import pandas as pd

    from irflow.cli.main import main

    done = [_irflow(tmp_path), _irflow(tmp_path, systems=BM25_VARIANTS)]
    assert [d.returncode for d in done] == [0, 0], done[0].stderr[-3000:] + done[1].stderr[-3000:]
    root = tmp_path / "results" / "techdocs"
    folders = sorted(p for p in root.iterdir() if p.name != "latest")
    assert len(folders) == 2 and all(re.fullmatch(r"techdocs_\d{8}-\d{6}_bm25(_.+)?", p.name) for p in folders)
    assert (root / "latest").resolve() == folders[-1].resolve()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for folder, run in zip(folders, done):
        document = json.loads((folder / "metrics.json").read_text())
        assert document["run"]["name"] == folder.name
        mlflow_run = mlflow.get_run(document["mlflow"]["run_id"])
        assert mlflow_run.info.run_name == folder.name
        assert mlflow_run.data.tags["prefect.flow_run_name"] == folder.name
        assert mlflow_run.data.tags["prefect.flow_run_id"] == document["run"]["prefect_flow_run_id"]
        last = run.stdout.strip().splitlines()[-3:]  # the MLflow run, the run list (none here), Prefect's
        mlflow_line = next(line for line in last if line.startswith("MLflow: "))
        prefect_line = next(line for line in last if line.startswith("Prefect: "))
        assert document["mlflow"]["run_id"] in mlflow_line and document["run"]["prefect_flow_run_id"] in prefect_line
        assert f"results: {folder}/" in run.stdout or f"results: {folder.relative_to(tmp_path)}/" in run.stdout

    # The run list as the MLflow UI reads it (search_runs): each run's name, dataset, headline metric.
    client = mlflow.MlflowClient()
    documents = [json.loads((f / "metrics.json").read_text()) for f in folders]
    listed = client.search_runs([documents[0]["mlflow"]["experiment_id"]], order_by=["attributes.start_time ASC"])
    evaluations = [r for r in listed if r.data.tags["irflow.kind"] == "evaluation"]
    systems = [r for r in listed if r.data.tags["irflow.kind"] == "system"]
    assert [r.info.run_name for r in evaluations] == [f.name for f in folders] and len(systems) == 4
    fingerprint = documents[0]["dataset"]["fingerprint"]
    for run in listed:
        (used,) = run.inputs.dataset_inputs
        assert (used.dataset.name, used.dataset.digest) == ("techdocs (test)", fingerprint[:36])
        assert "ndcg_at_10" in run.data.metrics or "best.ndcg_at_10" in run.data.metrics
    for run, document, folder in zip(evaluations, documents, folders):
        best = max(v["nDCG@10"] for v in document["systems"].values())
        assert run.data.metrics["best.ndcg_at_10"] == pytest.approx(best)
        # opened when the flow began, not at the track stage: before the result files were written
        assert run.info.start_time / 1000 <= (folder / "per_query.parquet").stat().st_mtime
    # report.md as MLflow's artifact viewer gets it: each image link is an artifact URL of this run
    logged = Path(client.download_artifacts(evaluations[0].info.run_id, "report.md", str(tmp_path)))
    links = re.findall(r"!\[[^\]]*\]\(get-artifact\?path=([^&)]+)&run_uuid=(\w+)\)", logged.read_text())
    assert links and "](plots/" not in logged.read_text() and "](plots/" in (folders[0] / "report.md").read_text()
    plots = {a.path for a in client.list_artifacts(evaluations[0].info.run_id, "plots")}
    assert {(unquote(path), run) for path, run in links} <= {(p, evaluations[0].info.run_id) for p in plots}

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tables = []
    for refs in ([str(f) for f in folders], [f.name for f in folders]):  # result folders, then run names
        assert main(["compare", *refs, "--permutations", "1000"]) == 0
        out = capsys.readouterr().out
        assert "holm-corrected over all 9 comparison(s) in this table (every system × metric)" in out
        tables.append(out.split("\n", 2)[2])
    assert tables[0] == tables[1]
    assert main(["compare", str(folders[1]), "--metric", "nDCG@10", "--metric", "R@100"]) == 0
    out = capsys.readouterr().out
    assert "holm-corrected per metric (family: the 2 comparison(s) of each metric)" in out and "report.md" in out
    report = pd.read_csv(folders[1] / "significance.csv").set_index(["candidate", "metric"])
    rows = [line.split() for line in out.splitlines() if line.startswith("techdocs ")]
    assert len(rows) == 4
    for row in rows:  # dataset system metric before after delta [ci, ci] p p_adj ...
        assert float(row[9]) == pytest.approx(report.loc[(row[1], row[2]), "p_adjusted"], abs=6e-5)

    old = folders[0]
    refused = _irflow(tmp_path, "--output", str(old))
    assert refused.returncode == 2 and "--overwrite" in refused.stderr
    (old / "runs" / "stale_system.trec").write_text("q1 Q0 d1 1 1.0 stale\n")
    replaced = _irflow(tmp_path, "--output", str(old), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert sorted(p.name for p in (old / "runs").iterdir()) == ["bm25.trec"]
    document = json.loads((old / "metrics.json").read_text())
    artifacts = mlflow.MlflowClient().list_artifacts(document["mlflow"]["run_id"], "runs")
    assert [Path(a.path).name for a in artifacts] == ["bm25.trec"]


def test_annotate_flow_runs_get_a_readable_name() -> None:
    from irflow.flows.annotate import annotation_name
    from irflow.tasks.annotate.config import AnnotateConfig

    config = AnnotateConfig(dataset="techdocs", judges=("openai(name=sim):gpt-4o-mini", "system:bm25"))
    name = annotation_name(config, WHEN)
    assert name == "annotate_techdocs_20261124-070812_openai-name=sim-gpt-4o-mini_system-bm25"
    assert annotation_name({"dataset": "techdocs", "judges": list(config.judges)}, WHEN) == name  # a deployment's form
