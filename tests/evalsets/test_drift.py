"""Query drift: a sample from the evaluation set's own distribution passes, a shifted one is flagged
(seeded, real MiniLM embeddings); the MMD permutation test is checked on synthetic vectors too."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _cli import irflow
from _scifact import SCIFACT_ZIP, require_scifact

from irflow.tasks import ingest
from irflow.tasks.core.schema import InputError
from irflow.tasks.embed.inference import encode
from irflow.tasks.embed.models import resolve_model
from irflow.tasks.evalsets.drift import drift, mmd_permutation_test, read_queries


def embed(texts: list[str]) -> np.ndarray:
    model = resolve_model("minilm")
    return encode(model, texts, prompt=model.prompt("query"), max_seq_length=None)


def test_mmd_test_separates_shifted_gaussians_and_not_equal_ones() -> None:
    rng = np.random.default_rng(0)
    same = mmd_permutation_test(rng.normal(size=(60, 8)), rng.normal(size=(60, 8)), permutations=300)
    shifted = mmd_permutation_test(rng.normal(size=(60, 8)), rng.normal(0.6, 1.0, size=(60, 8)), permutations=300)
    assert same[1] > 0.05 and shifted[1] < 0.01 and shifted[0] > same[0]


def test_same_distribution_passes_and_another_domain_drifts() -> None:
    """techdocs queries split in two halves (same distribution) vs techdocs against SciFact claims."""
    require_scifact()
    queries = ingest.load_dataset("techdocs").queries["text"].astype(str).tolist()
    order = np.random.default_rng(1).permutation(len(queries))
    half_a = [queries[i] for i in order[: len(order) // 2]]
    half_b = [queries[i] for i in order[len(order) // 2 :]]
    with zipfile.ZipFile(SCIFACT_ZIP) as zf:
        claims = [json.loads(line)["text"] for line in zf.read("scifact/queries.jsonl").decode().splitlines()[:40]]
    vectors_a, vectors_b, vectors_claims = embed(half_a), embed(half_b), embed(claims)

    same = drift(half_a, half_b, vectors_a, vectors_b, permutations=500)
    assert not same.drift and same.p_value > 0.05, same.text()
    shifted = drift(half_a, claims, vectors_a, vectors_claims, permutations=500)
    assert shifted.drift and shifted.p_value < 0.01, shifted.text()
    assert shifted.unseen_token_share > same.unseen_token_share and shifted.vocabulary_js > same.vocabulary_js
    assert shifted.unseen_topic_share > same.unseen_topic_share and shifted.unseen_examples
    assert drift(half_a, claims, vectors_a, vectors_claims, permutations=500) == shifted, "seeded: repeatable"


@pytest.mark.e2e
def test_drift_command_flags_a_shifted_log_with_its_exit_code(tmp_path: Path) -> None:
    require_scifact()
    with zipfile.ZipFile(SCIFACT_ZIP) as zf:
        claims = [json.loads(line)["text"] for line in zf.read("scifact/queries.jsonl").decode().splitlines()[:40]]
    log = tmp_path / "today.csv"
    pd.DataFrame({"query": claims + claims[:5], "count": 1}).to_csv(log, index=False)  # repeats count once
    assert len(read_queries(log)) == 40
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "drift"
    done = irflow("drift", "--reference", "techdocs", "--current", str(log), "--permutations", "300",
                  "--output", str(out), "--fail-on-drift", env=env)  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.startswith("DRIFT: meaning MMD²")
    assert json.loads((out / "drift.json").read_text())["drift"] is True
    assert (out / "nearest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.csv").write_text("question\nhello\n")
    with pytest.raises(InputError, match=r"bad\.csv: the query log has no query or text column"):
        read_queries(tmp_path / "bad.csv")
