"""Segment and error analysis on a hand-made dataset whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.compare import analysis
from irflow.tasks.core.schema import InputError

CORPUS = pd.DataFrame(
    {
        "doc_id": ["d1", "d2", "d3", "d4", "d5", "d6"],
        "title": ["Install", "Guide", "", "Snippet", "Deep dive", "Note"],
        "text": [
            "pip install quiver",
            "one two three four five six seven eight nine",
            "forum post here",
            "x = 1",
            "a b c d e f g h i j k l m n",
            "short",
        ],
        "doc_type": ["code", "guide", "forum", "code", "guide", ""],
    }
)
# words (title + text): d1 4, d2 10, d3 3, d4 4, d5 16, d6 2
QUERIES = pd.DataFrame(
    {
        "query_id": ["q1", "q2", "q3"],
        "text": ["install quiver", "how to post", "deep dive into it"],
        "category": ["setup", "setup", None],
    }
)
QRELS = pd.DataFrame(
    {"query_id": ["q1", "q1", "q2", "q2", "q3"], "doc_id": ["d1", "d2", "d3", "d4", "d5"], "relevance": [2, 0, 1, 1, 3]}
)


def run(rows: list[tuple[str, str]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["query_id", "doc_id"])
    frame["rank"] = frame.groupby("query_id").cumcount() + 1
    frame["score"] = 10.0 - frame["rank"]
    return frame[["query_id", "doc_id", "score", "rank"]]


RUNS = {
    "A": run([("q1", "d1"), ("q1", "d2"), ("q2", "d3"), ("q2", "d6"), ("q3", "d5"), ("q3", "d2")]),
    "B": run([("q1", "d2"), ("q1", "d4"), ("q2", "d4"), ("q2", "d3"), ("q3", "d6"), ("q3", "d1")]),
}
VALUES = {"A": {"q1": 1.0, "q2": 0.5, "q3": 1.0}, "B": {"q1": 0.25, "q2": 0.75, "q3": 0.0}}
PER_QUERY = pd.DataFrame(
    [
        {"system": s, "query_id": q, "metric": "nDCG@10", "value": v}
        for s, values in VALUES.items()
        for q, v in values.items()
    ]
)


def test_segments_mean_per_metadata_value_with_counts() -> None:
    table = analysis.segments(PER_QUERY, QUERIES, "category", "nDCG@10")
    assert list(table.columns) == ["category", "queries", "A", "B"]
    rows = table.set_index("category")
    assert rows.loc["setup"].tolist() == [2, 0.75, 0.5]
    assert rows.loc["(none)"].tolist() == [1, 1.0, 0.0]  # a query without the attribute
    assert table["category"].tolist() == ["setup", "(none)"]  # largest segment first
    with pytest.raises(InputError, match="category"):
        analysis.segments(PER_QUERY, QUERIES.drop(columns="category"), "category", "nDCG@10")


def test_query_features_bins_length_and_counts_relevant() -> None:
    features = analysis.query_features(QUERIES, QRELS).set_index("query_id")
    assert features["relevant documents"].tolist() == ["1", "2", "1"]  # q1: d2 is judged 0, not relevant
    assert features.loc["q1", "query length"] == "2 words" and features.loc["q3", "query length"] == "4 words"
    table = analysis.segments(PER_QUERY, QUERIES.merge(features.reset_index()), "query length", "nDCG@10")
    assert table["query length"].tolist() == ["2 words", "3 words", "4 words"]  # ordered bins, not by count


def test_document_shares_compare_retrieved_top_k_with_relevant() -> None:
    table = analysis.document_shares(RUNS, QRELS, CORPUS, "doc_type", k=2).set_index("doc_type")
    # relevant judgements: d1 code, d3 forum, d4 code, d5 guide
    assert table["relevant"].to_dict() == pytest.approx({"code": 0.5, "forum": 0.25, "guide": 0.25, "(none)": 0.0})
    # A's top 2: d1 code, d2 guide, d3 forum, d6 (none), d5 guide, d2 guide
    assert table["A"].to_dict() == pytest.approx({"code": 1 / 6, "guide": 3 / 6, "forum": 1 / 6, "(none)": 1 / 6})
    assert table["B"].to_dict() == pytest.approx({"code": 3 / 6, "guide": 1 / 6, "forum": 1 / 6, "(none)": 1 / 6})
    assert table["corpus"].sum() == pytest.approx(1.0) and table.index[0] == "code"
    top1 = analysis.document_shares(RUNS, QRELS, CORPUS, "doc_type", k=1).set_index("doc_type")
    assert top1["B"].to_dict() == pytest.approx({"guide": 1 / 3, "code": 1 / 3, "(none)": 1 / 3, "forum": 0.0})


def test_length_bias_means_and_rank_correlation() -> None:
    table = analysis.length_bias(RUNS, QRELS, CORPUS, k=2).set_index("set")
    assert table.loc["corpus", "mean_words"] == pytest.approx((4 + 10 + 3 + 4 + 16 + 2) / 6)
    assert table.loc["relevant", "mean_words"] == pytest.approx((4 + 3 + 4 + 16) / 4)
    assert table.loc["A", "mean_words"] == pytest.approx((4 + 10 + 3 + 2 + 16 + 10) / 6)
    assert np.isnan(table.loc["corpus", "spearman_rank_length"])
    longest_first = {"L": run([(q, d) for q in ("q1", "q2", "q3") for d in ("d5", "d2", "d1", "d6")])}
    rho = analysis.length_bias(longest_first, QRELS, CORPUS, k=4).set_index("set").loc["L", "spearman_rank_length"]
    assert rho == pytest.approx(-1.0)  # longer documents ranked higher: rank and length fall together


def test_disagreements_largest_absolute_difference_first() -> None:
    table = analysis.disagreements(PER_QUERY, "nDCG@10", "A", "B", n=2)
    assert table["query_id"].tolist() == ["q3", "q1"]
    assert table["delta"].tolist() == pytest.approx([-1.0, -0.75])
    assert table.columns.tolist() == ["query_id", "A", "B", "delta"]
    with pytest.raises(InputError):
        analysis.disagreements(PER_QUERY, "nDCG@10", "A", "A")


def test_side_by_side_shows_ids_grades_and_snippets() -> None:
    table = analysis.side_by_side(RUNS, "q1", QRELS, CORPUS, k=3, width=12)
    assert table["rank"].tolist() == [1, 2, 3]
    assert table["A doc"].tolist() == ["d1", "d2", ""]  # A returned two hits only
    assert table["A grade"].tolist()[:2] == [2, 0]
    assert table["B doc"].tolist()[:2] == ["d2", "d4"] and pd.isna(table["B grade"].iloc[1])  # d4 unjudged for q1
    assert table["A snippet"].iloc[0] == "Install: pi…" and table["B snippet"].iloc[0] == "Guide: one…"


def test_consistency_quartiles_and_zero_share() -> None:
    table = analysis.consistency(PER_QUERY, "nDCG@10").set_index("system")
    b = np.array([0.25, 0.75, 0.0])
    assert table.loc["B", ["mean", "std", "min", "max"]].tolist() == pytest.approx([b.mean(), b.std(ddof=1), 0.0, 0.75])
    assert table.loc["B", ["q1", "median", "q3"]].tolist() == pytest.approx(np.quantile(b, [0.25, 0.5, 0.75]))
    assert table.loc["B", "zero_share"] == pytest.approx(1 / 3) and table.loc["A", "zero_share"] == 0


def test_metric_curves_keep_families_with_two_or_more_cutoffs() -> None:
    means = {"A": {"nDCG@10": 0.5, "nDCG@100": 0.6, "P@10": 0.3, "Rprec": 0.4, "R@10": 0.2, "R@5": 0.1}}
    curves = analysis.metric_curves(means)
    assert curves[["family", "k", "value"]].values.tolist() == [
        ["nDCG", 10, 0.5],
        ["nDCG", 100, 0.6],
        ["R", 5, 0.1],
        ["R", 10, 0.2],
    ]
