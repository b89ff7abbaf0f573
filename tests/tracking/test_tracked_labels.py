"""MLflow names systems by their labels: a child run's name and its ``irflow.label`` tag are the label
(``run:bm25.trec``), the full spec one tag and one param away (``irflow.spec``, ``system.spec``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import irflow
from irflow.tasks.systems.specs import as_spec
from irflow.tasks.tracking.log import Tracker, log_evaluation


@pytest.mark.parametrize("given", [None, "labels"])
def test_child_runs_are_named_by_label_with_the_spec_a_tag_away(tmp_path: Path, given: str | None) -> None:
    first = irflow.evaluate("techdocs", ["bm25"], metrics=["nDCG@10"], output=tmp_path / "first")
    trec = next((tmp_path / "first" / "runs").glob("*.trec"))
    spec = str(as_spec(f"run:{trec}"))  # run(sha256=...):/tmp/.../runs/bm25.trec
    assert first.systems == {"bm25": "bm25"}
    evaluation = irflow.evaluate("techdocs", ["bm25", spec], metrics=["nDCG@10"], output=tmp_path / "second")
    label = f"run:{trec.name}"
    assert evaluation.systems == {"bm25": "bm25", label: spec}
    tracker = Tracker("labels", f"sqlite:///{tmp_path / 'mlflow.db'}")
    labels = {s: name for name, s in evaluation.systems.items()} if given else None  # the default labels, else
    logged = log_evaluation(tracker, tmp_path / "second", labels=labels)
    assert set(logged.systems) == {"bm25", label}
    run = tracker.client.get_run(logged.systems[label])
    assert run.info.run_name == label and run.data.tags["irflow.label"] == label
    assert run.data.tags["irflow.spec"] == spec == run.data.params["system.spec"]
    parent = tracker.client.get_run(logged.run_id)
    assert parent.data.tags["irflow.best_system"] in ("bm25", label)
