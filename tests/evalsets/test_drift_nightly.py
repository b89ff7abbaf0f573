"""The drift check a scheduled job runs (``tasks.evalsets.drift.DriftCheck``): settings validated like an experiment
section, a same-distribution log passes, an off-domain one is flagged with an alert line, a report section
and metrics to track (real MiniLM embeddings, seeded); and ``irflow nightly`` running it from the
experiment's ``drift:`` section beside the regression check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.cli import irflow

from irflow.tasks import ingest
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.evalsets.drift import DriftCheck
from irflow.tasks.experiment import load_experiment, validate_experiment

FOODS = ["lasagna", "risotto", "banana bread", "ramen", "paella", "chili", "pancakes", "curry"]
WAYS = ["how long to bake {}", "best wine with {}", "vegan {} recipe", "can I freeze {}", "{} for ten guests"]


def test_settings_are_checked_like_an_experiment_section() -> None:
    for settings, match in (
        ({"reference": "techdocs", "current": "x.csv", "alpha": 2}, "alpha: Input should be less than 1"),
        ({"reference": "techdocs"}, "current: Field required"),
        ({"reference": "techdocs", "current": "x.csv", "treshold": 1}, "treshold: Extra inputs are not permitted"),
    ):
        with pytest.raises(InputError, match=match):
            DriftCheck.of(**settings)


def _same_and_other() -> tuple[list[str], list[str]]:
    """40 techdocs queries (its own distribution) and 40 recipe questions (another domain)."""
    queries = ingest.load_dataset("techdocs").queries["text"].astype(str).tolist()
    picked = np.random.default_rng(2).permutation(len(queries))[:40]
    return [queries[i] for i in picked], [w.format(f) for f in FOODS for w in WAYS]


def test_an_experiment_drift_section_is_checked_before_any_stage(tmp_path: Path) -> None:
    """``drift: {DATASET: {current: LOG, ...}}``: the reference is the dataset, a relative log is read from
    the experiment file's folder, and each bad setting fails validation naming the field."""
    config, logs = tmp_path / "nightly.yaml", tmp_path / "logs"
    logs.mkdir()
    pd.DataFrame({"query": ["install the agent", "rotate the keys"]}).to_csv(logs / "today.csv", index=False)
    (logs / "bad.csv").write_text("question\nhello\n")
    head = "name: n\ndatasets: [techdocs]\nsystems: [bm25]\nmetrics: [nDCG@10]\n"
    config.write_text(head + "drift:\n  techdocs: {current: logs/today.csv, permutations: 50, fail: false}\n")
    check = validate_experiment(load_experiment(config)).drift["techdocs"]
    assert (check.reference, check.current, check.fail) == ("techdocs", str(logs / "today.csv"), False)

    for section, error, match in (
        (
            "{current: logs/today.csv, alpha: 2}",
            InputError,
            r"nightly\.yaml: .*drift\.techdocs\.alpha: Input should be",
        ),
        ("{log: logs/today.csv}", InputError, r"drift\.techdocs\.current: Field required"),
        ("{current: logs/today.csv, reference: beir/nq}", InputError, "reference is the dataset itself, got 'beir/nq'"),
        ("{current: missing.csv}", InputError, r"missing\.csv: drift\.techdocs\.current: query log not found"),
        ("{current: logs/bad.csv}", InputError, r"drift\.techdocs\.current: .*bad\.csv: the query log has no query"),
        ("{current: logs/today.csv, model: no-such-model}", UnknownNameError, r"drift\.techdocs\.model: "),
    ):
        config.write_text(head + f"drift: {{techdocs: {section}}}\n")
        with pytest.raises(error, match=match):
            validate_experiment(load_experiment(config))
    config.write_text(head + "drift: {recipes: {current: logs/today.csv}}\n")
    with pytest.raises(InputError, match=r"drift: \['recipes'\] not among the experiment's datasets \['techdocs'\]"):
        load_experiment(config)


@pytest.mark.e2e
def test_irflow_nightly_raises_drift_beside_the_regression_verdict(tmp_path: Path) -> None:
    """``irflow nightly`` twice with a ``drift:`` section: traffic like techdocs' own queries passes (the
    verdict says so), then recipe questions in the same log fail the run with the alert next to the
    regression verdict, in the printed error, the flow run's final state, nightly.md and MLflow."""
    same, other = _same_and_other()
    log, config = tmp_path / "today.csv", tmp_path / "nightly.yaml"
    config.write_text(
        "name: drift-nightly\ndatasets: [techdocs]\nsystems: [bm25]\nmetrics: [nDCG@10]\nlatency_runs: 0\n"
        "mlflow_experiment: drift-nightly\ndrift:\n  techdocs: {current: today.csv, permutations: 300}\n"
    )
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1"}

    pd.DataFrame({"query": same}).to_csv(log, index=False)
    passed = irflow("nightly", str(config), "--output", str(tmp_path / "n1"), env=env)
    assert passed.returncode == 0, passed.stderr[-3000:]
    verdict = passed.stdout.strip().splitlines()[-1]
    assert verdict.startswith("nightly 'drift-nightly': no earlier successful nightly run")
    assert f"; no query drift: {log} still matches evaluation set techdocs" in verdict and "drifted" not in verdict
    assert "## Query drift\n\nno drift (alpha 0.01): 40 queries" in (tmp_path / "n1" / "nightly.md").read_text()

    pd.DataFrame({"query": other}).to_csv(log, index=False)
    alerted = irflow("nightly", str(config), "--output", str(tmp_path / "n2"), env=env)
    assert alerted.returncode == 2, alerted.stderr[-3000:]
    error = alerted.stderr.strip().splitlines()[-1]
    assert error.startswith("irflow: error: nightly 'drift-nightly': no regression — 1 comparison(s) with run")
    assert f"; queries of {log} drifted from evaluation set techdocs: MMD² " in error and "p 0.00" in error
    report = (tmp_path / "n2" / "nightly.md").read_text()
    assert "## Query drift\n\n**drift** (alpha 0.01): 40 queries" in report and "Farthest current queries" in report
    assert "| meaning (MMD², permutation p) |" in report
    assert json.loads((tmp_path / "n2" / "drift.json").read_text())["techdocs"]["report"]["drift"] is True
    assert (tmp_path / "n2" / "drift-techdocs.png").read_bytes()[:4] == b"\x89PNG"

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:  # this test's two runs: their messages name its log file
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["nightly"])), sort=FlowRunSort.EXPECTED_START_TIME_ASC
        )
        runs = [r for r in runs if r.state is not None and str(log) in (r.state.message or "")]
        artifacts = {str(a.flow_run_id): str(a.data) for a in client.read_artifacts() if a.key == "nightly-comparison"}
    states = [(r.state.type.value, r.state.message) for r in runs if r.state is not None]
    assert [t for t, _ in states] == ["COMPLETED", "FAILED"] and states[0][1] == verdict
    assert "DriftError" in states[1][1] and "drifted from evaluation set techdocs" in states[1][1]
    assert "no drift (alpha" in artifacts[str(runs[0].id)] and "**drift** (alpha" in artifacts[str(runs[1].id)]

    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    first, second = mlflow.search_runs(
        experiment_names=["drift-nightly"], filter_string="tags.`irflow.kind` = 'nightly'",
        output_format="list", order_by=["attributes.start_time ASC"],
    )  # fmt: skip
    assert first.data.tags["irflow.drift"] == "false" and first.data.metrics["drift.techdocs.p_value"] > 0.05
    assert second.data.tags["irflow.drift"] == "true" and second.data.metrics["drift.techdocs.detected"] == 1
    assert second.data.metrics["drift.techdocs.p_value"] < 0.01 and second.data.metrics["drift_alerts"] == 1
    assert second.data.metrics["drift.techdocs.unseen_topic_p_value"] < 0.005  # both p-values are logged
    assert first.data.metrics["drift.techdocs.repeated_queries"] == 40  # its own queries: no meaning test
    assert "drifted from evaluation set techdocs" in second.data.tags["irflow.drift_message"]
    assert (
        second.data.tags["irflow.regression"] == "false"
        and second.data.tags["irflow.previous_run"] == first.info.run_id
    )
    assert second.info.status == "FINISHED"  # a drift alone leaves the run a baseline for the next
    artifacts_logged = {f.path for f in mlflow.MlflowClient().list_artifacts(second.info.run_id)}
    assert {"nightly.md", "drift.json", "drift-techdocs.png"} <= artifacts_logged
