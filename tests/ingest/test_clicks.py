"""Click logs → graded judgements: a position-based click model simulated over the demo dataset's
true judgements, imported with ``--format clicks``, must give grades that track the true ones and
rank systems as the true judgements do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from support.clicks import EXAMINATION, simulate

from irflow.tasks import ingest
from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.clicks import click_judgements, fit_pbm, read_click_log
from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.retrieve.searchers import retrieve


@pytest.fixture(scope="module")
def techdocs_bm25() -> tuple[object, pd.DataFrame]:
    dataset = ingest.load_dataset("techdocs")
    return dataset, retrieve(dataset, "bm25", depth=100).run


def test_click_grades_track_true_grades_and_rank_systems_alike(techdocs_bm25, tmp_path: Path) -> None:
    dataset, run = techdocs_bm25
    log = simulate(dataset.qrels, run, sessions=150, seed=1)
    path = tmp_path / "clicks.tsv"
    log.to_csv(path, sep="\t", index=False)
    manifest = ingest.import_dataset(path, "clicks", "techdocs-clicks", base="techdocs")
    derived = ingest.load_dataset("techdocs-clicks")
    assert manifest["source"]["clicks"]["click_model"] == "pbm"
    examination = manifest["source"]["clicks"]["examination"]
    assert examination["1"] == 1.0 and examination["5"] == pytest.approx(EXAMINATION[4], abs=0.08)
    from irflow.cli.terminal import import_lines  # what `irflow datasets import` prints of the fit

    printed = dict(import_lines(manifest["source"]))
    assert (
        printed["click model"].startswith("PBM, fitted in ")
        and f"5: {examination['5']:.3f}" in printed["examination by rank"]
    )
    assert printed["click judgements"].startswith(f"{len(derived.qrels):,} of ")

    truth = {(q, d): g for q, d, g in dataset.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False)}
    pairs = derived.qrels.assign(
        true=[truth.get(k, 0) for k in zip(derived.qrels["query_id"], derived.qrels["doc_id"])]
    )
    rho = stats.spearmanr(pairs["relevance"], pairs["true"]).statistic
    assert rho >= 0.6, rho
    assert len(pairs) >= 0.9 * log.groupby(["query_id", "doc_id"]).ngroups  # 150 sessions: every shown pair judged

    rng = np.random.default_rng(0)
    reversed_top = run.assign(score=np.where(run["rank"] <= 10, run["rank"], run["score"] - 100))
    shuffled = run.assign(score=rng.random(len(run)))
    systems = {"bm25": run, "reversed top 10": order_run(reversed_top), "random": order_run(shuffled)}

    def ranking(qrels: pd.DataFrame) -> list[str]:
        scores = {name: mean(evaluate(r, qrels, ["nDCG@10"]))["nDCG@10"] for name, r in systems.items()}
        return sorted(scores, key=scores.get, reverse=True)  # type: ignore[arg-type]

    assert ranking(derived.qrels) == ranking(dataset.qrels) == ["bm25", "reversed top 10", "random"]


def test_position_bias_is_recovered_and_rare_pairs_stay_unjudged() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for q in range(40):
        gammas = rng.uniform(0.05, 0.9, 8)
        for _ in range(200):
            for position, doc in enumerate(rng.permutation(8), 1):
                rows.append(
                    (f"q{q}", f"d{doc}", position, 1, int(rng.random() < EXAMINATION[position - 1] * gammas[doc]))
                )
    log = pd.DataFrame(rows, columns=["query", "doc_id", "position", "impressions", "clicks"])
    log = log.groupby(["query", "doc_id", "position"], as_index=False)[["impressions", "clicks"]].sum()
    model = fit_pbm(log)
    assert np.allclose(model.examination.to_numpy(), EXAMINATION[:8], atol=0.05)
    rare = pd.concat([log, pd.DataFrame([("q0", "new", 1, 3, 3)], columns=log.columns)], ignore_index=True)
    judged, _ = click_judgements(rare, min_impressions=10)
    assert "new" not in set(judged["doc_id"]) and len(judged) == 40 * 8
    assert ((judged["low"] <= judged["attractiveness"]) & (judged["attractiveness"] <= judged["high"])).all()


def test_query_texts_map_to_base_queries_or_become_new_click_queries(tmp_path: Path) -> None:
    base = ingest.load_dataset("techdocs")
    known_id, known_text = base.queries[["query_id", "text"]].iloc[0]
    doc = base.corpus["doc_id"].iloc[0]
    rows = [(f"  {known_text.upper()} ", doc, 1, 20, 15), ("how do I page results", doc, 1, 20, 12)]
    path = tmp_path / "clicks.csv"
    pd.DataFrame(rows, columns=["query", "doc_id", "position", "impressions", "clicks"]).to_csv(path, index=False)
    ingest.import_dataset(path, "clicks", "tc", base="techdocs")
    derived = ingest.load_dataset("tc")
    assert known_id in set(derived.qrels["query_id"])
    new = derived.queries[derived.queries["query_id"].str.startswith("click-")]
    assert new["text"].tolist() == ["how do I page results"] and new["source"].tolist() == ["click"]


@pytest.mark.parametrize(
    "content, name, match",
    [
        ("query_id,doc_id,position\nq,d,1\n", "a.csv", r"lacks columns \['clicked'\]"),
        ("doc_id,position,clicked\nd,1,1\n", "a.csv", r"lacks columns \['query_id \(or query\)'\]"),
        (
            "query_id,doc_id,position,clicked\nq,d,0,1\n",
            "a.csv",
            r"row 1: field 'position' is '0'; expected an integer from 1 to 2\*\*63-1",
        ),
        ("query_id,doc_id,position,clicked\nq,d,1,2\n", "a.csv", r"row 1: field 'clicked' is '2'; expected 0 or 1"),
        ("query_id,doc_id,position,impressions,clicks\nq,d,1,1,x\n", "a.csv", r"field 'clicks' is 'x'"),
        ("query_id,doc_id,position,impressions,clicks\nq,d,1,2,3\n", "a.csv", r"field 'clicks'.*at most impressions"),
        ("query_id,doc_id,position,clicked\n", "a.csv", r"click log is empty"),
        ("x", "a.xlsx", r"unknown click log format '\.xlsx'"),
    ],
)
def test_bad_click_logs_fail_naming_file_row_and_field(tmp_path: Path, content: str, name: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputError, match=match) as error:
        read_click_log(path)
    assert str(path) in str(error.value)


def test_clicks_need_a_base(tmp_path: Path) -> None:
    path = tmp_path / "clicks.csv"
    path.write_text("query_id,doc_id,position,clicked\nq,d,1,1\n")
    with pytest.raises(InputError, match="--format clicks needs --base NAME"):
        ingest.import_dataset(path, "clicks", "x")
