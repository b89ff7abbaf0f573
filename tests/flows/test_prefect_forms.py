"""The Prefect UI's ad-hoc form: user parameters only, described, datasets as a choice. A served
ad-hoc run (its name, folder and summary artifact) is tested in test_orchestration.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

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
    "human",
}


def test_the_adhoc_form_shows_described_user_parameters_and_a_dataset_choice() -> None:
    from irflow.deployments.serve import build_deployments

    deployments = {d.flow_name: d for d in build_deployments()}
    properties = deployments["evaluate"]._parameter_openapi_schema.model_dump()["properties"]  # what is registered
    assert set(properties) == USER_PARAMETERS  # no tracking/parent_run_id/labels, strict, overwrite, output
    assert all(p.get("description") for p in properties.values()), properties
    choices = properties["dataset"]["enum"]
    assert choices[0] == "techdocs" and "beir/scifact" in choices
    depth = properties["depth"]
    assert depth["anyOf"][0]["maximum"] == 1000 and depth["default"] is None  # none: run files are read whole
    assert properties["latency_runs"]["minimum"] == 0
