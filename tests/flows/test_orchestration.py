"""Deployments against real services: ``prefect server start`` and ``mlflow server`` on free loopback ports.

One test starts both servers and ``python -m irflow.deployments.serve`` as subprocesses (homes and stores
in a temporary folder), triggers an ad-hoc run with parameters through the API, waits for it,
finds its MLflow run, and checks that the scheduler created runs for the nightly deployment (the
check that catches the SQLAlchemy pin problem). Every process is stopped by its own id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.folders import hostile_folder
from support.prefect_home import seeded_home
from support.services import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_deployments_nightly_schedule_and_adhoc_parameters() -> None:
    from irflow.deployments.serve import build_deployments

    nightly, evaluate, suite = build_deployments("30 3 * * *", "Europe/Berlin", "deployments/nightly.yaml")
    assert (nightly.name, evaluate.name, suite.name) == ("nightly", "adhoc", "adhoc")
    schedule = nightly.schedules[0].schedule
    assert (schedule.cron, schedule.timezone) == ("30 3 * * *", "Europe/Berlin")
    assert nightly.parameters == {"config": "deployments/nightly.yaml"}
    assert (
        nightly.entrypoint == "irflow.flows.suite.nightly_flow"
        and evaluate.entrypoint == "irflow.flows.adhoc.adhoc_evaluate"
    )
    form = evaluate._parameter_openapi_schema.properties  # what the UI renders as a form
    assert {"dataset", "systems", "metrics", "depth", "latency_runs", "baseline", "seed", "experiment"} <= set(form)
    assert not {"tracking", "strict", "overwrite", "output"} & set(form)  # internal: suites and the CLI pass them
    assert "experiment" in suite._parameter_openapi_schema.properties
    with pytest.raises(Exception, match="Mars"):
        build_deployments(timezone="Mars/Olympus")


def _wait(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(every)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


class Processes:
    """Subprocesses started by this test, each in its own session; stopped by their own ids."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes], int]] = []

    def start(
        self, name: str, args: list[str], env: dict[str, str], stop_signal: int = signal.SIGTERM, cwd: Path = ROOT
    ) -> None:
        log = open(self.logs / f"{name}.log", "wb")
        process = subprocess.Popen(args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started.append((name, process, stop_signal))

    def tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop_all(self) -> None:
        for _name, process, stop_signal in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, stop_signal)  # the group of the session this test created for it
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def test_served_deployments_run_adhoc_with_parameters_and_schedule_nightly(
    tmp_path: Path, processes: Processes, temporary_prefect_server: None
) -> None:
    from mlflow.tracking import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.settings import PREFECT_API_URL, temporary_settings

    prefect_port, mlflow_port = free_port(), free_port()
    api, tracking = f"http://127.0.0.1:{prefect_port}/api", f"http://127.0.0.1:{mlflow_port}"
    env = {
        **os.environ,
        "PREFECT_HOME": str(seeded_home(tmp_path / "prefect-home")),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",
        "HF_HUB_OFFLINE": "1",
    }
    processes.start(
        "prefect", [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)], env
    )
    processes.start(
        "mlflow",
        [
            str(BIN / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(mlflow_port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--artifacts-destination",
            str(tmp_path / "mlflow-artifacts"),
            "--workers",
            "1",
        ],
        env,
    )
    _wait("prefect server", lambda: _get(f"{api}/health") == "true", 180)
    _wait("mlflow server", lambda: _get(f"{tracking}/health") == "OK", 180)

    serve_env = {**env, "PREFECT_API_URL": api, "MLFLOW_TRACKING_URI": tracking}
    # serve (and the flow runs it executes) from a user's folder whose tasks.py, flows/ and datasets/
    # would shadow generic module names: deployments import only the irflow package
    processes.start(
        "serve",
        [sys.executable, "-m", "irflow.deployments.serve", "--timezone", "Europe/Berlin"],
        serve_env,
        stop_signal=signal.SIGINT,
        cwd=hostile_folder(tmp_path / "project"),
    )

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:

        def deployment(name: str) -> Any:
            if processes.started[-1][1].poll() is not None:
                raise AssertionError(f"serve exited:\n{processes.tail('serve')}")
            return client.read_deployment_by_name(name)

        adhoc = _wait("evaluate/adhoc deployment", lambda: deployment("evaluate/adhoc"), 120)
        nightly = _wait("nightly/nightly deployment", lambda: deployment("nightly/nightly"), 30)
        assert nightly.schedules[0].schedule.timezone == "Europe/Berlin" and nightly.schedules[0].active

        parameters = {
            "systems": ["bm25", "bm25:k1=1.2,b=0.75"],
            "metrics": ["nDCG@10", "R@100"],
            "latency_runs": 0,
            "experiment": "adhoc-test",
        }
        run = client.create_flow_run_from_deployment(adhoc.id, parameters=parameters)
        final = _wait("ad-hoc flow run", lambda: (r := client.read_flow_run(run.id)).state.is_final() and r, 300, 2)
        assert final.state.type == StateType.COMPLETED, f"{final.state}\n{processes.tail('serve')}"
        assert final.parameters["systems"] == parameters["systems"]

        scheduled = _wait(
            "scheduled nightly runs",
            lambda: client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[nightly.id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
                ),
            ),
            90,
            2,
        )
        assert all(r.expected_start_time.timestamp() > time.time() for r in scheduled)
        tags = client.read_flow_run(run.id).tags
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
    (summary,) = [a for a in artifacts if a.key == "evaluation-summary"]  # the run's summary table in the UI
    assert "| `bm25` |" in str(summary.data) and "| system | nDCG@10 | R@100 |" in str(summary.data)

    mlflow = MlflowClient(tracking)
    experiment = mlflow.get_experiment_by_name("adhoc-test")
    found = mlflow.search_runs([experiment.experiment_id], f"tags.`prefect.flow_run_id` = '{run.id}'")
    evaluation = [r for r in found if r.data.tags["irflow.kind"] == "evaluation"]
    assert len(evaluation) == 1 and len(found) == 3  # the evaluation and a run per system
    assert f"mlflow-run:{evaluation[0].info.run_id}" in tags
    assert evaluation[0].data.tags["prefect.flow_run_url"].endswith(f"/flow-runs/flow-run/{run.id}")
    assert {"per_query.parquet", "report.md"} <= {f.path for f in mlflow.list_artifacts(evaluation[0].info.run_id)}
    # the form has no output: the run's own folder under serve's working folder, named like the flow run
    document = json.loads((tmp_path / "project" / "results" / "techdocs" / "latest" / "metrics.json").read_text())
    assert document["run"]["name"] == final.name == evaluation[0].info.run_name
    assert document["run"]["prefect_flow_run_url"].endswith(f"/flow-runs/flow-run/{run.id}")
    assert document["mlflow"]["url"].startswith(tracking) and document["mlflow"]["url"].endswith(
        f"{evaluation[0].info.run_id}?workflowType=machine_learning"
    )
