"""The Prefect UI's ad-hoc form and what a flow run shows: user parameters only, described, datasets as
a choice; a readable run name and a summary artifact on a real (temporary) Prefect server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

USER_PARAMETERS = {
    "dataset",
    "systems",
    "metrics",
    "split",
    "baseline",
    "depth",
    "latency_runs",
    "seed",
    "experiment",
    "run_name",
}


def test_the_adhoc_form_shows_described_user_parameters_and_a_dataset_choice() -> None:
    from irflow.deployments.serve import build_deployments

    deployments = {d.flow_name: d for d in build_deployments()}
    properties = deployments["evaluate"]._parameter_openapi_schema.model_dump()["properties"]  # what is registered
    assert set(properties) == USER_PARAMETERS  # no tracking/parent_run_id/labels, strict, overwrite, output
    assert all(p.get("description") for p in properties.values()), properties
    choices = properties["dataset"]["enum"]
    assert choices[0] == "techdocs" and "beir/scifact" in choices
    assert properties["depth"]["maximum"] == 1000 and properties["latency_runs"]["minimum"] == 0


def test_an_adhoc_run_is_named_like_its_folder_and_leaves_a_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from irflow.flows import prefect_api
    from irflow.flows.adhoc import build_adhoc_flow

    monkeypatch.chdir(tmp_path)
    flow = build_adhoc_flow(["techdocs"])
    with prefect_api.prefect_api():
        prefect_api.ready()
        state = flow(
            dataset="techdocs", systems=["bm25"], metrics=["nDCG@10", "R@100"], latency_runs=0, return_state=True
        )
        assert state.is_completed(), state
        (folder,) = [p for p in (tmp_path / "results" / "techdocs").iterdir() if p.name != "latest"]
        document = json.loads((folder / "metrics.json").read_text())
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(state.state_details.flow_run_id)
            artifacts = client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            )
    assert run.name == folder.name == document["run"]["name"] and folder.name.startswith("techdocs_bm25_")
    assert document["run"]["prefect_flow_run_id"] == str(run.id) and document["mlflow"]["run_id"]
    (summary,) = [a for a in artifacts if a.key == "evaluation-summary"]
    assert "| `bm25` |" in str(summary.data) and "nDCG@10" in str(summary.data)
    assert "mlflow-run" in {a.key for a in artifacts}
