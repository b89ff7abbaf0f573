"""Encoding speed without the model's loading: ``encode_job`` / ``encode_shard`` load the model before the
first encoded batch and record that apart as ``load_seconds`` (real MiniLM), only when something is still to
be encoded; the cost block and the report's encoding column show it beside documents/s."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.toy import tiny_dataset

from irflow.tasks.embed.sharding import corpus_job, encode_job, encode_shard
from irflow.tasks.report.cost import _rate
from irflow.tasks.retrieve.costs import fresh_costs
from irflow.tasks.systems.specs import DenseSpec, parse_system


@pytest.mark.fresh_encode  # the encode is timed: the model computes every text
def test_a_cold_encode_records_load_seconds_and_a_cached_key_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path / "cache"))
    dataset, spec = tiny_dataset(), parse_system("dense:minilm")
    assert isinstance(spec, DenseSpec)
    cold = encode_job(dataset, corpus_job(dataset, spec))
    assert cold["encoded"] == len(dataset.corpus) and cold["load_seconds"] > 0 and cold["seconds"] > 0
    warm = encode_job(dataset, corpus_job(dataset, spec))
    assert warm["from_cache"] == len(dataset.corpus) and "load_seconds" not in warm
    shard = encode_shard(dataset, corpus_job(dataset, spec), [0])
    assert shard["from_cache"] == len(dataset.corpus) and "load_seconds" not in shard

    fresh = fresh_costs({}, {}, [cold])
    assert fresh["load_seconds"] == cold["load_seconds"]
    assert fresh["documents_per_second"] == cold["encoded"] / cold["seconds"]
    assert _rate(fresh).endswith(f" (+{cold['load_seconds']:.1f} s load)")
    cached = fresh_costs({"load_seconds": 1.0}, {}, [{**warm, "cached": True}])
    assert "load_seconds" not in cached and _rate(cached) == "cached"
