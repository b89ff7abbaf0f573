"""Click logs → graded judgements, corrected for position bias.

A click log says which documents users clicked at which positions; a click is evidence of
relevance *and* of the position being looked at. The position-based model (PBM; Craswell et al.
2008, Chuklin, Markov & de Rijke 2015 "Click Models for Web Search", ch. 3) separates the two:

    P(click | query q, document d, position k) = θ_k · γ_qd

θ_k is the probability that position k is examined, γ_qd the probability that d is clicked when
examined (its attractiveness: the relevance signal). Both are fitted by expectation–maximisation on
the log itself (Wang et al., WSDM 2018, "Position bias estimation for unbiased learning to rank"):
an unclicked impression was either not examined, or examined and not attractive, with posterior

    P(E=1, R=0 | C=0) = θ(1−γ)/(1−θγ)      P(E=0, R=1 | C=0) = (1−θ)γ/(1−θγ).

θ is then scaled so that θ_1 = 1 (the model only fixes the product θγ), which makes γ the click
rate the document would have at the top. Grades: γ ≥ 0.5 → 3, ≥ 0.25 → 2, ≥ 0.1 → 1, else 0
(``thresholds``, the same mapping as zELO's); pairs shown fewer than ``min_impressions`` times are
not judged at all. Each judgement keeps its evidence: impressions, clicks, examined impressions
(Σ θ_k over its impressions) and a 90 % Wilson interval of γ from them.

Log rows, one per impression (``query_id`` or ``query``, ``doc_id``, ``position``, ``clicked``) or
aggregated (``query_id`` or ``query``, ``doc_id``, ``position``, ``impressions``, ``clicks``), in a
CSV, TSV, JSONL or Parquet file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest.canonical import CorpusSource, SplitSource
from irflow.tasks.ingest.custom import base_corpus, base_provenance, base_queries
from irflow.tasks.ingest.readers import fail_at_row, integer_column, read_log_table

THRESHOLDS = (0.5, 0.25, 0.1)  # γ for grades 3, 2, 1
MIN_IMPRESSIONS = 10
_WILSON_Z = 1.6448536269514722  # 90 % two-sided


@dataclass(frozen=True)
class ClickModel:
    """A fitted PBM: examination per position (θ_1 = 1) and attractiveness per (query, document)."""

    examination: pd.Series  # position -> θ_k
    pairs: pd.DataFrame  # query, doc_id, impressions, clicks, examined, attractiveness
    iterations: int


def read_click_log(path: str | Path) -> pd.DataFrame:
    """The log as ``query, doc_id, position, impressions, clicks`` (``query`` is the id or the text);
    a file that does not fit names the file, the row and the field."""
    path = Path(path)
    log = read_log_table(path, "click log")
    query_column = "query_id" if "query_id" in log.columns else "query" if "query" in log.columns else None
    aggregated = {"impressions", "clicks"} <= set(log.columns)
    needed = ["doc_id", "position", *(("impressions", "clicks") if aggregated else ("clicked",))]
    missing = [c for c in needed if c not in log.columns] + ([] if query_column else ["query_id (or query)"])
    if missing:
        raise InputError(
            f"click log lacks columns {missing}; expected query_id or query, doc_id, position and either clicked "
            "(one row per impression) or impressions and clicks (aggregated)",
            path=str(path),
        )
    if log.empty:
        raise InputError("click log is empty; expected at least one impression", path=str(path))
    out = pd.DataFrame({"query": log[query_column].astype(str).str.strip(), "doc_id": log["doc_id"].astype(str)})
    for name in ("position", *(("impressions", "clicks") if aggregated else ("clicked",))):
        out[name] = integer_column(log[name], name, path, minimum=1 if name == "position" else 0)
    if not aggregated:
        if (out["clicked"] > 1).any():
            fail_at_row(out["clicked"] > 1, "clicked", "0 or 1", log, path)
        out = out.rename(columns={"clicked": "clicks"}).assign(impressions=1)
    if (out["clicks"] > out["impressions"]).any():
        fail_at_row(out["clicks"] > out["impressions"], "clicks", "at most impressions", log, path)
    for name in ("query", "doc_id"):
        if (out[name] == "").any():
            fail_at_row(out[name] == "", name, "a non-empty id or text", log, path)
    return out.groupby(["query", "doc_id", "position"], as_index=False, sort=True)[["impressions", "clicks"]].sum()


def fit_pbm(log: pd.DataFrame, *, max_iterations: int = 500, tolerance: float = 1e-7) -> ClickModel:
    """Fit θ (per position) and γ (per query-document pair) by EM on an aggregated log."""
    pair_code, pair_keys = pd.factorize(pd.MultiIndex.from_frame(log[["query", "doc_id"]]))
    position_code, positions = pd.factorize(log["position"], sort=True)
    n, c = log["impressions"].to_numpy(np.float64), log["clicks"].to_numpy(np.float64)
    pair_impressions = np.bincount(pair_code, weights=n)
    position_impressions = np.bincount(position_code, weights=n)
    theta, gamma = np.full(len(positions), 0.5), np.full(len(pair_keys), 0.5)
    iterations = max_iterations
    for iteration in range(1, max_iterations + 1):
        t, g = theta[position_code], gamma[pair_code]
        unclicked = n - c
        denominator = np.maximum(1.0 - t * g, 1e-12)
        examined = c + unclicked * t * (1.0 - g) / denominator
        attractive = c + unclicked * (1.0 - t) * g / denominator
        new_theta = np.clip(np.bincount(position_code, weights=examined) / position_impressions, 1e-6, 1.0)
        new_gamma = np.clip(np.bincount(pair_code, weights=attractive) / pair_impressions, 1e-6, 1.0 - 1e-6)
        change = max(np.abs(new_theta - theta).max(), np.abs(new_gamma - gamma).max())
        theta, gamma = new_theta, new_gamma
        if change < tolerance:
            iterations = iteration
            break
    scale = theta[0]  # positions are sorted: θ of the first position shown
    theta, gamma = theta / scale, np.minimum(gamma * scale, 1.0)
    examined_impressions = np.bincount(pair_code, weights=n * theta[position_code])
    pairs = pd.DataFrame(
        {
            "query": pair_keys.get_level_values(0).astype(str),
            "doc_id": pair_keys.get_level_values(1).astype(str),
            "impressions": pair_impressions.astype(np.int64),
            "clicks": np.bincount(pair_code, weights=c).astype(np.int64),
            "examined": examined_impressions,
            "attractiveness": gamma,
        }
    )
    return ClickModel(pd.Series(theta, index=positions.astype(np.int64), name="examination"), pairs, iterations)


def click_judgements(
    log: pd.DataFrame, *, min_impressions: int = MIN_IMPRESSIONS, thresholds: tuple[float, ...] = THRESHOLDS
) -> tuple[pd.DataFrame, ClickModel]:
    """Graded judgements from a click log: ``query, doc_id, relevance`` plus the evidence of each
    (impressions, clicks, examined, attractiveness, low, high: a 90 % Wilson interval of γ)."""
    if min_impressions < 1:
        raise InputError(f"min_impressions must be >= 1, got {min_impressions}")
    if len(thresholds) != 3 or not 1 > thresholds[0] > thresholds[1] > thresholds[2] > 0:
        raise InputError(f"click grade thresholds must be three decreasing numbers in (0, 1), got {thresholds}")
    model = fit_pbm(log)
    pairs = model.pairs[model.pairs["impressions"] >= min_impressions].copy()
    gamma = pairs["attractiveness"].to_numpy()
    pairs["relevance"] = np.select([gamma >= t for t in thresholds], [3, 2, 1], default=0).astype(np.int64)
    pairs["low"], pairs["high"] = _wilson(gamma, pairs["examined"].to_numpy())
    return pairs.reset_index(drop=True), model


def _wilson(p: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z2 = _WILSON_Z**2
    n = np.maximum(n, 1e-9)
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _WILSON_Z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def clicks_over_base(
    path: str | Path,
    base: Dataset,
    split: str,
    *,
    min_impressions: int = MIN_IMPRESSIONS,
    thresholds: tuple[float, ...] = THRESHOLDS,
) -> tuple[CorpusSource, SplitSource, dict[str, Any]]:
    """Judgements derived from the click log at ``path`` over the corpus of dataset ``base``.

    A log's query is a query id of ``base``, or a query text: the text of a ``base`` query (case
    and spaces ignored) takes that query's id, any other text becomes a new query (id ``click-`` +
    a digest of the normalised text, ``source=click`` in its metadata).
    """
    log = read_click_log(path)
    judgements, model = click_judgements(log, min_impressions=min_impressions, thresholds=thresholds)
    queries = base_queries(base)
    by_id = {q[0] for q in queries}
    by_text = {_normalise(q[1]): q[0] for q in queries}
    ids: dict[str, str] = {}
    for text in dict.fromkeys(judgements["query"]):
        if text in by_id:
            ids[text] = text
        elif _normalise(text) in by_text:
            ids[text] = by_text[_normalise(text)]
        else:
            ids[text] = "click-" + hashlib.sha256(_normalise(text).encode()).hexdigest()[:12]
            queries.append((ids[text], text, {"source": "click"}, len(queries) + 1))
            by_id.add(ids[text])
    rows = [
        (ids[q], d, int(g), i)
        for i, (q, d, g) in enumerate(judgements[["query", "doc_id", "relevance"]].itertuples(index=False), 1)
    ]
    provenance = {**base_provenance(base), "clicks": summary(judgements, model, min_impressions, thresholds)}
    return base_corpus(base), SplitSource(split, queries, rows, f"{base.name} queries", str(path)), provenance


def _normalise(text: str) -> str:
    return " ".join(str(text).lower().split())


def summary(
    judgements: pd.DataFrame, model: ClickModel, min_impressions: int, thresholds: tuple[float, ...] = THRESHOLDS
) -> dict[str, Any]:
    """What the manifest records about a click-derived split (the model and the mapping)."""
    return {
        "click_model": "pbm",
        "em_iterations": model.iterations,
        "examination": {str(k): round(float(v), 6) for k, v in model.examination.items()},
        "min_impressions": min_impressions,
        "thresholds": list(thresholds),
        "pairs_seen": int(len(model.pairs)),
        "pairs_judged": int(len(judgements)),
        "median_interval_width": float(np.median(judgements["high"] - judgements["low"])) if len(judgements) else None,
    }
