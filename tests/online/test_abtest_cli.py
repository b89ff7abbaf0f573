"""``irflow abtest LOG --unit user_id`` end to end: the Prefect flow (the session's server), the MLflow run
(the test's SQLite store), the result folder; and a bad log exits 2 naming the file, row and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.abtest import simulate_log
from support.cli import irflow, printed_verdict

from irflow.tasks.online.abtest import analyse
from irflow.tasks.online.abtest_log import read_ab_log
from irflow.tasks.online.abtest_report import abtest_verdict

pytestmark = pytest.mark.e2e


def test_abtest_command_end_to_end(tmp_path: Path) -> None:
    log = tmp_path / "experiment.csv"
    simulate_log(7, users=1500, effect=0.05, arms=("old", "new")).to_csv(log, index=False)
    out = tmp_path / "result"
    done = irflow(
        "abtest",
        str(log),
        "--unit",
        "user_id",
        "--control",
        "old",
        "--sequential",
        "--output",
        str(out),
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sample ratio ok" in done.stdout and "ctr" in done.stdout

    document = json.loads((out / "metrics.json").read_text())
    verdict = abtest_verdict(document)  # ABTest.verdict's sentence: report.md's first, the terminal's last
    assert printed_verdict(done.stdout) == verdict and verdict.startswith("new (treatment) wins on ctr")
    assert (out / "report.md").read_text().splitlines()[2] == "**Verdict.** " + verdict
    ab = document["abtest"]
    assert (ab["control"], ab["treatment"]) == ("old", "new")
    assert set(ab["srm"]) >= {"p_value", "mismatch"} and ab["srm"]["mismatch"] is False
    expected = analyse(read_ab_log(log), control="old")["metrics"]
    assert set(ab["metrics"]) >= {"ctr", "success_rate", "abandonment", "mrr"}
    for name, values in ab["metrics"].items():
        assert set(values) >= {"control", "treatment", "difference", "ci", "p_value"}
        assert values["difference"] == pytest.approx(values["treatment"] - values["control"])
        assert values["ci"][0] < values["difference"] < values["ci"][1]
        assert {k: pytest.approx(v) for k, v in values.items()} == expected[name]
    assert ab["metrics"]["ctr"]["difference"] > 0 and ab["metrics"]["ctr"]["p_value"] < 0.05  # the effect is found
    assert len(document["sequential"]["days"]) == 7
    assert (out / "report.md").read_text().startswith("# A/B test: experiment.csv")
    assert (out / "report.html").stat().st_size > 1000

    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    run = client.get_run(document["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.params["control"] == "old"
    assert run.data.metrics["ctr.difference"] == pytest.approx(ab["metrics"]["ctr"]["difference"])
    assert run.data.metrics["srm.mismatch"] == 0.0
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"metrics.json", "report.md", "report.html"}
    with get_client(sync_client=True) as prefect:
        flow_run = prefect.read_flow_run(run.data.tags["prefect.flow_run_id"])
    assert flow_run.state is not None and flow_run.state.is_completed()
    assert f"mlflow-run:{run.info.run_id}" in flow_run.tags
    assert flow_run.name.startswith(f"abtest_{log.stem}_"), flow_run.name  # readable, not two random words


def test_a_bad_log_exits_2_naming_the_file_row_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from irflow.cli.main import main  # in this process: the flow's imports are paid once

    bad = tmp_path / "bad.csv"
    bad.write_text("user_id,arm,query,clicked\nu1,A,q,1\nu2,B,q,maybe\n")
    assert main(["abtest", str(bad), "--output", str(tmp_path / "result"), "--no-track"]) == 2
    assert f"irflow: error: {bad}: row 2: field 'clicked' is 'maybe'" in capsys.readouterr().err
    assert not (tmp_path / "result").exists()


def test_the_default_folder_has_its_own_latest(tmp_path: Path) -> None:
    log = tmp_path / "exp.csv"
    simulate_log(3, users=200, effect=0.0, arms=("control", "new")).to_csv(log, index=False)
    done = irflow("abtest", str(log), "--no-track", env={**os.environ}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    latest = tmp_path / "results" / "abtest" / "latest"  # not results/<dataset>/latest: that is an evaluation's
    assert latest.resolve() == (tmp_path / "results" / "abtest" / "exp").resolve()
    assert json.loads((latest / "metrics.json").read_text())["abtest"]["control"] == "control"
