"""``irflow run --human``: a lenient judge's means calibrated by human labels of 30 techdocs queries (the numbers,
report and MLflow metrics through the library call the command makes; the command's lines once)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.cli import irflow, printed_verdict
from support.judges import LABELS, techdocs_judge_and_human

from irflow import evaluate as evaluate_in_process
from irflow.tasks.compare.calibration import calibrated_mean
from irflow.tasks.core.runs import read_trec
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest import load_dataset
from irflow.tasks.metrics import evaluate
from irflow.tasks.report.calibration import calibration_text

METRICS = ["nDCG@10", "P@10"]


def test_run_with_human_labels_writes_calibrated_means(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judged, human = techdocs_judge_and_human(tmp_path)
    out, uri = tmp_path / "out", f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    document = evaluate_in_process(judged, ["bm25"], metrics=METRICS, output=out, human=human, track=True).to_dict()
    run = read_trec(out / "runs" / "bm25.trec")
    on_judge = evaluate(run, load_dataset(judged).qrels, METRICS)
    on_human = evaluate(run, load_dataset(human).qrels, METRICS)
    stored = json.loads((out / "metrics.json").read_text())
    assert stored["calibrated"] == document["calibrated"] and stored["calibration"]["human"] == "td-human"
    for metric in METRICS:
        y = on_human[on_human["metric"] == metric].set_index("query_id")["value"]
        yhat = on_judge[on_judge["metric"] == metric].set_index("query_id")["value"]
        expected = calibrated_mean(y, yhat[y.index], yhat.drop(y.index))
        block = stored["calibrated"]["bm25"][metric]
        assert block["estimate"] == pytest.approx(expected.estimate, abs=1e-9)
        assert block["ci"] == pytest.approx(list(expected.ci), abs=1e-9)
        assert block["judge_only"] == pytest.approx(document["systems"]["bm25"][metric])
        assert (block["n_human"], block["n_judge_only"]) == (30, len(yhat) - 30)
        assert block["lambda"] == pytest.approx(expected.lam)
        assert block["labels_needed"] is None or block["labels_needed"] >= 2
    precision = stored["calibrated"]["bm25"]["P@10"]
    assert precision["estimate"] < precision["judge_only"]  # the judge made 0s relevant; humans pull P@10 down
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Calibrated by human labels" in report and "`td-human` holds human judgements of 30" in report
    assert "calibrated by td-human (PPI++" in calibration_text(stored)
    # the verdict quotes the calibrated figures (humans' nDCG@10), the judge-only mean beside them
    ndcg = stored["calibrated"]["bm25"]["nDCG@10"]
    verdict = report.splitlines()[2]
    assert verdict.startswith("**Verdict.** Only bm25 was evaluated (nDCG@10 calibrated by human labels: ")
    assert (
        f"{ndcg['estimate']:.4f} [{ndcg['ci'][0]:.4f}, {ndcg['ci'][1]:.4f}] (judge only {ndcg['judge_only']:.4f})"
        in verdict
    )

    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("irflow")
    assert experiment is not None
    (child,) = client.search_runs([experiment.experiment_id], "tags.`irflow.system` = 'bm25'")
    assert child.data.metrics["calibrated.p_at_10"] == pytest.approx(precision["estimate"])
    assert child.data.metrics["calibrated.ndcg_at_10.high"] == pytest.approx(
        stored["calibrated"]["bm25"]["nDCG@10"]["ci"][1]
    )


def test_a_human_dataset_that_leaves_the_judge_no_query_fails_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--human techdocs: judges 80 of the 80 queries"):
        evaluate_in_process("techdocs", ["bm25"], metrics=METRICS, output=tmp_path / "out", human="techdocs")
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.e2e
def test_irflow_run_human_prints_the_calibrated_means(tmp_path: Path) -> None:
    judged, _ = techdocs_judge_and_human(tmp_path)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1"}
    out, human = tmp_path / "out", str(LABELS / "human.qrels")  # the file form (the dataset form: above)
    args = ["run", "--dataset", judged, "--human", human, "--system", "bm25", "--metric", "P@10"]
    done = irflow(*args, "--latency-runs", "0", "--no-track", "--output", str(out), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    block = json.loads((out / "metrics.json").read_text())["calibrated"]["bm25"]["P@10"]
    line = f"bm25 P@10: judge only {block['judge_only']:.4f}, calibrated {block['estimate']:.4f} "
    assert f"calibrated by {human} (PPI++" in done.stdout and line in done.stdout
    assert f"P@10 calibrated by human labels: {block['estimate']:.4f}" in printed_verdict(done.stdout)
    bad = ["run", "--dataset", judged, "--human", "no-such-set", "--system", "bm25", "--no-track"]
    done = irflow(*bad, "--output", str(tmp_path / "never"), env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "--human: unknown dataset 'no-such-set'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "never" / "metrics.json").exists()
