"""Benchmark rankers against annotations: any irflow system, or a custom reranker.

Per query, over the annotated candidates (the truth: zELO scores, or human grades):

* ``nDCG`` — the whole candidate list with gains exp(score) (zbench's choice: exp of a zELO is the
  Bradley–Terry strength), and ``nDCG@k``.
* ``accuracy`` — pairwise accuracy: the share of candidate pairs the ranker orders as the truth
  does. Pairs tied in the truth carry no preference and are left out; a pair the ranker ties
  counts ½. (zbench counts both kinds as errors and divides by all n(n−1)/2 pairs.)
* ``R@k`` with ``k_gt`` (default k): how many of the truth's top ``k_gt`` the ranker puts in its
  top k, divided by **min(k_gt, n)**. zbench divides by ``k_gt`` itself, so a query with fewer than
  k_gt candidates can never reach 1 there; here it can, and the measure stays comparable across
  queries of different sizes.

Tie policy, everywhere: tied scores are ordered at random and the expectation is reported —
nDCG averages the gains of a tie group over its positions (McSherry & Najork, ECIR 2008),
accuracy counts a tie ½, recall counts a document of a tie group that straddles the cut by the
chance it falls inside. A candidate a system did not retrieve scores −inf: a tie at the bottom.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from irflow.tasks.annotate.candidates import Texts
from irflow.tasks.core.schema import Dataset, InputError


@runtime_checkable
class Reranker(Protocol):
    """A custom reranker: relevance scores (higher = more relevant) of ``documents`` for ``query``."""

    async def score(self, query: str, documents: list[str]) -> list[float]: ...


class ModelReranker:
    """Any irflow relevance model as a reranker (embed.inference.score_pairs, run in a worker thread)."""

    def __init__(self, model: str) -> None:
        self.model = model

    async def score(self, query: str, documents: list[str]) -> list[float]:
        from irflow.tasks.embed.inference import score_pairs

        return await asyncio.to_thread(score_pairs, self.model, query, documents)


# ---------------------------------------------------------------------------------------------
# per-query measures


def _tie_groups(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order by score descending and the tie-group id of each position in that order."""
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    return order, np.concatenate([[0], np.cumsum(ordered[1:] != ordered[:-1])]) if len(ordered) else np.zeros(0, int)


def ndcg(gains: np.ndarray, predicted: np.ndarray, k: int | None = None) -> float:
    """nDCG@k (k=None: the whole list) of ``predicted`` scores against ``gains``; ties averaged."""
    gains, predicted = np.asarray(gains, np.float64), np.asarray(predicted, np.float64)
    n = len(gains) if k is None else min(k, len(gains))
    if n == 0:
        return float("nan")
    order, group = _tie_groups(predicted)
    sums = np.bincount(group, weights=gains[order])
    shown = (sums / np.bincount(group))[group]  # each position gets its tie group's mean gain
    discount = 1.0 / np.log2(np.arange(2, n + 2))
    ideal = float(np.sort(gains)[::-1][:n] @ discount)
    return float(shown[:n] @ discount / ideal) if ideal > 0 else float("nan")


def pairwise_accuracy(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Share of pairs with a truth preference that ``predicted`` orders the same way (ties ½)."""
    truth, predicted = np.asarray(truth, np.float64), np.asarray(predicted, np.float64)
    i, j = np.triu_indices(len(truth), 1)
    t = np.sign(truth[i] - truth[j])
    with np.errstate(invalid="ignore"):
        p = np.sign(np.nan_to_num(predicted[i] - predicted[j], nan=0.0))  # -inf - -inf: a tie
    keep = t != 0
    if not keep.any():
        return float("nan")
    return float(np.where(p[keep] == 0, 0.5, p[keep] == t[keep]).mean())


def top_probability(scores: np.ndarray, k: int) -> np.ndarray:
    """P(document in the top k) when ties are ordered at random."""
    scores = np.asarray(scores, np.float64)
    out = np.zeros(len(scores))
    if k <= 0 or len(scores) == 0:
        return out
    order, group = _tie_groups(scores)
    if k >= len(scores):
        out[:] = 1.0
        return out
    cut = group[k - 1]
    members = group == cut
    before = int(np.sum(group < cut))
    out[order[group < cut]] = 1.0
    out[order[members]] = (k - before) / members.sum()
    return out


def recall_at_k(truth: np.ndarray, predicted: np.ndarray, k: int, k_gt: int | None = None) -> float:
    """Expected share of the truth's top ``k_gt`` found in the predicted top ``k``; denominator min(k_gt, n)."""
    k_gt = k if k_gt is None else k_gt
    n = len(truth)
    if n == 0 or k < 1 or k_gt < 1:
        return float("nan")
    overlap = float(top_probability(truth, k_gt) @ top_probability(predicted, k))
    return overlap / min(k_gt, n)


# ---------------------------------------------------------------------------------------------
# tables


def measure_names(ks: Sequence[int] = (5, 10), k_gt: int | None = None) -> list[str]:
    return [
        "nDCG",
        *(f"nDCG@{k}" for k in ks),
        "accuracy",
        *(f"R@{k}" if k_gt is None else f"R@{k}(gt={k_gt})" for k in ks),
    ]


def benchmark(
    truth: pd.DataFrame,
    predicted: pd.DataFrame,
    *,
    ks: Sequence[int] = (5, 10),
    k_gt: int | None = None,
    gain: str = "exp",
) -> pd.DataFrame:
    """Per-query measures (query_id, metric, value) of ``predicted`` (query_id, doc_id, score) against ``truth``
    (query_id, doc_id, score) over the truth's documents. ``gain``: ``exp`` (zELO scores, zbench) or
    ``linear`` (integer grades, trec_eval's nDCG gain)."""
    if gain not in ("exp", "linear"):
        raise InputError(f"gain must be 'exp' or 'linear', not {gain!r}")
    if predicted.duplicated(["query_id", "doc_id"]).any():
        raise InputError("predicted scores: a (query_id, doc_id) appears twice")
    merged = (
        truth[["query_id", "doc_id", "score"]]
        .astype({"query_id": "str", "doc_id": "str"})
        .merge(
            predicted[["query_id", "doc_id", "score"]].astype({"query_id": "str", "doc_id": "str"}),
            on=["query_id", "doc_id"],
            how="left",
            suffixes=("_truth", "_pred"),
        )
    )
    merged["score_pred"] = merged["score_pred"].fillna(-np.inf)
    rows = []
    for qid, group in merged.groupby("query_id", sort=True):
        t, p = group["score_truth"].to_numpy(np.float64), group["score_pred"].to_numpy(np.float64)
        gains = np.exp(t - t.max()) if gain == "exp" else np.maximum(t, 0.0)  # exp(s - max): same nDCG, no overflow
        values = [
            ndcg(gains, p),
            *(ndcg(gains, p, k) for k in ks),
            pairwise_accuracy(t, p),
            *(recall_at_k(t, p, k, k_gt) for k in ks),
        ]
        rows += [(qid, name, value) for name, value in zip(measure_names(ks, k_gt), values)]
    return pd.DataFrame(rows, columns=["query_id", "metric", "value"]).astype({"query_id": "str", "value": "float64"})


def summarise(per_query: pd.DataFrame) -> dict[str, float]:
    """Mean of each measure over queries where it is defined (NaN: no preference / no gain to find)."""
    means = per_query.groupby("metric", sort=False)["value"].mean()
    return {str(m): float(v) for m, v in means.items()}


def system_predictions(dataset: Dataset, system: str, depth: int = 1000) -> pd.DataFrame:
    """Scores of an irflow system's run (tasks.retrieve) as predictions: query_id, doc_id, score."""
    from irflow.tasks.retrieve.searchers import retrieve

    return retrieve(dataset, system, min(depth, max(1, len(dataset.corpus)))).run[["query_id", "doc_id", "score"]]


async def reranker_predictions(
    reranker: Reranker, candidates: pd.DataFrame, texts: Texts, *, concurrency: int = 8
) -> pd.DataFrame:
    """Scores of a custom reranker on each query's candidates (``concurrency`` queries at a time)."""
    semaphore = asyncio.Semaphore(concurrency)
    groups = list(candidates.groupby("query_id", sort=True))

    async def one(qid: str, group: pd.DataFrame) -> pd.DataFrame:
        ids = group["doc_id"].astype(str).tolist()
        async with semaphore:
            scores = await reranker.score(texts.queries[str(qid)], [texts.documents[d] for d in ids])
        if len(scores) != len(ids):
            raise InputError(f"reranker returned {len(scores)} scores for {len(ids)} documents (query {qid!r})")
        return pd.DataFrame({"query_id": str(qid), "doc_id": ids, "score": np.asarray(scores, np.float64)})

    parts = await asyncio.gather(*(one(q, g) for q, g in groups))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["query_id", "doc_id", "score"])


def load_annotated(path: str | Path) -> tuple[pd.DataFrame, Texts]:
    """An ``AnnotatedQueryDocuments`` JSONL as a truth table (query_id, doc_id, rank, score) and its texts."""
    rows, queries, documents = [], {}, {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            qid = str(obj["query"]["id"])
            queries[qid] = str(obj["query"]["query"])
            for rank, doc in enumerate(obj["documents"], 1):
                documents[str(doc["id"])] = str(doc["content"])
                rows.append((qid, str(doc["id"]), rank, float(doc["score"])))
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(
                f"not an AnnotatedQueryDocuments line ({type(err).__name__}: {err})", path=str(path), line=number
            ) from None
    table = pd.DataFrame(rows, columns=["query_id", "doc_id", "rank", "score"]).astype(
        {"query_id": "str", "doc_id": "str", "rank": "int64", "score": "float64"}
    )
    return table, Texts(queries, documents)
