"""Query drift: a sample from the evaluation set's own distribution passes, a shifted one is flagged
(seeded, real MiniLM embeddings), off-topic queries hidden among repeated reference queries too; the
combined verdict keeps its false-alarm rate over 100 same-distribution splits; the MMD permutation
test and the unseen-topic test are checked on synthetic values too."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.cli import irflow
from support.scifact import SCIFACT_ZIP, require_scifact

from irflow.tasks import ingest
from irflow.tasks.core.schema import InputError
from irflow.tasks.embed.inference import encode
from irflow.tasks.embed.models import resolve_model
from irflow.tasks.evalsets.drift import drift, mmd_permutation_test, read_queries, unseen_topic_test

COOKING = [
    "How long should I boil an egg for a runny yolk?",
    "What can I use instead of buttermilk in pancakes?",
    "How do I keep rice from sticking to the pot?",
    "Can I freeze cooked lasagna?",
    "What temperature should I roast a whole chicken at?",
    "How do I make a sourdough starter from scratch?",
    "Why did my bread not rise?",
    "How much salt goes in pasta water?",
    "What wine goes with mushroom risotto?",
    "How do I thicken a curry sauce?",
]


def embed(texts: list[str]) -> np.ndarray:
    model = resolve_model("minilm")
    return encode(model, texts, prompt=model.prompt("query"), max_seq_length=None)


@pytest.fixture(scope="module")
def techdocs() -> tuple[list[str], np.ndarray]:
    """techdocs' 80 queries and their embeddings, encoded once for the tests that split them many times."""
    queries = ingest.load_dataset("techdocs").queries["text"].astype(str).tolist()
    return queries, embed(queries)


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
    done = irflow("drift", "--dataset", "techdocs", "--current", str(log), "--permutations", "300",
                  "--output", str(out), "--fail-on-drift", env=env)  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.startswith("DRIFT: meaning MMD²")
    assert json.loads((out / "drift.json").read_text())["drift"] is True
    assert (out / "nearest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.csv").write_text("question\nhello\n")
    with pytest.raises(InputError, match=r"bad\.csv: the query log has no query or text column"):
        read_queries(tmp_path / "bad.csv")


def test_off_topic_queries_among_repeated_reference_queries_are_drift(techdocs: tuple[list[str], np.ndarray]) -> None:
    """30 techdocs queries repeated from the reference and 10 cooking questions (25 % off-topic): the repeats
    used to pull the MMD test to p 0.98 ("no drift" beside "unseen topics: 25.0%"); now they are left out of
    it and the unseen-topic share has its own test; both p-values are shown."""
    queries, vectors = techdocs
    picked = np.random.default_rng(0).permutation(len(queries))[:30]
    current = [queries[i].upper() + " " for i in picked] + COOKING  # case and spaces do not hide a repeat
    current_vectors = np.vstack([vectors[picked], embed(COOKING)])
    assert mmd_permutation_test(vectors, current_vectors, permutations=500)[1] > 0.1  # the miss, with repeats

    report = drift(queries, current, vectors, current_vectors, permutations=500)
    assert report.drift and report.repeated_queries == 30 and report.unseen_topic_share == 0.25, report.text()
    assert report.p_value < 0.005 and report.unseen_topic_p_value < 0.005
    assert report.combined_p_value == min(1.0, 2 * min(report.p_value, report.unseen_topic_p_value))
    first = report.text().splitlines()[0]
    assert first.startswith(f"DRIFT: meaning MMD² {report.mmd2:.4f}, permutation p {report.p_value:.4f}; ")
    assert f"unseen topics p {report.unseen_topic_p_value:.4f}" in first and "Bonferroni" in first
    assert "30 current queries repeat reference ones, left out of the meaning test" in first
    assert f"| {report.unseen_topic_p_value:.4f} |" in report.markdown("techdocs", "today.csv")
    assert report.metrics()["drift.unseen_topic_p_value"] == report.unseen_topic_p_value

    only_repeats = drift(queries, current[:30], vectors, current_vectors[:30], permutations=500)
    assert (only_repeats.mmd2, only_repeats.p_value, only_repeats.drift) == (0.0, 1.0, False)
    assert "every current query repeats a reference one: no meaning test" in only_repeats.text()


def test_no_drift_calibration_over_100_same_distribution_splits(techdocs: tuple[list[str], np.ndarray]) -> None:
    """techdocs split 100 times into two halves (embedded once): each test and the combined verdict reject
    about 5 % of the splits at 0.05 (a plain binomial test of the unseen-topic share rejected 17 %), and
    the nightly verdict (alpha 0.01, each test at 0.005) almost never fires."""
    queries, vectors = techdocs
    rng = np.random.default_rng(1)
    reports = []
    for seed in range(100):
        order = rng.permutation(len(queries))
        a, b = order[: len(order) // 2], order[len(order) // 2 :]
        reports.append(
            drift([queries[i] for i in a], [queries[i] for i in b], vectors[a], vectors[b], permutations=200, seed=seed)
        )
    share = {
        name: np.mean([getattr(r, name) < 0.05 for r in reports])
        for name in ("p_value", "unseen_topic_p_value", "combined_p_value")
    }
    assert all(s <= 0.10 for s in share.values()), share
    assert sum(r.drift for r in reports) <= 3
    assert len({r.unseen_topic_p_value for r in reports}) > 10  # the test is not stuck at 1


def test_unseen_topic_test_holds_its_level_where_a_plain_binomial_does_not() -> None:
    """Same-distribution values (i.i.d. normal, 40 reference and 40 current): the threshold estimated from 40
    values varies, so Binomial(n, 5 %) rejects far more than 5 %; the beta-binomial keeps to its level."""
    from scipy import stats

    rng = np.random.default_rng(3)
    ours, plain = [], []
    for _ in range(2000):
        within, nearest = rng.normal(size=40), rng.normal(size=40)
        threshold, share, p = unseen_topic_test(within, nearest)
        assert threshold == np.quantile(within, 0.05) and share == np.mean(nearest < threshold)
        ours.append(p < 0.05)
        plain.append(stats.binomtest(int(share * 40), 40, 0.05, alternative="greater").pvalue < 0.05)
    assert np.mean(ours) <= 0.06 < 0.1 < np.mean(plain)
    assert unseen_topic_test(np.arange(40.0), np.full(5, 100.0))[1:] == (0.0, 1.0)
