"""The drift check a scheduled job runs (``tasks.drift.DriftCheck``): settings validated like an experiment
section, a same-distribution log passes, an off-domain one is flagged with an alert line, a report section
and metrics to track (real MiniLM embeddings, seeded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irflow.tasks import ingest
from irflow.tasks.drift import DriftCheck
from irflow.tasks.schema import InputError

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


def test_a_scheduled_check_passes_the_same_traffic_and_flags_another_domain(tmp_path: Path) -> None:
    queries = ingest.load_dataset("techdocs").queries["text"].astype(str).tolist()
    same, other = tmp_path / "same.csv", tmp_path / "other.jsonl"
    picked = np.random.default_rng(2).permutation(len(queries))[:40]
    pd.DataFrame({"query": [queries[i] for i in picked]}).to_csv(same, index=False)
    pd.DataFrame({"query": [w.format(f) for f in FOODS for w in WAYS]}).to_json(other, orient="records", lines=True)

    passed, _, _ = DriftCheck(reference="techdocs", current=str(same), permutations=300).run()
    assert not passed.drift and passed.p_value > 0.05, passed.text()
    report, ref_vectors, cur_vectors = DriftCheck(reference="techdocs", current=str(other), permutations=300).run()
    assert report.drift and report.p_value < 0.01, report.text()
    assert ref_vectors.shape == (len(queries), 384) and cur_vectors.shape == (40, 384)

    alert = report.alert("techdocs", "other.jsonl")
    assert alert.startswith("queries of other.jsonl drifted from evaluation set techdocs") and "p 0.00" in alert
    section = report.markdown("techdocs", "other.jsonl")
    assert section.startswith("## Query drift\n\n**drift** (alpha 0.01): 40 queries of `other.jsonl`")
    assert "| meaning (MMD², permutation p) |" in section and "Farthest current queries" in section
    metrics = report.metrics()
    assert metrics["drift.detected"] == 1.0 and metrics["drift.p_value"] == report.p_value
    assert passed.metrics()["drift.detected"] == 0.0 and "no drift" in passed.markdown("techdocs", "same.csv")
