"""The run list's saved view ``irflow headline``: written as MLflow's UI writes saved views (an experiment
tag holding name, times and the list's settings), extended per headline metric, a user's edits kept."""

from __future__ import annotations

import base64
import json
import urllib.request
import zlib
from pathlib import Path

import pytest

from irflow.tasks.tracking.store import EXPERIMENT_KIND_TAG, Tracker
from irflow.tasks.tracking.view import LEADING, VIEW_NAME, VIEW_TAG, read_view, save_headline_view, view_url

HEADLINE = ["attributes.`Dataset`", "metrics.`best.ndcg_at_10`", "metrics.`ndcg_at_10`", "tags.`irflow.best_system`"]


def _tag(tracker: Tracker) -> str:
    return str(tracker.client.get_experiment(tracker.experiment_id).tags[VIEW_TAG])


def test_the_view_shows_the_headline_and_is_extended_not_rewritten(tmp_path: Path) -> None:
    tracker = Tracker("views", uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    save_headline_view(tracker, "ndcg_at_10")
    envelope = json.loads(_tag(tracker))
    assert envelope["name"] == VIEW_NAME and envelope["createdAt"] == envelope["updatedAt"] > 0
    settings, created = read_view(_tag(tracker))
    assert settings["selectedColumns"] == HEADLINE and created == envelope["createdAt"]
    order = settings["columnOrder"]  # the list's own leading columns, then the metrics group, then tags
    assert order[:4] == LEADING and order[4:] == [HEADLINE[1], HEADLINE[2], HEADLINE[3]]
    assert set(HEADLINE) <= set(settings["columnWidths"])

    before = _tag(tracker)
    save_headline_view(tracker, "ndcg_at_10")
    assert _tag(tracker) == before  # nothing new to show: not rewritten

    settings = save_headline_view(tracker, "r_at_100")
    assert settings["selectedColumns"] == [*HEADLINE, "metrics.`best.r_at_100`", "metrics.`r_at_100`"]
    assert settings["columnOrder"][-1] == "tags.`irflow.best_system`"  # the new metrics join their group
    assert read_view(_tag(tracker))[1] == envelope["createdAt"]


def test_a_view_the_user_saved_from_the_ui_keeps_their_settings(tmp_path: Path) -> None:
    """The UI stores a view's settings deflated (``deflate;`` + base64 of zlib data): they are read, kept and
    extended; a tag that is not a view at all is replaced."""
    tracker = Tracker("views", uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    mine = {"selectedColumns": ["params.`depth`"], "columnWidths": {"attributes.`Dataset`": 400}, "orderByKey": "x"}
    packed = "deflate;" + base64.b64encode(zlib.compress(json.dumps(mine).encode())).decode()
    value = json.dumps({"name": "mine", "createdAt": 5, "updatedAt": 6, "state": packed})
    tracker.client.set_experiment_tag(tracker.experiment_id, VIEW_TAG, value)
    settings = save_headline_view(tracker, "ndcg_at_10")
    assert settings["selectedColumns"] == ["params.`depth`", *HEADLINE] and settings["orderByKey"] == "x"
    assert settings["columnWidths"]["attributes.`Dataset`"] == 400
    assert settings["columnOrder"].index("params.`depth`") < settings["columnOrder"].index(HEADLINE[3])
    assert read_view(_tag(tracker)) == (settings, 5)

    tracker.client.set_experiment_tag(tracker.experiment_id, VIEW_TAG, "not a view")
    assert read_view("not a view") == ({}, None)
    assert save_headline_view(tracker, "ndcg_at_10")["selectedColumns"] == HEADLINE


def test_the_view_link_needs_a_server_and_carries_no_credentials(tmp_path: Path) -> None:
    assert view_url(Tracker("views", uri=f"sqlite:///{tmp_path / 'mlflow.db'}")) is None
    server = Tracker("views", uri="https://ann:secret@mlflow.example:8443/")
    server._experiment_id = "7"  # known: no request to a server that does not exist
    assert view_url(server) == (
        "https://mlflow.example:8443/#/experiments/7/runs?viewStateShareKey=irflow-headline&workflowType=machine_learning"
    )


@pytest.mark.e2e
def test_irflow_experiments_carry_the_model_training_kind_as_the_ui_reads_it(mlflow_server_url: str) -> None:
    """The experiment kind tag (what MLflow's UI reads when its workflow switch is off; the links irflow
    prints carry the workflow, see test_report_html), read through the REST API the UI calls: set on a new
    experiment and on an existing one without it; a kind someone chose is kept."""
    import mlflow

    url = mlflow_server_url  # the session's server: this test's experiments are named for it

    def tags(url: str, experiment_id: str) -> dict[str, str]:
        with urllib.request.urlopen(f"{url}/ajax-api/2.0/mlflow/experiments/get?experiment_id={experiment_id}") as r:
            return {t["key"]: t["value"] for t in json.loads(r.read())["experiment"].get("tags", [])}

    new = Tracker("kind-new", uri=url).experiment_id
    assert tags(url, new)[EXPERIMENT_KIND_TAG] == "custom_model_development"
    client = mlflow.MlflowClient(url)
    old = client.create_experiment("kind-made-elsewhere")
    chosen = client.create_experiment("kind-genai", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    assert EXPERIMENT_KIND_TAG not in tags(url, old)
    assert Tracker("kind-made-elsewhere", uri=url).experiment_id == old
    assert tags(url, old)[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert Tracker("kind-genai", uri=url).experiment_id == chosen
    assert tags(url, chosen)[EXPERIMENT_KIND_TAG] == "genai_development"
