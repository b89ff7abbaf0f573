"""Local judges: preferences from an irflow relevance model's or system's scores, standardised per query.

The preference is ``tanh(scale · (z_B − z_A))`` over z-scores within the query's candidates, so
judges on different scales are comparable; nothing leaves the machine and nothing costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.annotate.battle import Battle, Verdict
from irflow.tasks.core.schema import Dataset


@dataclass
class ScoreJudge:
    """A local judge from per-(query, document) relevance scores: ``tanh(scale · (z_B − z_A))``.

    ``compute()`` gives the raw score table (query_id, doc_id, score); ``prepare`` runs it once and
    standardises it per query (see :func:`standardise`).
    """

    name: str
    compute: Callable[[], pd.DataFrame]
    scale: float = 1.0
    source: dict[str, Any] = field(default_factory=dict)
    provider: str = "local"
    concurrency: int = 1
    price_per_1k: float = 0.0
    local: bool = True
    scores: dict[tuple[str, str], float] | None = None

    @property
    def version(self) -> str:
        return f"scores-v1:scale={self.scale:g}"

    def prepare(self) -> None:
        if self.scores is None:
            self.scores = standardise(self.compute())

    async def judge(self, battle: Battle) -> Verdict:
        self.prepare()
        assert self.scores is not None
        a = self.scores.get((battle.query_id, battle.doc_a_id))
        b = self.scores.get((battle.query_id, battle.doc_b_id))
        if a is None or b is None:
            return Verdict(None, error=f"no score for {battle.doc_a_id if a is None else battle.doc_b_id!r}")
        return Verdict(math.tanh(self.scale * (b - a)), f"z(A) = {a:.3f}, z(B) = {b:.3f}")

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "version": self.version, "scale": self.scale, **self.source}

    async def aclose(self) -> None:
        return None


def standardise(table: pd.DataFrame) -> dict[tuple[str, str], float]:
    """``(query_id, doc_id) -> z-score`` of ``score`` within each query (all 0 where a query's scores are equal)."""
    grouped = table.groupby("query_id", sort=False)["score"]
    std = grouped.transform("std", ddof=0).to_numpy(np.float64)
    centred = table["score"].to_numpy(np.float64) - grouped.transform("mean").to_numpy(np.float64)
    z = np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)
    return dict(zip(zip(table["query_id"].astype(str), table["doc_id"].astype(str)), z.tolist()))


def model_scores(dataset: Dataset, candidates: pd.DataFrame, model: str) -> pd.DataFrame:
    """Relevance of every candidate under ``model`` (embed.inference.score_pairs_many): query_id, doc_id, score."""
    from irflow.tasks.embed.inference import score_pairs_many
    from irflow.tasks.embed.vectors import document_texts

    doc_text = pd.Series(document_texts(dataset.corpus), index=dataset.corpus["doc_id"].astype(str).to_numpy())
    query_text = dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].fillna("").astype(str)))
    groups = list(candidates.groupby("query_id", sort=True))
    items = [(query_text[str(q)], doc_text.loc[g["doc_id"].astype(str)].tolist()) for q, g in groups]
    scores = score_pairs_many(model, items) if items else []
    parts = [g[["query_id", "doc_id"]].assign(score=s) for (_, g), s in zip(groups, scores)]
    return pd.concat(parts, ignore_index=True) if parts else candidates[["query_id", "doc_id"]].assign(score=0.0)


def system_scores(dataset: Dataset, candidates: pd.DataFrame, system: str, depth: int = 1000) -> pd.DataFrame:
    """Scores of every candidate in ``system``'s run (tasks.retrieve, ``depth`` hits a query).

    A candidate the system did not return gets the query's lowest returned score (a tie with the
    last hit: nothing is invented about its order), or 0 when the query returned nothing.
    """
    from irflow.tasks.retrieve.searchers import retrieve

    run = retrieve(dataset, system, min(depth, max(1, len(dataset.corpus)))).run
    merged = (
        candidates[["query_id", "doc_id"]]
        .astype(str)
        .merge(run[["query_id", "doc_id", "score"]], on=["query_id", "doc_id"], how="left")
    )
    floor = merged["query_id"].map(run.groupby("query_id")["score"].min()).fillna(0.0)
    merged["score"] = merged["score"].fillna(floor).astype(np.float64)
    return merged
